"""The runner, score cache, metric adapters, report and CLI, with trivial callables on the format fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from capeval.bench import (
    BENCHMARKS,
    BenchMetric,
    ScoreCache,
    metric_from_callable,
    run_benchmark,
    write_report,
)
from capeval.bench.cli import add_bench_parser, main
from capeval.bench.published import published_values, sources
from capeval.scoring.metric_names import resolve_metric

FIX = Path(__file__).parent / "fixtures" / "bench"


def overlap(predictions, references=None):
    """Unigram overlap with the best reference: a trivial reference-based metric."""
    out = []
    for p, refs in zip(predictions, references, strict=True):
        words = set(p.lower().split())
        out.append(max(len(words & set(r.lower().split())) / max(len(words), 1) for r in refs))
    return out


class CountingMetric:
    """A reference-free callable with a signature and a call counter."""

    signature = "counting|v=1"
    uses_references = False

    def __init__(self):
        self.calls = 0
        self.items = 0

    def __call__(self, predictions):
        self.calls += 1
        self.items += len(predictions)
        return {"scores": [float(len(p)) for p in predictions], "signature": self.signature}


def test_any_callable_runs_on_a_benchmark_and_fills_the_papers_columns(tmp_path):
    run = run_benchmark(
        "flickr8k_expert", [overlap, "length"], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    assert run.skipped is None and len(run.dataset) == 5
    out = run.outcomes["overlap"]
    assert out.skipped is None
    assert set(out.values) == {"kendall_c", "kendall_b", "kendall_c_B", "kendall_b_B"}
    assert out.signature.startswith("overlap|callable=")
    assert np.isfinite(run.outcomes["length"].values["kendall_c"])


# A fixed score per candidate of tests/fixtures/bench/flickr8k/ExpertAnnotations.txt (its row 2 pairs 1000_a.jpg
# with its own caption #4 and is dropped by the protocol, leaving 5 candidates).
FIXED_SCORES = {
    "Kids building a sandcastle by the sea .": 0.8,  # 1000_a.jpg, 2000_b.jpg#1, ratings 1 1 2
    "A man on a bike .": 0.2,  # 1000_a.jpg, 3000_c.jpg#2, ratings 1 1 1
    "Someone cycling through traffic .": 0.5,  # 2000_b.jpg, 3000_c.jpg#3, ratings 2 1 2
    "A dog runs across the grass .": 0.4,  # 2000_b.jpg, 1000_a.jpg#0, ratings 1 2 1
    "Two kids on the sand .": 0.9,  # 3000_c.jpg, 2000_b.jpg#2, ratings 3 2 2
}


def fixed_scores(predictions, references=None):
    return [FIXED_SCORES[p] for p in predictions]


def test_flickr8k_expert_is_scored_with_method_a_one_row_per_expert_rating(tmp_path):
    from scipy.stats import kendalltau

    run = run_benchmark(
        "flickr8k_expert", [fixed_scores], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    values = run.outcomes["fixed_scores"].values
    # Method A (Hessel et al. 2021, appendix A, "Flickr8K details": each of the 3 expert ratings is its own row), rows written out by
    # hand from the fixture; method B: one row per pair, the mean rating. scipy is the independent reference.
    scores_a = [0.8] * 3 + [0.2] * 3 + [0.5] * 3 + [0.4] * 3 + [0.9] * 3
    ratings_a = [1, 1, 2, 1, 1, 1, 2, 1, 2, 1, 2, 1, 3, 2, 2]
    scores_b = [0.8, 0.2, 0.5, 0.4, 0.9]
    ratings_b = [4 / 3, 1, 5 / 3, 4 / 3, 7 / 3]
    assert values["kendall_c"] == pytest.approx(100 * kendalltau(scores_a, ratings_a, variant="c").statistic)
    assert values["kendall_b"] == pytest.approx(100 * kendalltau(scores_a, ratings_a, variant="b").statistic)
    assert values["kendall_c_B"] == pytest.approx(
        100 * kendalltau(scores_b, ratings_b, variant="c").statistic
    )
    assert values["kendall_b_B"] == pytest.approx(
        100 * kendalltau(scores_b, ratings_b, variant="b").statistic
    )
    # The two methods give different numbers here (scipy on the rows above: 53.333 vs 74.667), so swapping them
    # cannot pass.
    assert values["kendall_c"] == pytest.approx(53.333, abs=1e-3)
    assert values["kendall_c_B"] == pytest.approx(74.667, abs=1e-3)


def test_cached_scores_are_reused_and_new_metrics_do_not_recompute_old_ones(tmp_path):
    cache = ScoreCache(tmp_path)
    counting = CountingMetric()
    metric = metric_from_callable(counting, key="counting")
    first = run_benchmark("flickr8k_expert", [metric], data_dir=FIX, cache=cache, progress=False)
    assert first.outcomes["counting"].computed == 5 and counting.items == 5
    second = run_benchmark("flickr8k_expert", [metric, overlap], data_dir=FIX, cache=cache, progress=False)
    assert counting.items == 5  # nothing recomputed
    assert second.outcomes["counting"].cached == 5
    assert second.outcomes["counting"].values == first.outcomes["counting"].values
    assert (tmp_path / "").is_dir() and any(tmp_path.rglob("all.json"))
    third = run_benchmark(
        "flickr8k_expert", [metric], data_dir=FIX, cache=ScoreCache(tmp_path, enabled=False), progress=False
    )
    assert third.outcomes["counting"].computed == 5


def test_a_changed_input_is_not_served_from_the_cache(tmp_path):
    cache = ScoreCache(tmp_path)
    counting = CountingMetric()
    metric = metric_from_callable(counting, key="counting")
    run_benchmark("flickr8k_expert", [metric], data_dir=FIX, cache=cache, progress=False)
    data = tmp_path / "data"
    shutil.copytree(FIX / "flickr8k", data / "flickr8k")
    token = data / "flickr8k" / "Flickr8k.token.txt"
    token.write_text(token.read_text().replace("Kids building a sandcastle", "Kids making a sandcastle"))
    run_benchmark("flickr8k_expert", [metric], data_dir=data, cache=cache, progress=False)
    assert counting.items == 6  # only the changed candidate was scored again


def test_corpus_level_metrics_are_recomputed_whole_when_partly_cached(tmp_path):
    seen = []

    def idf_like(predictions, references=None):
        seen.append(len(predictions))
        return [len(predictions) + 0.01 * i for i in range(len(predictions))]  # depends on the whole call

    metric = BenchMetric(idf_like, "idf_like", corpus_level=True, signature="idf_like|v=1")
    cache = ScoreCache(tmp_path)
    run_benchmark("vatex_eval", [metric], data_dir=FIX, cache=cache, progress=False)
    assert seen == [18, 18]  # settings refs1 and refs9, each a whole corpus (refs0 is reference-free only)
    run_benchmark("vatex_eval", [metric], data_dir=FIX, cache=cache, progress=False)
    assert seen == [18, 18]


def test_vatex_reference_free_metrics_fill_the_no_reference_columns_only(tmp_path):
    run = run_benchmark(
        "vatex_eval", ["length", overlap], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    assert set(run.outcomes["length"].values) == {"kendall_0ref", "spearman_0ref"}
    assert set(run.outcomes["overlap"].values) == {
        "kendall_1ref",
        "spearman_1ref",
        "kendall_9ref",
        "spearman_9ref",
    }


def test_image_metrics_are_skipped_with_a_message_when_images_are_absent(tmp_path):
    calls = []

    def image_metric(predictions, images=None):
        calls.append(images)
        return [1.0] * len(predictions)

    metric = metric_from_callable(image_metric, uses_references=False, uses_images=True)
    run = run_benchmark(
        "flickr8k_expert", [metric, "length"], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    assert "images/videos are missing" in run.outcomes["image_metric"].skipped
    assert calls == []
    assert run.outcomes["length"].skipped is None


def test_image_metrics_get_the_image_paths_when_the_images_exist(tmp_path):
    from PIL import Image

    root = tmp_path / "images"
    root.mkdir()
    for k, name in enumerate(
        ["1000000001_a1b2c3d4e5.jpg", "2000000002_b2c3d4e5f6.jpg", "3000000003_c3d4e5f6a7.jpg"]
    ):
        Image.new("RGB", (8 + k, 8), (k * 80, 0, 0)).save(root / name)

    def width(predictions, images=None):
        return [float(Image.open(p).size[0]) for p in images]

    metric = metric_from_callable(width, uses_references=False, uses_images=True)
    run = run_benchmark(
        "flickr8k_expert",
        [metric],
        data_dir=FIX,
        cache=ScoreCache(tmp_path / "cache"),
        options={"image_root": root},
        progress=False,
    )
    assert run.outcomes["width"].skipped is None
    assert sorted(set(run.scores["width"]["default"])) == [8.0, 9.0, 10.0]


def test_clipscore_runs_through_the_harness_with_a_local_model(tmp_path, tiny_clip_dir):
    from PIL import Image

    root = tmp_path / "images"
    root.mkdir()
    for k, name in enumerate(
        ["1000000001_a1b2c3d4e5.jpg", "2000000002_b2c3d4e5f6.jpg", "3000000003_c3d4e5f6a7.jpg"]
    ):
        Image.new("RGB", (32, 32), (k * 80, 40, 200 - k * 60)).save(root / name)
    run = run_benchmark(
        "flickr8k_expert",
        ["clipscore", "refclipscore"],
        data_dir=FIX,
        cache=ScoreCache(tmp_path / "cache"),
        options={"image_root": root},
        metric_options={"model": str(tiny_clip_dir), "device": "cpu"},
        progress=False,
    )
    for key in ("clipscore", "refclipscore"):
        assert run.outcomes[key].skipped is None, run.outcomes[key].skipped
        assert run.outcomes[key].signature.startswith(key + "|")
        assert np.isfinite(run.outcomes[key].values["kendall_c"])


def test_a_failing_metric_is_reported_and_strict_mode_raises(tmp_path):
    def broken(predictions, references=None):
        raise RuntimeError("boom")

    run = run_benchmark(
        "flickr8k_expert", [broken, "length"], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    assert run.outcomes["broken"].skipped == "failed: RuntimeError: boom"
    assert run.outcomes["length"].skipped is None
    with pytest.raises(RuntimeError, match="boom"):
        run_benchmark(
            "flickr8k_expert", [broken], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False, strict=True
        )


def test_a_metric_returning_the_wrong_number_of_scores_is_refused(tmp_path):
    metric = metric_from_callable(lambda predictions, references=None: [0.0], key="short")
    with pytest.raises(ValueError, match="returned 1 scores for 5 predictions"):
        run_benchmark(
            "flickr8k_expert", [metric], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False, strict=True
        )


def test_benchmarks_without_data_are_reported_not_run(tmp_path):
    run = run_benchmark("composite", ["length"], data_dir=tmp_path, progress=False)
    assert run.skipped and "8k_correctness.csv" in run.skipped
    data = tmp_path / "data" / "abstract50s"
    data.mkdir(parents=True)
    for name in ("abstract48S.json", "abstract_candsB.json", "abstract_candsC.json"):
        shutil.copy(FIX / "abstract50s" / name, data / name)
    abstract = run_benchmark(
        "abstract50s", ["length"], data_dir=data.parent, cache=ScoreCache(tmp_path), progress=False
    )
    assert "votes" in abstract.skipped


def test_a_data_folder_that_is_not_there_is_refused_at_once_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"data_dir '.*no-such-benchmarks' does not exist: expected the "
                       r"benchmarks' data folder, one sub-folder per benchmark \(flickr8k/ for Flickr8k-Expert\)"):  # fmt: skip
        run_benchmark("flickr8k_expert", ["length"], data_dir=tmp_path / "no-such-benchmarks", progress=False)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match=r"data_dir '.*a-file' is not a folder"):
        run_benchmark("flickr8k_expert", ["length"], data_dir=tmp_path / "a-file", progress=False)


def test_a_benchmark_folder_given_as_path_that_is_not_there_is_refused_naming_it(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"path '.*flickr8k-typo' does not exist: expected the folder holding the Flickr8k-Expert",
    ):
        run_benchmark("flickr8k_expert", ["length"], path=tmp_path / "flickr8k-typo", progress=False)


def test_pairwise_benchmarks_average_over_reference_draws(tmp_path):
    run = run_benchmark(
        "abstract50s",
        ["length", overlap],
        data_dir=FIX,
        cache=ScoreCache(tmp_path),
        options={"abstract_votes": FIX / "abstract50s" / "abstract50s_votes.json"},
        progress=False,
    )
    assert (
        run.outcomes["length"].values["abstract"] == 100.0
    )  # the preferred caption is the longer in both pairs
    assert run.outcomes["overlap"].values["abstract"] == 100.0
    foil = run_benchmark(
        "foil", ["length", overlap], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    assert foil.outcomes["length"].values == {
        "acc_1ref": 50.0,
        "acc_4ref": 50.0,
    }  # same length: ties count half
    assert set(foil.outcomes["overlap"].values) == {"acc_1ref", "acc_4ref"}


def test_report_has_paper_tables_published_values_skips_and_plots(tmp_path):
    runs = [
        run_benchmark(
            "flickr8k_expert", ["length", overlap], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
        ),
        run_benchmark("foil", ["length"], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False),
        run_benchmark("composite", ["length"], data_dir=tmp_path, progress=False),
    ]
    report = write_report(runs, tmp_path / "report")
    text = report.read_text()
    assert "| Metric | τc | τb | τc (B) | τb (B) |" in text
    assert "| length | 50.0 (50.2, -0.20) | 50.0 (50.2, -0.20) |" in text
    assert "CLIP-S (published only)" in text
    assert "Not run:" in text
    assert "hessel2021_t5" in text
    assert (tmp_path / "report" / "plots" / "flickr8k_expert.png").stat().st_size > 1000
    assert (tmp_path / "report" / "plots" / "foil.png").is_file()
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert results[1]["metrics"]["length"]["published"] == {"acc_1ref": 50.2, "acc_4ref": 50.2}


def test_cli_runs_a_table_with_a_user_callable_and_writes_the_report(tmp_path, capsys):
    code = main(
        [
            "run",
            "flickr8k_expert",
            "--data-dir",
            str(FIX),
            "--metrics",
            "length",
            "tests.test_bench_runner:overlap",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    assert code == 0
    assert "| overlap |" in (tmp_path / "out" / "report.md").read_text()
    assert "Flickr8k-Expert" in capsys.readouterr().out


def test_cli_list_and_published_and_the_parser_hook(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"), "reproduce human-agreement tables")
    args = parser.parse_args(["bench", "published", "foil"])
    assert args.func(args) == 0
    assert "hessel2021_t5" in capsys.readouterr().out
    assert main(["list", "--data-dir", str(FIX)]) == 0
    out = capsys.readouterr().out
    assert "flickr8k_expert" in out and "present" in out and "spice" in out


def test_published_config_cites_its_sources_and_names_real_columns_and_metrics():
    known = {"bleu1", "bleu4", "meteor", "rougeL", "cider", "spice", "length"} | {
        "wmd",
        "wembsim",
        "clipscore",
        "refclipscore",
        "pacscore",
        "refpacscore",
        "emscore",
        "emscore_ref",
    }
    # Benchmarks the papers print that capeval has no loader for (yet): their figures are quoted in the cards.
    paper_only = {
        "activitynet_foil",
        "coco2015_systems",
        "distraction",
        "abstract50s_pascal50s",
        "pacscore_readme_examples",
    }
    values = published_values()
    assert values and set(sources()) >= {p.source for p in values}
    seen = set()
    for p in values:
        assert p.benchmark in BENCHMARKS or p.benchmark in paper_only, p
        if p.benchmark in BENCHMARKS and not p.setting:
            assert p.column in {c for c, _ in BENCHMARKS[p.benchmark].columns}, p
        assert p.metric in known, p
        assert 0 < p.value <= 100
        key = (p.benchmark, p.column, p.metric, p.setting_label())
        assert key not in seen, f"two published values for {key}"
        seen.add(key)


def test_metric_names_groups_and_import_specs_resolve():
    assert [m.key for m in resolve_metric("baselines")] == [
        "bleu1",
        "bleu4",
        "meteor",
        "rougeL",
        "cider",
        "spice",
    ]
    assert [m.key for m in resolve_metric("text")] == ["wembsim", "wmd"]  # the declarations' order
    assert resolve_metric("tests.test_bench_runner:CountingMetric")[0].uses_references is False
    pac = resolve_metric("pacscore")[0]
    assert "checkpoint" in pac.unavailable()
    with pytest.raises(ValueError, match="unknown metric"):
        resolve_metric("nope")


def test_report_statistics_give_intervals_williams_tests_and_forward_selection(tmp_path):
    from capeval.bench.analysis import rating_analysis

    run = run_benchmark(
        "thumb", ["length", overlap], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False
    )
    analysis = rating_analysis(run, n_resamples=30)
    assert analysis.measure == "pearson"
    assert set(analysis.intervals) == {"length", "overlap"}
    for est, low, high in analysis.intervals.values():
        assert low <= est <= high
    other = ({"length", "overlap"} - {analysis.best}).pop()
    assert set(analysis.williams) == {other}
    assert sorted(name for name, _ in analysis.selection) == ["length", "overlap"]
    text = write_report([run], tmp_path / "report", plots=False, stats=30).read_text()
    assert "95% interval" in text and "Forward selection" in text
    assert (
        rating_analysis(
            run_benchmark("foil", ["length"], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False)
        )
        is None
    )


def test_emscore_reference_only_variant_runs_on_vatex_eval_without_videos(tmp_path, tiny_clip_dir):
    run = run_benchmark(
        "vatex_eval",
        ["emscore"],
        data_dir=FIX,
        cache=ScoreCache(tmp_path),
        metric_options={"model": str(tiny_clip_dir), "device": "cpu"},
        progress=False,
    )
    out = run.outcomes["emscore"]
    assert out.skipped is None, out.skipped
    assert set(out.values) == {"kendall_1ref", "spearman_1ref", "kendall_9ref", "spearman_9ref"}
    assert out.signature.startswith("emscore|")


def test_report_shows_a_paper_in_another_setting_beside_ours_with_the_setting_named(tmp_path):
    # Kilickaya et al. 2017, Table 3 ran WMD with word2vec; the default run uses GloVe-6B-50d, so the report
    # prints their figure as published in that setting, never as a difference from ours.
    run = run_benchmark("flickr8k_expert", ["wmd"], data_dir=FIX, cache=ScoreCache(tmp_path), progress=False)
    text = write_report([run], tmp_path / "report", plots=False).read_text()
    assert (
        "- WMD: published 0.48 (WMD, FLICKR-8K Kendall (variant not stated); "
        "setting vectors=word2vec-google-news-300; `kilickaya2017_t3`), no column of ours to compare"
    ) in text
    assert "- `kilickaya2017_t3`: Kilickaya et al. 2017" in text
    wmd_row = next(line for line in text.splitlines() if line.startswith("| WMD |"))
    assert "(" not in wmd_row  # no published value of the default setting, so no difference is printed
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    others = results[0]["metrics"]["wmd"]["published_other_settings"]
    assert {(o["column"], o["value"]) for o in others} == {
        ("pearson", 68.0),
        ("spearman", 60.0),
        ("kendall", 48.0),
    }


def test_pascal50s_cells_read_ours_published_difference_and_other_settings_go_under_the_table():
    # Hessel et al. Table 4 gives CIDEr in capeval's setting; Kilickaya et al. and Sharif et al. give WMD with
    # other vectors, which are no difference from a GloVe-6B-50d run: they belong in the notes, not the cells.
    import re

    from capeval.bench.report import markdown_table, other_setting_notes
    from capeval.bench.runner import BenchmarkRun, MetricOutcome

    values = {"HC": 0.654, "HI": 0.99, "HM": 0.93, "MM": 0.7, "mean": 0.81}
    glove = "wmd|vectors=glove-6b-50d@kumo1.0.0-9abcdbc8:400000x50|normalize_vectors=False|capeval=0.2.0"
    run = BenchmarkRun(
        BENCHMARKS["pascal50s"],
        outcomes={
            "wmd": MetricOutcome("wmd", "WMD", {k: 100 * v for k, v in values.items()}, glove),
            "cider": MetricOutcome("cider", "CIDEr", {"mean": 80.0}, "cider|impl=pycocoevalcap"),
        },
    )
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in markdown_table(run).splitlines()}
    wmd, cider = (cells[:-1] + [cells[-1].removesuffix(" |")] for cells in (rows["| WMD"], rows["| CIDEr"]))
    # ours alone, ours (published, difference), or no score of ours beside a published one
    cell = re.compile(r"^\d+\.\d( \(\d+\.\d, [+-]\d+\.\d\d\))?$|^– \(\d+\.\d\)$")
    assert [c for c in wmd + cider if not cell.match(c)] == []
    assert wmd == ["65.4", "99.0", "93.0", "70.0", "81.0"]  # no published value in the run's setting
    assert cider[-1] == "80.0 (79.6, +0.40)" and cider[0] == "– (65.1)"
    notes = other_setting_notes(run)
    assert (
        "WMD: published 0.71 (WMD, PASCAL-50S HC; setting vectors=word2vec-google-news-300; `kilickaya2017_t4`), "
        "ours 65.4"
    ) in notes  # as the paper prints it
    assert (
        "WMD: published 56.2 (WMD, PASCAL-50S HHC; setting vectors=not stated; `sharif2020_t3`), ours 65.4"
        in notes
    )


# --- Which settings of a benchmark a metric scores ---


def test_a_metric_fits_a_setting_by_the_references_it_reads_and_the_setting_gives():
    from capeval.bench.benchmark_types import Setting, Unit
    from capeval.bench.runner import _setting_skip

    (with_refs,) = resolve_metric("wmd")
    (reference_free,) = resolve_metric("clipscore")
    units = [Unit("a", "a dog", ["a dog"]), Unit("b", "a cat", [])]
    full = Setting("full", units[:1])
    assert _setting_skip(with_refs, full) is None and _setting_skip(reference_free, full) is None
    assert _setting_skip(with_refs, Setting("no refs", units[:1], references=False)) == ""
    assert _setting_skip(reference_free, Setting("refs only", units[:1], reference_free=False)) == ""
    assert _setting_skip(with_refs, Setting("gap", units)) == "gap: 1 items have no references"
