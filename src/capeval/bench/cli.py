"""``capeval bench ...``: reproduce the papers' human-agreement tables from the command line.

Wiring (in ``capeval.cli``)::

    from capeval.bench.cli import add_bench_parser
    add_bench_parser(subparsers)          # adds "bench"; the parsed args carry func=capeval.bench.cli.run

``scripts/reproduce.py`` calls :func:`main` with the same arguments (``bench`` implied).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capeval.bench.benchmark_plan import RunPlan
    from capeval.bench.benchmark_types import Benchmark
    from capeval.bench.cache import ScoreCache
    from capeval.bench.runner import BenchmarkRun

DEFAULT_METRICS = ["baselines", "length", "text", "image"]


def _data_dir_default() -> str:
    return os.environ.get("CAPEVAL_BENCH_DATA", "benchmarks")


def _check_resamples(name: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{name} must be 0 (no statistics) or a number of resamples >= 1, got {value}")
    return value


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def add_bench_parser(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """Add the ``bench`` command (with ``run``, ``list`` and ``published``) to an argparse subparsers object, with
    its one-line ``help`` in the listing of commands (``capeval.cli.SUBCOMMANDS`` gives ``capeval``'s)."""
    bench = subparsers.add_parser(
        "bench",
        help=help,
        description="Measure caption metrics against human judgments the way the papers do.",
    )
    sub = bench.add_subparsers(dest="bench_command", metavar="{run,list,published}")
    r = sub.add_parser("run", help="score metrics on benchmarks and write the Markdown report with plots")
    _add_run_inputs(r)
    _add_model_options(r)
    _add_protocol_options(r)
    _add_output_options(r)
    lister = sub.add_parser("list", help="benchmarks, their data folders and which metrics can run here")
    lister.add_argument("--data-dir", default=_data_dir_default())
    for option in ("--model", "--checkpoint", "--vectors"):
        lister.add_argument(option, help=f"the {option} of a run, for the status of the metrics that take it")
    p = sub.add_parser("published", help="print the published values of the reproduction config")
    p.add_argument("benchmark", nargs="?", help="only this benchmark")
    bench.set_defaults(func=run)
    return bench


def _add_run_inputs(parser: argparse.ArgumentParser) -> None:
    """``bench run``'s what and where: the benchmarks, the metrics, the data, image and video folders, the report
    folder and the score cache."""
    from capeval.bench.benchmarks import BENCHMARKS

    parser.add_argument(
        "benchmarks",
        nargs="*",
        default=["all"],
        help=f"benchmarks to run ({', '.join(BENCHMARKS)}; default: all that have data)",
    )
    parser.add_argument(
        "-m",
        "--metrics",
        nargs="+",
        default=DEFAULT_METRICS,
        help="metric names, groups (baselines, text, image) or package.module:callable "
        f"(default: {' '.join(DEFAULT_METRICS)})",
    )
    parser.add_argument(
        "--data-dir",
        default=_data_dir_default(),
        help="folder with one sub-folder per benchmark (default: $CAPEVAL_BENCH_DATA or ./benchmarks)",
    )
    parser.add_argument(
        "--out", default="bench-report", help="report folder (report.md, results.json, plots/)"
    )
    parser.add_argument(
        "--image-root", help="folder of the benchmark images (image metrics are skipped without it)"
    )
    parser.add_argument("--video-root", help="folder of the VATEX-EVAL videos")
    parser.add_argument(
        "--cache-dir", help="per-item score cache (default: $CAPEVAL_BENCH_CACHE or ~/.cache/capeval/bench)"
    )
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write cached scores")


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    """``bench run``'s options of the model-based metrics: backbone, PAC-S weights, word vectors, device."""
    parser.add_argument("--model", help="CLIP backbone for image metrics (Hub id or local folder)")
    parser.add_argument("--checkpoint", help="PAC-S weights (authors' .pth, converted folder or Hub repo)")
    parser.add_argument(
        "--vectors", help="word vectors for WMD / WEmbSim (default: the packaged GloVe-6B-50d)"
    )
    parser.add_argument("--device", help="device for model-based metrics (cpu, cuda, ...)")


def _add_protocol_options(parser: argparse.ArgumentParser) -> None:
    """``bench run``'s protocol options: Pascal-50S's reference draws, tie counting, the files some benchmarks
    need besides their own, Composite's reference setting, the Polaris / Nebula split."""
    from capeval.validation import check_count, cli_type

    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the Pascal-50S reference draws (default 0)"
    )
    parser.add_argument(
        "--pascal-draws",
        type=cli_type("--pascal-draws", int, check_count),
        default=5,
        help="random reference draws on Pascal-50S (default 5)",
    )
    parser.add_argument(
        "--ties",
        default="half",
        choices=["half", "random", "wrong", "first"],
        help="what a metric tie counts as in pairwise accuracy (default: half)",
    )
    parser.add_argument("--abstract-votes", help="Abstract-50S human votes (not in the public files)")
    parser.add_argument("--thumb-references", help="COCO references for THumB 1.0")
    parser.add_argument(
        "--composite-keep-references",
        action="store_true",
        help="Composite: keep the rated human caption among the references (the easier setting)",
    )
    parser.add_argument("--split", default="test", help="split of Polaris / Nebula (default test)")


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """``bench run``'s report and console options: statistics, plots, progress bars, strictness, tracebacks."""
    from capeval.validation import cli_type

    parser.add_argument(
        "--stats",
        type=cli_type("--stats", int, _check_resamples),
        default=0,
        metavar="N",
        help="add bootstrap intervals (N resamples), Williams tests and forward selection to rating benchmarks",
    )
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--strict", action="store_true", help="stop on the first metric error")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of a failing metric (also CAPEVAL_DEBUG=1)",
    )


@dataclass(frozen=True)
class _RunSettings:
    """What every benchmark of one ``capeval bench run`` is scored with, from its arguments.

    Attributes:
        data_dir: the folder of the benchmarks' data folders.
        options: benchmark options (image and video roots, seed, ties, Pascal-50S draws, extra files, split).
        metric_options: options of the model-based metrics (model, checkpoint, vectors, device).
        cache: the per-item score cache (disabled by ``--no-cache``).
        progress: ``False`` without progress bars, else ``None`` (the runner's default).
        strict: stop on the first metric error.
    """

    data_dir: str
    options: dict[str, Any]
    metric_options: dict[str, Any]
    cache: ScoreCache
    progress: bool | None
    strict: bool


def _run_settings(args: argparse.Namespace) -> _RunSettings:
    """The settings of ``bench run`` in the names the planner and the runner take."""
    from capeval.bench.cache import ScoreCache

    options = {
        "image_root": args.image_root,
        "video_root": args.video_root,
        "seed": args.seed,
        "ties": args.ties,
        "pascal_n_draws": args.pascal_draws,
        "abstract_votes": args.abstract_votes,
        "thumb_references": args.thumb_references,
        "composite_keep_references": args.composite_keep_references,
        "split": args.split,
    }
    metric_options = {
        "model": args.model,
        "checkpoint": args.checkpoint,
        "vectors": args.vectors,
        "device": args.device,
    }
    return _RunSettings(
        data_dir=args.data_dir,
        options=options,
        metric_options=metric_options,
        cache=ScoreCache(args.cache_dir, enabled=not args.no_cache),
        progress=False if args.no_progress else None,
        strict=args.strict,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from capeval.diagnostics.extras import require_extra

    require_extra("bench", "capeval bench run")
    from capeval.bench.benchmark_plan import RunRefused, plan_run
    from capeval.bench.benchmarks import BENCHMARKS
    from capeval.bench.report import write_report
    from capeval.bench.runner import BenchmarkRun

    debug = args.debug or bool(os.environ.get("CAPEVAL_DEBUG"))
    settings = _run_settings(args)
    try:
        plan = plan_run(
            args.benchmarks, args.metrics, args.data_dir, settings.options, settings.metric_options
        )
    except RunRefused as err:
        print(f"capeval bench: {_one_line(err)}", file=sys.stderr)
        return 2
    if args.no_progress:
        import datasets

        datasets.disable_progress_bars()
    for note in plan.notes():
        print(f"[bench] {_one_line(note)}", file=sys.stderr)
    runs = [BenchmarkRun(BENCHMARKS[name], skipped=why) for name, why in plan.not_run.items()]
    for b in plan.benchmarks:
        if not plan.runnable(b):
            runs.append(BenchmarkRun(b, skipped="no metric asked for can run on it"))
            continue
        runs.append(_score_benchmark(b, plan, settings))
        _print_run(runs[-1], plan, debug)
    why_nothing = _nothing_scored(runs)
    if why_nothing is not None:
        print(f"capeval bench: nothing was scored, no report written: {why_nothing}", file=sys.stderr)
        return 1
    report = write_report(
        runs,
        args.out,
        plots=not args.no_plots,
        stats=args.stats,
        context={"data": args.data_dir, "metrics": " ".join(map(str, args.metrics))},
    )
    print(f"[bench] report written to {report}", file=sys.stderr)
    return 0


def _score_benchmark(benchmark: Benchmark, plan: RunPlan, settings: _RunSettings) -> BenchmarkRun:
    """Run the plan's runnable metrics on ``benchmark`` (a ``BenchmarkRun``); the metrics the plan refused on it
    are added as skipped outcomes with the plan's reason, unless the benchmark itself could not be run."""
    from capeval.bench.runner import MetricOutcome, run_benchmark

    print(f"[bench] {benchmark.title}", file=sys.stderr)
    run = run_benchmark(
        benchmark,
        plan.runnable(benchmark),
        data_dir=settings.data_dir,
        cache=settings.cache,
        options=settings.options,
        metric_options=settings.metric_options,
        progress=settings.progress,
        strict=settings.strict,
    )
    for m in plan.metrics:
        if (benchmark.name, m.key) in plan.skipped and not run.skipped:
            run.outcomes[m.key] = MetricOutcome(m.key, m.name, skipped=plan.skipped[(benchmark.name, m.key)])
    from capeval.clip.model_sources import HubModelUnavailableError

    for o in run.outcomes.values():
        if isinstance(o.error, HubModelUnavailableError):  # the advice in the command line's words (--model)
            o.skipped = f"failed: {type(o.error).__name__}: {o.error.command_line}"
    return run


def _print_run(run: BenchmarkRun, plan: RunPlan, debug: bool) -> None:
    """Say on stderr why a benchmark or a metric did not run (the plan's own refusals were said before the run,
    ``debug`` adds a failing metric's traceback), and print the table on stdout when a metric scored."""
    title = run.benchmark.title
    if run.skipped:
        print(f"[bench] {title} not run: {_one_line(run.skipped)}", file=sys.stderr)
        return
    for o in run.outcomes.values():
        if o.skipped and (run.benchmark.name, o.key) not in plan.skipped:
            if debug and o.error is not None:
                traceback.print_exception(o.error, file=sys.stderr)
            print(f"[bench] {title}: {o.key} skipped: {_one_line(o.skipped)}", file=sys.stderr)
    if any(not o.skipped for o in run.outcomes.values()):
        from capeval.bench.report import markdown_table

        print(f"\n{title}\n{markdown_table(run)}\n")


def _nothing_scored(runs: Sequence[BenchmarkRun]) -> str | None:
    """None when some metric scored on some benchmark; else why nothing was: the first two distinct reasons (on
    one line each) and how many more there are."""
    if any(not o.skipped for r in runs if not r.skipped for o in r.outcomes.values()):
        return None
    reasons = [r.skipped for r in runs if r.skipped]
    reasons += [f"{o.key}: {o.skipped}" for r in runs if not r.skipped for o in r.outcomes.values()]
    reasons = list(dict.fromkeys(_one_line(x) for x in reasons))
    more = f" (and {len(reasons) - 2} more reasons)" if len(reasons) > 2 else ""
    return f"{'; '.join(reasons[:2])}{more}"


def _cmd_list(args: argparse.Namespace) -> int:
    from capeval.bench.benchmarks import BENCHMARKS
    from capeval.scoring.metric_names import (
        CAPEVAL_METRIC_NOTES,
        GROUPS,
        METRIC_NAMES,
        metric_needs,
        resolve_metric,
    )

    print("benchmarks (data folder under --data-dir):")
    for b in BENCHMARKS.values():
        where = b.data_path(args.data_dir)
        print(f"  {b.name:16} {b.title:16} {where}  [{'present' if where.exists() else 'absent'}]")
    print("\nmetrics (-m NAME):")
    from capeval.clip.backbones import DEFAULT_MODEL
    from capeval.clip.model_sources import download_needed
    from capeval.registry import specs

    options = {"model": args.model, "checkpoint": args.checkpoint, "vectors": args.vectors}
    # Online, a Hub model outside the cache is not unavailable, but a machine without network cannot have it.
    fetch = download_needed(args.model or DEFAULT_MODEL) if not args.checkpoint else None
    takes_model = {name for name, declared in specs().items() if "model" in declared.option_names()}
    for name in METRIC_NAMES:
        m = resolve_metric(name, **options)[0]
        why = m.unavailable()
        print(f"  {name:13} {m.name:14} needs {metric_needs(name)}")
        if name in CAPEVAL_METRIC_NOTES:
            print(f"  {'':13} {'':14} runs on {CAPEVAL_METRIC_NOTES[name]}")
        status = "ok" if not why else "unavailable: " + _one_line(why)
        if not why and fetch and name in takes_model:
            status = f"ok once downloaded: {fetch}"
        print(f"  {'':13} {'':14} {status}")
    print("\ngroups: " + "; ".join(f"{g} = {' '.join(names)}" for g, names in GROUPS.items()))
    print("any callable: -m package.module:callable or path/to/file.py:callable")
    return 0


def _cmd_published(args: argparse.Namespace) -> int:
    from capeval.bench.published import published_values, sources

    src = sources()
    rows = published_values(args.benchmark)
    if not rows:
        print(
            f"no published values recorded for {args.benchmark or 'any benchmark'} in capeval/bench/published.json"
        )
    for p in rows:
        setting = f"  setting: {p.setting_label()}" if p.setting else ""
        print(f"{p.benchmark:16} {p.column:12} {p.metric:13} {p.value:8.3f}  [{p.source}: {p.row}]{setting}")
    for key in sorted({p.source for p in rows}):
        print(f"  {key}: {src[key]}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of ``capeval bench``: dispatch to ``run``, ``list`` or ``published``."""
    command = getattr(args, "bench_command", None)
    if command == "run":
        return _cmd_run(args)
    if command == "list":
        return _cmd_list(args)
    if command == "published":
        return _cmd_published(args)
    print("usage: capeval bench {run,list,published} ... (see capeval bench --help)", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """``python scripts/reproduce.py run flickr8k_expert ...`` (the ``capeval bench`` arguments)."""
    parser = argparse.ArgumentParser(
        prog="reproduce.py", description="capeval bench: reproduce the papers' tables"
    )
    sub = parser.add_subparsers(dest="command")
    add_bench_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(["bench", *argv])
    from capeval.diagnostics.run_warnings import summarised_warnings

    with summarised_warnings(one_line=True):  # each kind of warning once, at the end of the run
        return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
