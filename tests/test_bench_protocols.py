"""Protocol details: reference exclusion, rating aggregation, reference draws, VATEX-EVAL and system level."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest
from scipy import stats

from capeval.bench import (
    accuracy_by_category,
    composite_references,
    draw_references,
    exclude_candidates_in_references,
    load_composite,
    load_flickr8k_cf,
    load_flickr8k_expert,
    load_vatex_eval,
    rating_correlations,
    rating_rows,
    remove_judged_from_references,
    system_level_correlation,
    vatex_eval_correlation,
    vatex_references,
)

FIX = Path(__file__).parent / "fixtures" / "bench"


def test_expert_protocol_drops_pairs_whose_candidate_is_a_reference_of_its_image():
    ds = exclude_candidates_in_references(load_flickr8k_expert(FIX / "flickr8k"))
    assert len(ds) == 5
    assert "1000000001_a1b2c3d4e5.jpg|1000000001_a1b2c3d4e5.jpg#4" not in ds["item_id"]


def test_method_a_keeps_each_rating_method_b_averages_them():
    ds = exclude_candidates_in_references(load_flickr8k_expert(FIX / "flickr8k"))
    idx, human, groups = rating_rows(ds, "A")
    assert len(idx) == 15 and list(idx[:3]) == [0, 0, 0]
    assert list(human[:3]) == [1.0, 1.0, 2.0]
    idx_b, human_b, _ = rating_rows(ds, "B")
    assert list(idx_b) == [0, 1, 2, 3, 4]
    assert human_b[0] == pytest.approx(4 / 3)
    scores = [0.1, 0.2, 0.3, 0.4, 0.5]
    out = rating_correlations(scores, ds, "A", ("kendall_c", "kendall_b"))
    assert out["kendall_c"] == pytest.approx(
        100 * stats.kendalltau(np.repeat(scores, 3), human, variant="c").statistic
    )
    with pytest.raises(ValueError, match="4 scores for 5 items"):
        rating_correlations(scores[:4], ds)


def test_method_a_repeats_each_score_for_each_rating_as_scipy_on_the_expanded_vectors():
    ds = datasets.Dataset.from_dict({"human_scores": [[1.0, 2.0], [4.0, 4.0], [2.0, 3.0]]})
    scores = [0.1, 0.5, 0.3]
    x, y = [0.1, 0.1, 0.5, 0.5, 0.3, 0.3], [1, 2, 4, 4, 2, 3]
    out = rating_correlations(scores, ds, "A", ("kendall_c", "kendall_b"))
    assert out["kendall_c"] == pytest.approx(100 * stats.kendalltau(x, y, variant="c").statistic)
    assert out["kendall_b"] == pytest.approx(100 * stats.kendalltau(x, y, variant="b").statistic)


def test_cf_protocol_removes_every_judged_caption_of_an_image_from_its_references():
    ds = remove_judged_from_references(load_flickr8k_cf(FIX / "flickr8k"))
    first = ds[0]  # image 1000000001_a1b2c3d4e5: its own caption #2 was judged, so 4 references remain
    assert "The dog plays in a field ." not in first["references"]
    assert len(first["references"]) == 4
    assert all(c not in r for c, r in zip(ds["candidate"], ds["references"], strict=True))


def test_composite_hard_setting_removes_the_rated_reference_despite_case_and_punctuation():
    ds = load_composite(FIX / "composite")
    hard = composite_references(ds)
    first = hard[0]  # rated as "a dog runs across the grass", stored as "A dog runs across the grass ."
    assert first["candidate"] == "a dog runs across the grass"
    assert "A dog runs across the grass ." not in first["references"]
    assert all(len(r) == 4 for r in hard["references"])
    coco = hard.filter(lambda r: r["source"] == "coco")
    assert "A pizza with cheese on a table" not in coco[0]["references"]
    easy = composite_references(ds, exclude_candidate=False)
    assert easy["references"] == ds["references"]


def test_reference_draws_are_seeded_distinct_and_of_the_requested_size():
    refs = [[f"r{i}" for i in range(48)], [f"s{i}" for i in range(3)]]
    draws = draw_references(refs, 5, 5, seed=0)
    assert len(draws) == 5
    assert all(len(d[0]) == 5 and set(d[0]) <= set(refs[0]) for d in draws)
    assert all(d[1] == refs[1] for d in draws)  # fewer than five: all of them
    assert len({tuple(d[0]) for d in draws}) > 1
    assert draw_references(refs, 5, 5, seed=0) == draws
    assert draw_references(refs, 5, 5, seed=1) != draws


def test_accuracy_by_category_reports_each_category_and_their_unweighted_mean():
    a = [1, 1, 1, 0, 0, 0]
    b = [0, 0, 0, 1, 1, 1]
    labels = [0, 0, 1, 1, 1, 1]
    cats = ["HC", "HC", "HC", "MM", "MM", "MM"]
    out = accuracy_by_category(a, b, labels, cats, ["HC", "HI", "MM"])
    assert out == {"HC": pytest.approx(200 / 3), "MM": 100.0, "mean": pytest.approx((200 / 3 + 100) / 2)}


def test_accuracy_by_category_counts_a_tie_as_half_a_correct_answer():
    a, b = [0.9, 0.9, 0.5, 0.2], [0.1, 0.1, 0.5, 0.8]
    out = accuracy_by_category(a, b, [0, 1, 0, 1], ["HC", "HI", "HM", "MM"], ["HC", "HI", "HM", "MM"])
    assert out == {"HC": 100.0, "HI": 0.0, "HM": 50.0, "MM": 100.0, "mean": 62.5}


def test_vatex_protocol_averages_per_annotator_correlations_of_rounded_scores():
    ds = load_vatex_eval(FIX / "vatex_eval")
    rng = np.random.default_rng(0)
    scores = rng.random(len(ds)) + 1e-6
    out = vatex_eval_correlation(scores, ds)
    h = np.array(ds["human_scores"])
    x = np.around(scores, 4)
    expected_k = np.mean([stats.kendalltau(x, h[:, j]).statistic for j in range(3)])
    expected_s = np.mean([stats.spearmanr(x, h[:, j]).statistic for j in range(3)])
    assert out["kendall"] == pytest.approx(100 * expected_k)
    assert out["spearman"] == pytest.approx(100 * expected_s)
    assert len(out["kendall_per_annotator"]) == 3
    assert vatex_eval_correlation(scores, ds["human_scores"], round_decimals=None)[
        "kendall"
    ] == pytest.approx(100 * np.mean([stats.kendalltau(scores, h[:, j]).statistic for j in range(3)]))
    with pytest.raises(ValueError, match="17 scores"):
        vatex_eval_correlation(scores[:17], ds)


def test_vatex_references_are_the_first_n_and_none_for_zero():
    refs = [[f"r{i}" for i in range(9)]]
    assert vatex_references(refs, 0) is None
    assert vatex_references(refs, 1) == [["r0"]]
    assert vatex_references(refs, 9) == refs


def test_system_level_correlation_of_per_system_means():
    systems = ["a", "a", "b", "b", "c", "c", "h"]
    scores = [0.1, 0.3, 0.5, 0.7, 0.2, 0.2, 0.9]
    human = {"a": 1.0, "b": 3.0, "c": 2.0, "h": 5.0}
    out = system_level_correlation(scores, systems, human)
    means = [0.2, 0.6, 0.2, 0.9]
    assert out["pearson"] == pytest.approx(100 * stats.pearsonr(means, [1, 3, 2, 5]).statistic)
    assert out["n_systems"] == 4
    assert system_level_correlation(scores, systems, human, exclude=["h"])["n_systems"] == 3
    per_item = [1, 1, 3, 3, 2, 2, 5]
    assert system_level_correlation(scores, systems, per_item)["pearson"] == pytest.approx(out["pearson"])
    with pytest.raises(ValueError, match="no human score"):
        system_level_correlation(scores, systems, {"a": 1, "b": 2})
