"""Loaders and protocols on the real benchmark files of ../shared/benchmarks (skipped when absent)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from capeval.bench import (
    draw_references,
    exclude_candidates_in_references,
    load_abstract50s,
    load_clipscore_json,
    load_flickr8k_cf,
    load_flickr8k_expert,
    load_pascal50s,
    load_pascal50s_json,
    load_vatex_eval,
    rating_rows,
    remove_judged_from_references,
    vatex_eval_correlation,
)
from capeval.scoring.baselines import java_available


@pytest.fixture(scope="module")
def expert(benchmarks_dir):
    return load_flickr8k_expert(benchmarks_dir / "flickr8k")


@pytest.fixture(scope="module")
def pascal(benchmarks_dir):
    return load_pascal50s(benchmarks_dir / "pascal50s")


def test_flickr8k_expert_protocol_removes_158_pairs_and_keeps_16992_ratings(expert):
    assert len(expert) == 5822
    assert sum(expert["candidate_in_references"]) == 158
    kept = exclude_candidates_in_references(expert)
    assert len(kept) == 5664
    assert all(c not in r for c, r in zip(kept["candidate"], kept["references"], strict=True))
    idx, human, _ = rating_rows(kept, "A")
    assert len(human) == 16992
    assert set(human.tolist()) == {1.0, 2.0, 3.0, 4.0}


def test_flickr8k_expert_from_official_files_equals_the_clipscore_authors_json(expert, benchmarks_dir):
    kept = exclude_candidates_in_references(expert)
    js = load_clipscore_json(benchmarks_dir / "flickr8k" / "flickr8k_expert_clipscore_format.json")
    ours = Counter(
        (i, c, tuple(h))
        for i, c, h in zip(kept["image_id"], kept["candidate"], kept["human_scores"], strict=True)
    )
    theirs = Counter(
        (i, c, tuple(h)) for i, c, h in zip(js["image_id"], js["candidate"], js["human_scores"], strict=True)
    )
    assert ours == theirs
    # the benchmark loader reads the same JSON when given it
    via_loader = load_flickr8k_expert(benchmarks_dir / "flickr8k" / "flickr8k_expert_clipscore_format.json")
    assert via_loader["candidate"] == js["candidate"] and len(via_loader) == 5664


def test_flickr8k_cf_partial_file_keeps_references_for_every_item(benchmarks_dir):
    ds = load_flickr8k_cf(benchmarks_dir / "flickr8k")
    assert len(ds) == 47288
    assert all(0.0 <= h[0] <= 1.0 for h in ds["human_scores"][:1000])
    removed = remove_judged_from_references(ds)
    assert min(len(r) for r in removed["references"]) >= 3
    # One occurrence is removed, as the CLIPScore script's list.remove does: a caption left behind is one
    # the image lists twice (one image, "A group of men are playing rugby .").
    left = [
        (c, before)
        for c, after, before in zip(
            removed["candidate"], removed["references"], ds["references"], strict=True
        )
        if c in after
    ]
    assert len(left) == 1 and all(before.count(c) == 2 for c, before in left)


def test_pascal50s_has_1000_pairs_per_category_with_the_consensus_labels(pascal, benchmarks_dir):
    assert Counter(pascal["category"]) == {"HC": 1000, "HI": 1000, "HM": 1000, "MM": 1000}
    assert set(pascal["label_source"]) == {"pascal_50s_consensus_labels.json (48-judgment consensus)"}
    majority11 = [0 if a > b else 1 for a, b in pascal["votes_11"]]
    agree = sum(int(m == label) for m, label in zip(majority11, pascal["label"], strict=True))
    assert agree == 3439  # the README's count of agreements between the consensus and the 11 votes
    assert min(len(r) for r in pascal["references"]) >= 47
    js = load_pascal50s_json(benchmarks_dir / "pascal50s")
    assert Counter(js["category"]) == {"HC": 1000, "HI": 1000, "HM": 1000, "MM": 1000}
    assert all(len(r) == 5 for r in js["references"])


def test_pascal50s_reference_draws_give_five_of_the_images_sentences(pascal):
    # Every pair's pool leaves out both candidates, compared after whitespace normalisation: pascal50S.mat
    # holds "A man riding a  white horse." (two spaces), candidate of an HC pair of 2008_007612.jpg.
    assert all(not set(c) & set(r) for c, r in zip(pascal["candidates"], pascal["references"], strict=True))
    draws = draw_references(pascal["references"][:50], 5, 5, seed=0)
    for d in draws:
        for drawn, full, cands in zip(d, pascal["references"][:50], pascal["candidates"][:50], strict=True):
            assert len(drawn) == 5 and set(drawn) <= set(full) and not set(drawn) & set(cands)


def test_abstract50s_has_400_pairs_with_48_references(benchmarks_dir):
    ds = load_abstract50s(benchmarks_dir / "abstract50s")
    assert len(ds) == 400
    assert all(len(r) == 48 for r in ds["references"])
    assert set(ds["label"]) == {-1}  # the public files carry no votes


def test_vatex_eval_has_18000_candidates_and_the_protocol_runs_on_it(benchmarks_dir):
    ds = load_vatex_eval(benchmarks_dir / "vatex_eval")
    assert len(ds) == 18000 and len(set(ds["video_id"])) == 3000
    assert all(len(r) == 9 for r in ds["references"][:500])
    lengths = np.array([len(c.split()) for c in ds["candidate"]], dtype=float)
    out = vatex_eval_correlation(lengths, ds)
    assert -100 < out["kendall"] < 100 and len(out["spearman_per_annotator"]) == 3


@pytest.mark.slow
@pytest.mark.skipif(not java_available(), reason="pycocoevalcap needs Java")
def test_flickr8k_expert_reproduces_the_published_ngram_correlations(benchmarks_dir, tmp_path):
    from capeval.bench import ScoreCache, published_value, run_benchmark

    run = run_benchmark(
        "flickr8k_expert",
        ["bleu4", "rougeL", "cider"],
        data_dir=benchmarks_dir,
        cache=ScoreCache(tmp_path),
        progress=False,
    )
    for key in ("bleu4", "rougeL", "cider"):
        values = run.outcomes[key].values
        for col in ("kendall_c", "kendall_b"):
            pub = published_value("flickr8k_expert", key, col)
            assert values[col] == pytest.approx(
                pub.value, abs=0.05 if pub.value == round(pub.value, 1) else 0.0006
            )
