"""``capeval bench``'s honesty: a run that cannot score anything says why in one line, exits non-zero and writes no
report; options, data folders and metrics are checked before anything loads; ``list`` shows every metric the runner
accepts. (Successful runs, the report and the cache are in test_bench_runner.py.)"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from capeval.bench.benchmarks import BENCHMARKS
from capeval.bench.cli import (
    DEFAULT_METRICS,
    _add_model_options,
    _add_output_options,
    _add_protocol_options,
    _add_run_inputs,
    _nothing_scored,
    _print_run,
    _run_settings,
    _score_benchmark,
    add_bench_parser,
    main,
)
from capeval.bench.runner import BenchmarkRun, MetricOutcome
from capeval.scoring.metric_names import GROUPS, METRIC_NAMES, resolve_metrics

FIX = Path(__file__).parent / "fixtures" / "bench"


def broken(predictions, references=None):
    """A metric that fails on every call."""
    raise RuntimeError("boom in the metric")


@pytest.fixture
def no_loading(monkeypatch):
    """Make every benchmark loader fail loudly: a refused run must not reach them."""

    def load(path, options):
        raise AssertionError("the benchmark was loaded before the run was checked")

    for bench in BENCHMARKS.values():
        monkeypatch.setattr(bench, "load", load)


@pytest.fixture
def empty_hub_cache(monkeypatch, tmp_path):
    """An empty Hugging Face cache, offline: the default CLIP model cannot be had."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def refused(capsys, argv: list[str], out: Path) -> str:
    """Run ``capeval bench`` and return its one stderr line, after checking it exited 2 and wrote nothing."""
    assert main([*argv, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("capeval bench: ")
    assert not out.exists()
    return err


def test_a_run_without_the_data_folder_exits_2_in_one_line_and_writes_no_report(tmp_path, capsys, no_loading):
    # As `capeval bench run pascal50s -m wmd` without --data-dir, where its default ./benchmarks is absent.
    err = refused(
        capsys, ["run", "pascal50s", "-m", "wmd", "--data-dir", str(tmp_path / "benchmarks")], tmp_path / "r"
    )
    assert "no benchmark data folder" in err and "--data-dir" in err


def test_a_named_benchmark_whose_folder_is_absent_is_refused_naming_it(tmp_path, capsys, no_loading):
    err = refused(capsys, ["run", "pascal50s", "-m", "wmd", "--data-dir", str(tmp_path)], tmp_path / "r")
    assert f"no data for pascal50s ({tmp_path / 'pascal50s'})" in err


def test_all_benchmarks_without_any_data_is_refused(tmp_path, capsys, no_loading):
    err = refused(capsys, ["run", "-m", "length", "--data-dir", str(tmp_path)], tmp_path / "r")
    assert "nothing to run: no benchmark data under" in err


def test_an_unknown_metric_is_refused_before_the_benchmark_loads(tmp_path, capsys, no_loading):
    err = refused(
        capsys, ["run", "flickr8k_expert", "-m", "wmd", "nope", "--data-dir", str(FIX)], tmp_path / "r"
    )
    assert "unknown metric 'nope'" in err and "emscore" in err


def test_an_unknown_benchmark_is_refused_naming_the_choices(tmp_path, capsys, no_loading):
    err = refused(capsys, ["run", "pascal", "-m", "wmd", "--data-dir", str(FIX)], tmp_path / "r")
    assert "unknown benchmark 'pascal'" in err and "pascal50s" in err


def test_emscore_without_a_model_is_refused_by_name_with_what_to_pass(
    tmp_path, capsys, no_loading, empty_hub_cache
):
    # One line naming what to pass, not a traceback and exit 0.
    err = refused(capsys, ["run", "vatex_eval", "-m", "emscore", "--data-dir", str(FIX)], tmp_path / "r")
    assert "metric 'emscore' cannot run here" in err
    assert "'openai/clip-vit-base-patch32' is not in the local Hugging Face cache" in err
    assert "pass --model" in err


def test_a_model_folder_that_does_not_exist_is_refused(tmp_path, capsys, no_loading):
    argv = ["run", "vatex_eval", "-m", "emscore", "--model", str(tmp_path / "clip"), "--data-dir", str(FIX)]
    assert "no such folder" in refused(capsys, argv, tmp_path / "r")


def test_pacscore_without_weights_is_refused_asking_for_the_checkpoint(tmp_path, capsys, no_loading):
    err = refused(
        capsys, ["run", "flickr8k_expert", "-m", "pacscore", "--data-dir", str(FIX)], tmp_path / "r"
    )
    assert "metric 'pacscore' cannot run here" in err and "--checkpoint" in err


def test_an_image_metric_named_without_images_is_refused_asking_for_the_image_root(
    tmp_path, capsys, no_loading, tiny_clip_dir
):
    argv = ["run", "flickr8k_expert", "-m", "length", "clipscore", "--model", str(tiny_clip_dir)]
    err = refused(capsys, [*argv, "--data-dir", str(FIX)], tmp_path / "r")
    assert err == (
        "capeval bench: metric 'clipscore' cannot run: it needs the Flickr8k-Expert images: pass --image-root DIR"
    )


@pytest.mark.parametrize(
    "option, message",
    [
        ("--image-root", "--image-root {}: no such folder"),
        ("--abstract-votes", "--abstract-votes {}: no such file"),
    ],
)
def test_an_option_path_that_does_not_exist_is_refused(tmp_path, capsys, no_loading, option, message):
    missing = tmp_path / "missing"
    argv = ["run", "flickr8k_expert", "-m", "length", option, str(missing), "--data-dir", str(FIX)]
    assert refused(capsys, argv, tmp_path / "r") == "capeval bench: " + message.format(missing)


@pytest.mark.parametrize("option, value", [("--pascal-draws", "0"), ("--stats", "-1")])
def test_bad_numbers_are_refused_by_the_parser_naming_the_option(capsys, option, value):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "pascal50s", option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: {option} must be" in capsys.readouterr().err


def test_a_metric_failing_everywhere_exits_1_without_a_traceback_or_a_report(tmp_path, capsys):
    out = tmp_path / "report"
    argv = [
        "run",
        "flickr8k_expert",
        "-m",
        "tests.test_bench_cli:broken",
        "--data-dir",
        str(FIX),
        "--no-cache",
    ]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        "capeval bench: nothing was scored, no report written: broken: failed: RuntimeError: boom in the metric"
    )
    assert not out.exists()


def test_a_benchmark_whose_files_are_missing_from_its_folder_exits_1_saying_so(tmp_path, capsys):
    (tmp_path / "data" / "pascal50s").mkdir(parents=True)
    out = tmp_path / "report"
    argv = ["run", "pascal50s", "-m", "length", "--data-dir", str(tmp_path / "data"), "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("capeval bench: nothing was scored, no report written: Pascal-50S JSON: none of ")
    assert not out.exists()


def test_debug_shows_the_traceback_of_a_failing_metric(tmp_path, capfd):
    argv = [
        "run",
        "flickr8k_expert",
        "-m",
        "tests.test_bench_cli:broken",
        "--data-dir",
        str(FIX),
        "--no-cache",
    ]
    assert main([*argv, "--out", str(tmp_path / "r"), "--no-progress", "--debug"]) == 1
    err = capfd.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom in the metric" in err


def test_a_partial_run_names_what_was_skipped_on_stderr_and_in_the_report(tmp_path, capsys, empty_hub_cache):
    out = tmp_path / "report"
    argv = ["run", "flickr8k_expert", "-m", "length", "image", "--data-dir", str(FIX), "--no-plots"]
    assert main([*argv, "--out", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache")]) == 0
    err = capsys.readouterr().err
    assert (
        "[bench] pacscore skipped on Flickr8k-Expert: PAC-S needs the authors' weights: pass --checkpoint"
        in err
    )
    assert "[bench] clipscore skipped on Flickr8k-Expert: model 'openai/clip-vit-base-patch32'" in err
    report = (out / "report.md").read_text()
    assert "| length |" in report
    assert "- **PAC-S skipped**: PAC-S needs the authors' weights" in report
    assert "- **CLIP-S skipped**: model 'openai/clip-vit-base-patch32'" in report


def test_list_shows_every_metric_the_runner_accepts_and_what_it_needs(capsys, tiny_clip_dir):
    assert main(["list", "--data-dir", str(FIX), "--model", str(tiny_clip_dir)]) == 0
    out = capsys.readouterr().out
    listed = [
        line.split()[0]
        for line in out.split("metrics")[1].splitlines()
        if line.startswith("  ") and line[2] != " "
    ]
    assert listed == list(METRIC_NAMES)
    assert {m.key for m in resolve_metrics(listed, refuse_unavailable=False)} == set(METRIC_NAMES)
    assert set(METRIC_NAMES) >= {n for names in GROUPS.values() for n in names}
    for name in BENCHMARKS:
        assert f"  {name} " in out
    emscore = out[out.index("  emscore ") :].split("\n\n")[0]
    assert "EMScore(X,X*)" in emscore and "a CLIP model (--model)" in emscore
    assert "VATEX-EVAL the 1- and 9-reference columns (the videos are not read" in emscore
    assert emscore.splitlines()[-1].strip() == "ok"  # the model given to list is a local folder


def test_list_says_a_hub_model_outside_the_cache_needs_a_download(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    assert main(["list", "--data-dir", str(FIX), "--model", "org/not-cached-clip"]) == 0
    clip = capsys.readouterr().out.split("  clipscore ")[1].split("\n  refclipscore")[0]
    assert clip.splitlines()[-1].strip() == (
        "ok once downloaded: org/not-cached-clip is not in the local Hugging Face cache; the first use downloads "
        "it (network needed)"
    )


def test_list_checks_a_long_clip_spec_without_loading_it(capsys, tmp_path):
    assert main(["list", "--data-dir", str(FIX), "--model", f"longclip:{tmp_path / 'none.pt'}"]) == 0
    clip = capsys.readouterr().out.split("  clipscore ")[1].split("\n  refclipscore")[0]
    assert "unavailable: model 'longclip:" in clip and "no Long-CLIP file at" in clip


def test_the_capeval_command_returns_the_bench_exit_code(tmp_path, capsys, no_loading):
    from capeval.cli import main as capeval_main

    assert capeval_main(["bench", "run", "flickr8k_expert", "-m", "nope", "--data-dir", str(FIX)]) == 2
    assert capsys.readouterr().err.strip().startswith("capeval bench: unknown metric 'nope'")


def _bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


def test_run_inputs_default_to_every_benchmark_the_default_metrics_and_the_env_data_folder(monkeypatch):
    monkeypatch.setenv("CAPEVAL_BENCH_DATA", "/data/bench")
    parser = argparse.ArgumentParser()
    _add_run_inputs(parser)
    args = parser.parse_args([])
    assert (args.benchmarks, args.metrics, args.data_dir, args.out) == (
        ["all"],
        DEFAULT_METRICS,
        "/data/bench",
        "bench-report",
    )
    assert args.image_root is args.video_root is args.cache_dir is None and not args.no_cache
    args = parser.parse_args(
        ["foil", "pascal50s", "-m", "wmd", "x.py:f", "--no-cache", "--image-root", "/img"]
    )
    assert (args.benchmarks, args.metrics, args.image_root, args.no_cache) == (
        ["foil", "pascal50s"],
        ["wmd", "x.py:f"],
        "/img",
        True,
    )


def test_model_options_are_unset_unless_given():
    parser = argparse.ArgumentParser()
    _add_model_options(parser)
    assert vars(parser.parse_args([])) == dict.fromkeys(("model", "checkpoint", "vectors", "device"))
    assert parser.parse_args(["--model", "m", "--device", "cuda:1"]).device == "cuda:1"


def test_protocol_options_have_the_papers_defaults_and_refuse_bad_values(capsys):
    parser = argparse.ArgumentParser()
    _add_protocol_options(parser)
    args = parser.parse_args([])
    assert (args.seed, args.pascal_draws, args.ties, args.split) == (0, 5, "half", "test")
    assert not args.composite_keep_references and args.abstract_votes is args.thumb_references is None
    assert parser.parse_args(["--ties", "random", "--pascal-draws", "2"]).pascal_draws == 2
    for bad in (["--ties", "coin"], ["--pascal-draws", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    assert "--pascal-draws" in capsys.readouterr().err


def test_output_options_default_to_plots_without_statistics_and_refuse_negative_resamples(capsys):
    parser = argparse.ArgumentParser()
    _add_output_options(parser)
    args = parser.parse_args([])
    assert args.stats == 0 and not (args.no_plots or args.no_progress or args.strict or args.debug)
    assert parser.parse_args(["--stats", "200", "--strict"]).stats == 200
    with pytest.raises(SystemExit):
        parser.parse_args(["--stats", "-1"])
    assert (
        "--stats must be 0 (no statistics) or a number of resamples >= 1, got -1" in capsys.readouterr().err
    )


def test_run_settings_carry_the_options_under_the_planners_names(tmp_path):
    argv = ["run", "--pascal-draws", "3", "--model", "m", "--cache-dir", str(tmp_path), "--no-cache"]
    settings = _run_settings(_bench_args(*argv, "--no-progress", "--strict", "--data-dir", "d"))
    assert settings.options["pascal_n_draws"] == 3 and settings.options["ties"] == "half"
    assert set(settings.options) == {
        "image_root",
        "video_root",
        "seed",
        "ties",
        "pascal_n_draws",
        "abstract_votes",
        "thumb_references",
        "composite_keep_references",
        "split",
    }
    assert settings.metric_options == {"model": "m", "checkpoint": None, "vectors": None, "device": None}
    assert settings.cache.root == tmp_path and not settings.cache.enabled
    assert (settings.data_dir, settings.progress, settings.strict) == ("d", False, True)
    assert _run_settings(_bench_args("run")).progress is None


def test_score_benchmark_runs_what_the_plan_allows_and_records_its_refusals(
    tmp_path, capsys, empty_hub_cache
):
    from capeval.bench.benchmark_plan import plan_run

    args = _bench_args("run", "-m", "length", "image", "--data-dir", str(FIX), "--cache-dir", str(tmp_path))
    settings = _run_settings(args)
    plan = plan_run(["flickr8k_expert"], args.metrics, str(FIX), settings.options, settings.metric_options)
    run = _score_benchmark(plan.benchmarks[0], plan, replace(settings, progress=False))
    assert run.outcomes["length"].values and not run.outcomes["length"].skipped
    assert run.outcomes["pacscore"].skipped == plan.skipped[("flickr8k_expert", "pacscore")]
    assert capsys.readouterr().err == "[bench] Flickr8k-Expert\n"


def _outcomes_run(**outcomes) -> BenchmarkRun:
    return BenchmarkRun(BENCHMARKS["flickr8k_expert"], outcomes=outcomes)


def test_print_run_names_unplanned_skips_and_prints_the_table_of_what_scored(capsys):
    from capeval.bench.benchmark_plan import RunPlan

    run = _outcomes_run(
        a=MetricOutcome("a", "A", skipped="failed:\n  RuntimeError"),
        b=MetricOutcome("b", "B", skipped="no weights"),
        c=MetricOutcome("c", "C", values={"kendall_c": 40.0}),
    )
    _print_run(run, RunPlan([], [], skipped={("flickr8k_expert", "b"): "no weights"}), debug=False)
    out, err = capsys.readouterr()
    assert err == "[bench] Flickr8k-Expert: a skipped: failed: RuntimeError\n"  # b was said by the plan
    assert out.startswith("\nFlickr8k-Expert\n| Metric |") and "| C | 40.0" in out


def test_print_run_of_a_benchmark_not_run_says_why_on_one_line(capsys):
    from capeval.bench.benchmark_plan import RunPlan

    skipped = BenchmarkRun(BENCHMARKS["foil"], skipped="no FOIL files\nin data/foil")
    _print_run(skipped, RunPlan([], []), debug=True)
    assert capsys.readouterr() == ("", "[bench] FOIL-COCO not run: no FOIL files in data/foil\n")
    only_skips = _outcomes_run(a=MetricOutcome("a", "A", skipped="x"))
    _print_run(only_skips, RunPlan([], []), debug=False)
    assert capsys.readouterr().out == ""  # no table without a scored metric


def test_nothing_scored_is_none_once_a_metric_scored_and_else_gives_two_reasons_and_a_count():
    scored = _outcomes_run(a=MetricOutcome("a", "A", values={"kendall_c": 1.0}))
    failed = _outcomes_run(
        a=MetricOutcome("a", "A", skipped="boom"),
        b=MetricOutcome("b", "B", skipped="no\nimages"),
        c=MetricOutcome("c", "C", skipped="boom"),
    )
    not_run = BenchmarkRun(BENCHMARKS["foil"], skipped="no data")
    assert _nothing_scored([failed, scored]) is None
    assert _nothing_scored([failed]) == "a: boom; b: no images (and 1 more reasons)"
    assert _nothing_scored([not_run, not_run]) == "no data"
