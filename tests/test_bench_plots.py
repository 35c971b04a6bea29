"""What the report's figures show: bins and their counts, axis limits, which panels are drawn, published markers;
and the report's parts around a benchmark's table (header, notes, figures, signatures, results, sources)."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

from capeval.bench.benchmarks import get_benchmark
from capeval.bench.plots import CHANCE, degenerate_reason, figure_data, plot_run, rating_bins
from capeval.bench.published import published_value, published_values, sources
from capeval.bench.report import (
    _figures,
    _notes,
    _report_header,
    _run_results,
    _signatures_block,
    _sources_section,
)
from capeval.bench.runner import BenchmarkRun, MetricOutcome


def _rating_run(
    human: list[float], scores: dict[str, list[float]], benchmark: str = "flickr8k_cf"
) -> BenchmarkRun:
    n = len(human)
    ds = datasets.Dataset.from_dict(
        {
            "item_id": [f"i{k}" for k in range(n)],
            "image_id": [f"img{k}" for k in range(n)],
            "candidate": ["c"] * n,
            "references": [["r"]] * n,
            "human_scores": [[h] for h in human],
            "category": [""] * n,
        }
    )
    outcomes = {k: MetricOutcome(k, k.upper(), values={}) for k in scores}
    return BenchmarkRun(
        get_benchmark(benchmark),
        ds,
        outcomes,
        {k: {"default": np.asarray(v, dtype=float)} for k, v in scores.items()},
    )


def test_few_rating_levels_get_one_bin_each_with_their_counts():
    bins, labels, counts = rating_bins(np.array([1, 1, 2, 4, 4, 4, 3]))
    assert labels == ["1", "2", "3", "4"]
    assert counts == [2, 1, 1, 3]
    assert bins.tolist() == [0, 0, 1, 3, 3, 3, 2]


def test_flickr8k_cf_fractions_fall_in_five_equal_width_bins_with_counts():
    # 9 distinct yes-fractions (> 8 levels): edges 0, .2, .4, .6, .8, 1; 1.0 goes in the last, closed bin
    human = np.array([0.0] * 6 + [0.1, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 0.9, 1.0, 1.0])
    _, labels, counts = rating_bins(human)
    assert labels == ["[0, 0.2)", "[0.2, 0.4)", "[0.4, 0.6)", "[0.6, 0.8)", "[0.8, 1]"]
    assert counts == [7, 2, 1, 2, 3]  # 0 x6 and 0.1 | 0.25, 1/3 | 0.5 | 2/3, 0.75 | 0.9, 1, 1


def test_a_metric_with_flat_central_scores_is_not_drawn_and_the_figure_says_why():
    rng = np.random.default_rng(0)
    human = rng.integers(1, 5, 200).astype(float).tolist()
    bleu4 = [1e-5 * k / 200 for k in range(194)] + [0.3] * 6  # per-sentence BLEU-4: ~0 but for 3 %
    spread = rng.random(200).tolist()
    assert degenerate_reason(np.array(bleu4)).startswith("90 % of the scores lie in [")
    assert degenerate_reason(np.array(spread)) is None
    data = figure_data(_rating_run(human, {"bleu4": bleu4, "wmd": spread}), n_resamples=0)
    assert [p.metric for p in data.panels] == ["WMD"]
    assert set(data.omitted) == {"BLEU4"}
    assert sum(data.panels[0].counts) == 200


def test_rating_figure_draws_tau_intervals_per_metric_and_the_published_value_beside_ours():
    rng = np.random.default_rng(1)
    human = rng.integers(0, 4, 300).astype(float) / 3
    scores = {"clipscore": (human + rng.normal(0, 0.5, 300)).tolist(), "length": rng.random(300).tolist()}
    run = _rating_run(human.tolist(), scores)
    data = figure_data(run, n_resamples=50)
    assert data.measure == "kendall_b"  # Flickr8k-CF's headline column
    assert set(data.intervals) == {"CLIPSCORE", "LENGTH"}
    for est, low, high in data.intervals.values():
        assert low < est < high
    from scipy.stats import kendalltau

    assert data.intervals["CLIPSCORE"][0] == pytest.approx(
        100 * kendalltau(scores["clipscore"], human).statistic
    )
    pub = published_value("flickr8k_cf", "clipscore", "kendall_b")
    assert data.published == ({"CLIPSCORE": pub.value} if pub else {})
    given = {"CLIPSCORE": (1.0, 0.0, 2.0)}
    assert figure_data(run, intervals=given).intervals == given


def _pairwise_run(acc: dict[str, dict[str, float]]) -> BenchmarkRun:
    ds = datasets.Dataset.from_dict({"item_id": ["p0"], "human_scores": [[]]})
    outcomes = {k: MetricOutcome(k, k, values=v) for k, v in acc.items()}
    return BenchmarkRun(get_benchmark("pascal50s"), ds, outcomes, {k: {"default": np.zeros(1)} for k in acc})


def test_pascal_accuracy_axis_starts_at_chance_with_published_markers_per_column():
    cols = ["HC", "HI", "HM", "MM", "mean"]
    run = _pairwise_run({"clipscore": dict(zip(cols, [60.0, 99.0, 97.0, 70.0, 81.5], strict=True))})
    data = figure_data(run)
    assert data.kind == "pairwise" and data.ylim == (CHANCE, 100.0)
    assert data.categories == ["HC", "HI", "HM", "MM", "Mean"]
    expected = [(p.value if (p := published_value("pascal50s", "clipscore", c)) else np.nan) for c in cols]
    np.testing.assert_array_equal(data.published_accuracy["clipscore"], expected)
    below = figure_data(_pairwise_run({"length": dict(zip(cols, [44.0, 52, 63, 50, 52], strict=True))}))
    assert below.ylim == (40.0, 100.0)  # a metric below chance widens the axis instead of vanishing


def test_plot_run_writes_a_png_for_both_kinds(tmp_path):
    rng = np.random.default_rng(2)
    human = rng.integers(1, 5, 60).astype(float)
    rating = _rating_run(human.tolist(), {"wmd": rng.random(60).tolist()})
    assert plot_run(rating, tmp_path / "r.png", n_resamples=20).stat().st_size > 0
    pair = _pairwise_run({"clipscore": {"HC": 60.0, "HI": 90.0, "HM": 80.0, "MM": 55.0, "mean": 71.0}})
    assert plot_run(pair, tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_report_header_names_the_title_version_and_context():
    from capeval import __version__

    lines = _report_header("Flickr tables", {"data": "benchmarks", "metrics": "wmd"})
    assert lines[:2] == ["# Flickr tables", ""]
    assert lines[2].startswith(f"capeval {__version__}, ")
    assert lines[2].endswith(". data: `benchmarks`. metrics: `wmd`.")
    assert lines[4].startswith("Cells read **ours (published, ours − published)**") and lines[-1] == ""
    assert _report_header("T", None)[2].count("`") == 0  # no context, no pairs


def test_notes_list_the_protocol_then_skipped_metrics_and_each_metrics_notes():
    run = _rating_run([1.0, 2.0], {"wmd": [0.1, 0.2]})
    run.outcomes = {
        "a": MetricOutcome("a", "Alpha", skipped="no images"),
        "b": MetricOutcome("b", "Beta", notes=["vectors: GloVe", "2 empty captions"]),
    }
    protocol = [f"- {note}" for note in run.benchmark.notes]
    assert _notes(run) == [
        *protocol,
        "- **Alpha skipped**: no images",
        "- Beta: vectors: GloVe",
        "- Beta: 2 empty captions",
    ]


def test_figures_link_the_plot_they_draw_and_add_the_statistics_asked_for(tmp_path):
    rng = np.random.default_rng(3)
    run = _rating_run(rng.integers(1, 5, 40).astype(float).tolist(), {"wmd": rng.random(40).tolist()})
    assert _figures(run, tmp_path, plots=False, stats=0) == []
    lines = _figures(run, tmp_path, plots=True, stats=0)
    assert lines == [f"![{run.benchmark.title}](plots/flickr8k_cf.png)", ""]
    assert (tmp_path / "flickr8k_cf.png").read_bytes()[:4] == b"\x89PNG"
    with_stats = _figures(run, tmp_path / "none", plots=False, stats=20)
    assert with_stats and any("20 resamples" in line for line in with_stats)
    assert not (tmp_path / "none").exists()


def test_signatures_block_folds_the_signatures_of_metrics_that_ran():
    run = _rating_run([1.0, 2.0], {})
    run.outcomes = {
        "a": MetricOutcome("a", "Alpha", signature="alpha|v=1", computed=3, cached=2, seconds=1.25),
        "b": MetricOutcome("b", "Beta", signature="beta|v=1", skipped="failed"),
        "c": MetricOutcome("c", "Gamma"),
    }
    assert _signatures_block(run) == [
        "<details><summary>Signatures</summary>",
        "",
        "  - Alpha: `alpha|v=1` (3 computed, 2 from cache, 1.2 s)",
        "",
        "</details>",
        "",
    ]
    run.outcomes = {"c": MetricOutcome("c", "Gamma")}
    assert _signatures_block(run) == []


def test_run_results_give_values_matching_published_values_and_other_settings():
    run = _rating_run([1.0, 2.0, 3.0], {}, benchmark="flickr8k_expert")
    run.outcomes = {
        "bleu4": MetricOutcome("bleu4", "BLEU-4", values={"kendall_c": 30.0}, notes=["n"]),
        "wmd": MetricOutcome("wmd", "WMD", values={"kendall_c": 40.0}, signature="wmd|vectors=glove-6b-50d"),
    }
    entry = _run_results(run)
    assert entry["benchmark"] == "flickr8k_expert" and entry["items"] == 3
    bleu4 = entry["metrics"]["bleu4"]
    assert bleu4["published"]["kendall_c"] == published_value("flickr8k_expert", "bleu4", "kendall_c").value
    assert bleu4["values"] == {"kendall_c": 30.0} and bleu4["notes"] == ["n"] and bleu4["skipped"] is None
    # The word2vec figures of the WMD paper are another setting than a GloVe run: listed apart, not compared.
    others = entry["metrics"]["wmd"]["published_other_settings"]
    expected = [p for p in published_values("flickr8k_expert", "wmd") if p.setting]
    assert [o["value"] for o in others] == [p.value for p in expected] and expected
    assert all(o["setting"] for o in others)


def test_sources_section_cites_each_source_once_in_sorted_order():
    assert _sources_section(set()) == []
    citations = sources()
    keys = sorted(citations)[:2]
    assert _sources_section(set(reversed(keys))) == [
        "## Sources of the published values",
        "",
        *(f"- `{k}`: {citations[k]}" for k in keys),
        "",
    ]
