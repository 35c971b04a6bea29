"""What a benchmark run will do, decided before anything loads.

:func:`plan_run` checks the benchmark names, the data folders, the option paths and the metrics (names,
weights, models, vectors, images) without loading a dataset or a model, and says which metric runs on which
benchmark and why the others do not. A run that could score nothing is refused with one line saying why and
what to pass (:class:`RunRefused`); so is a metric named on its own that can run nowhere. A metric that came
with a group (``text``, ``image``, ``baselines``) and cannot run is skipped, with its reason, instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from capeval.bench._common import offline
from capeval.bench.benchmark_types import Benchmark
from capeval.bench.benchmarks import BENCHMARKS
from capeval.scoring.metric_names import GROUPS, BenchMetric, resolve_metrics

# The command-line flag of each loader option, for messages that say what to pass.
FLAGS = {
    "image_root": "--image-root",
    "video_root": "--video-root",
    "abstract_votes": "--abstract-votes",
    "thumb_references": "--thumb-references",
}
_DIRECTORIES = ("image_root", "video_root")
_FILES = ("abstract_votes", "thumb_references")


class RunRefused(ValueError):
    """The run cannot start; the message is one line saying why and what to pass."""


@dataclass
class RunPlan:
    """The benchmarks to load, the metrics to run on each, and why everything else is left out.

    Attributes:
        benchmarks: benchmarks whose data is here, in the order asked for.
        metrics: every metric asked for, once.
        not_run: benchmark name -> why it is not loaded (no data folder).
        skipped: (benchmark name, metric key) -> why that metric does not run on that benchmark.
    """

    benchmarks: list[Benchmark]
    metrics: list[BenchMetric]
    not_run: dict[str, str] = field(default_factory=dict)
    skipped: dict[tuple[str, str], str] = field(default_factory=dict)

    def runnable(self, benchmark: Benchmark) -> list[BenchMetric]:
        """The metrics that run on ``benchmark``."""
        return [m for m in self.metrics if (benchmark.name, m.key) not in self.skipped]

    def notes(self) -> list[str]:
        """One line per benchmark or metric left out, for the log of a partial run."""
        lines = [f"{BENCHMARKS[name].title} not run: {why}" for name, why in self.not_run.items()]
        titles = {b.name: b.title for b in self.benchmarks}
        where: dict[tuple[str, str], list[str]] = {}
        for (b, key), why in self.skipped.items():
            where.setdefault((key, why), []).append(titles[b])
        lines += [f"{key} skipped on {', '.join(on)}: {why}" for (key, why), on in where.items()]
        return lines


def _has_data(benchmark: Benchmark, data_dir: Path) -> bool:
    return benchmark.data_path(data_dir).exists() or (benchmark.hub_repo is not None and not offline())


def _benchmarks(names: Sequence[str]) -> list[Benchmark]:
    keys = [n.replace("-", "_").lower() for n in names]
    unknown = [n for n, k in zip(names, keys, strict=True) if k not in BENCHMARKS]
    if unknown:
        raise RunRefused(
            f"unknown benchmark{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
            f"choose from {', '.join(BENCHMARKS)} (or all)"
        )
    return [BENCHMARKS[k] for k in dict.fromkeys(keys)]


def _check_paths(options: dict) -> None:
    for name in _DIRECTORIES:
        value = options.get(name)
        if value is not None and not Path(value).expanduser().is_dir():
            raise RunRefused(f"{FLAGS[name]} {value}: no such folder")
    for name in _FILES:
        value = options.get(name)
        if value is not None and not Path(value).expanduser().exists():
            raise RunRefused(f"{FLAGS[name]} {value}: no such file")


def _visuals_missing(metric: BenchMetric, benchmark: Benchmark, options: dict) -> str | None:
    """Why an image metric cannot score ``benchmark`` with these options, or None."""
    if not metric.uses_images or benchmark.visuals is None:
        return None
    if benchmark.visuals == "video_root":
        return f"it scores images and {benchmark.title} has videos"
    if benchmark.visuals not in FLAGS:
        return f"the {benchmark.title} images ({benchmark.visuals}) cannot be given on the command line"
    if options.get(benchmark.visuals) is None:
        return f"it needs the {benchmark.title} images: pass {FLAGS[benchmark.visuals]} DIR"
    return None


def plan_run(
    benchmarks: Sequence[str],
    metrics: Sequence,
    data_dir: str | os.PathLike,
    options: dict | None = None,
    metric_options: dict | None = None,
) -> RunPlan:
    """Check a run before any work and say what runs where.

    Args:
        benchmarks: registry names, or ``[]`` / ``["all"]`` for every benchmark whose data is here. A benchmark
            named here must have its data folder under ``data_dir``.
        metrics: as for :func:`capeval.scoring.metric_names.resolve_metrics`.
        data_dir: folder holding one sub-folder per benchmark.
        options: loader and protocol options (``image_root``, ``video_root``, ``abstract_votes``, ...).
        metric_options: ``model``, ``checkpoint``, ``vectors``, ``device``, ...

    Raises:
        RunRefused: an unknown benchmark or metric, a missing data folder or option path, a metric named on its
            own that can run nowhere, or nothing at all to run.
    """
    options = dict(options or {})
    explicit = list(benchmarks) not in (["all"], [])
    chosen = _benchmarks(benchmarks) if explicit else list(BENCHMARKS.values())
    root = Path(data_dir).expanduser()
    if not root.is_dir() and not all(b.hub_repo and not offline() for b in chosen):
        raise RunRefused(
            f"no benchmark data folder {str(data_dir)!r}: pass --data-dir DIR (one sub-folder per benchmark, "
            "as in ../shared/benchmarks) or set CAPEVAL_BENCH_DATA"
        )
    absent = [b for b in chosen if not _has_data(b, root)]
    if explicit and absent:
        where = ", ".join(f"{b.name} ({b.data_path(root)})" for b in absent)
        raise RunRefused(f"no data for {where}: pass --data-dir DIR holding {absent[0].folder}/")
    _check_paths(options)
    try:
        resolved = resolve_metrics(list(metrics), **(metric_options or {}))
    except (ImportError, AttributeError, FileNotFoundError) as err:
        raise RunRefused(f"metric {err}") from err
    except ValueError as err:
        raise RunRefused(str(err)) from err
    plan = RunPlan(
        [b for b in chosen if b not in absent],
        resolved,
        {b.name: f"no data under {b.data_path(root)}" for b in absent},
    )
    for m in resolved:
        why_not_here = m.unavailable()
        for b in plan.benchmarks:
            why = why_not_here or _visuals_missing(m, b, options)
            if why:
                plan.skipped[(b.name, m.key)] = why
        named = not (isinstance(m.group, str) and m.group in GROUPS)
        if named and plan.benchmarks and all((b.name, m.key) in plan.skipped for b in plan.benchmarks):
            raise RunRefused(f"metric {m.key!r} cannot run: {plan.skipped[(plan.benchmarks[0].name, m.key)]}")
    if not plan.benchmarks:
        folders = ", ".join(dict.fromkeys(b.folder for b in absent))
        raise RunRefused(f"nothing to run: no benchmark data under {root} (looked for {folders})")
    if not any(plan.runnable(b) for b in plan.benchmarks):
        reasons = list(dict.fromkeys(plan.skipped.values()))
        raise RunRefused(f"nothing to run: {'; '.join(reasons[:3])}" + (" ..." if len(reasons) > 3 else ""))
    return plan
