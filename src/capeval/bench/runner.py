"""Run metrics on benchmarks: load, score (through the cache), apply the protocol, collect the table cells.

Nothing is dropped silently: a benchmark without data, a metric that cannot run here (no Java, no images, no
references in that setting) or a metric that fails is recorded with the reason, which the report prints.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np

from capeval.bench._common import offline
from capeval.bench.benchmark_types import Benchmark, Setting, Unit
from capeval.bench.benchmarks import get_benchmark
from capeval.bench.cache import ScoreCache, unit_key
from capeval.diagnostics.run_warnings import summarised_warnings
from capeval.scoring.metric_names import BenchMetric, resolve_metric

logger = logging.getLogger("capeval.bench")


@dataclass
class MetricOutcome:
    """One metric on one benchmark: the table cells, or why there are none."""

    key: str
    name: str
    values: dict[str, float] = field(default_factory=dict)
    signature: str = ""
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)
    computed: int = 0
    cached: int = 0
    seconds: float = 0.0
    error: BaseException | None = field(default=None, repr=False)  # what made it fail, for --debug


@dataclass
class BenchmarkRun:
    """All metrics on one benchmark, with the per-unit scores kept for plots and further statistics."""

    benchmark: Benchmark
    dataset: datasets.Dataset | None = None
    outcomes: dict[str, MetricOutcome] = field(default_factory=dict)
    scores: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    settings: list[Setting] = field(default_factory=list)
    skipped: str | None = None


def _visual_missing(units: Sequence[Unit]) -> int:
    missing = 0
    seen: dict[str, bool] = {}
    for u in units:
        img = u.image
        if img is None:
            missing += 1
        elif isinstance(img, (str, os.PathLike)):
            key = str(img)
            if key not in seen:
                seen[key] = Path(key).is_file()
            missing += not seen[key]
    return missing


def _progress_enabled(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else bool(progress)


def _as_metrics(metrics, options: dict) -> list[BenchMetric]:
    out: list[BenchMetric] = []
    for m in metrics:
        out.extend(resolve_metric(m, **options))
    return out


def score_setting(
    metric: BenchMetric,
    benchmark: str,
    setting: Setting,
    cache: ScoreCache,
    memory: dict[str, float],
    outcome: MetricOutcome,
) -> np.ndarray:
    """Scores for every unit of a setting: from memory (same inputs seen this run), the cache, or the metric."""
    keys = [
        unit_key(
            u.item_id,
            u.candidate,
            u.references if metric.uses_references else None,
            u.image if metric.uses_images else None,
        )
        for u in setting.units
    ]
    probe_unit = setting.units[0]
    signature = metric.signature(
        (probe_unit.candidate, probe_unit.references if metric.uses_references else None, probe_unit.image)
    )
    outcome.signature = signature
    cache_setting = setting.name if metric.corpus_level else "all"
    if metric.corpus_level:
        memory = {}  # per-item values depend on the whole call: never share them across settings
    stored = cache.load(signature, benchmark, cache_setting)
    known = {**stored, **memory}
    unique: dict[str, Unit] = {}
    for k, u in zip(keys, setting.units, strict=True):
        unique.setdefault(k, u)
    todo = [k for k in unique if k not in known]
    if metric.corpus_level and todo:
        todo = list(unique)  # recompute the whole corpus so IDF-like statistics match a clean run
    outcome.cached += len(unique) - len(todo)
    if todo:
        start = time.perf_counter()
        units = [unique[k] for k in todo]
        scores = metric.score(
            [u.candidate for u in units],
            [u.references for u in units] if metric.uses_references else None,
            [u.image for u in units] if metric.uses_images else None,
        )
        outcome.seconds += time.perf_counter() - start
        outcome.computed += len(todo)
        new = dict(zip(todo, scores, strict=True))
        known.update(new)
        cache.save(signature, benchmark, cache_setting, new)
    if not metric.corpus_level:
        memory.update(known)
    return np.array([known[k] for k in keys], dtype=np.float64)


@summarised_warnings()  # a metric warns once per setting: its warnings come once per benchmark run
def run_benchmark(
    benchmark: str | Benchmark,
    metrics: Sequence,
    data_dir: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    dataset: datasets.Dataset | None = None,
    cache: ScoreCache | None = None,
    options: dict | None = None,
    metric_options: dict | None = None,
    progress: bool | None = None,
    strict: bool = False,
) -> BenchmarkRun:
    """Score ``metrics`` on one benchmark and apply its protocol.

    Args:
        benchmark: a registry name (``flickr8k_expert``, ``pascal50s``, ...) or a :class:`Benchmark`.
        metrics: names, callables or :class:`BenchMetric` s (see :func:`capeval.scoring.metric_names.resolve_metric`).
        data_dir: folder holding one sub-folder per benchmark (the layout of ``../shared/benchmarks``).
        path: the benchmark's own folder, overriding ``data_dir``.
        dataset: an already loaded (and protocol-filtered) dataset, overriding both.
        cache: where per-item scores are kept (default: the user cache folder).
        options: protocol and loader options (``image_root``, ``video_root``, ``seed``, ``ties``,
            ``pascal_n_refs``, ``pascal_n_draws``, ``abstract_votes``, ``composite_keep_references``,
            ``thumb_references``, ``split``).
        metric_options: options for capeval metrics (``model``, ``device``, ``dtype``, ``batch_size``).
        progress: progress bars (None: when stderr is a terminal).
        strict: raise a metric's error instead of recording it.

    Raises:
        ValueError: ``data_dir`` (or ``path``) is not a folder, unless the benchmark reads its Hub dataset instead
            (online). A folder without this benchmark's data is a skipped run (``run.skipped`` says why), not an
            error: a data folder holds the benchmarks downloaded so far.
    """
    bench = get_benchmark(benchmark) if isinstance(benchmark, str) else benchmark
    options = dict(options or {})
    run = BenchmarkRun(bench)
    if dataset is None:
        _check_data_folder(bench, data_dir, path)
        where = Path(path) if path is not None else bench.data_path(data_dir if data_dir is not None else ".")
        try:
            dataset = bench.load(where, options)
        except FileNotFoundError as e:
            run.skipped = str(e)
            logger.info("%s skipped: %s", bench.title, e)  # recorded in run.skipped, which callers report
            return run
    run.dataset = dataset
    run.settings = bench.settings(dataset, options)
    cache = cache if cache is not None else ScoreCache()
    resolved = _as_metrics(metrics, metric_options or {})
    from tqdm.auto import tqdm

    bar = tqdm(
        total=len(resolved) * len(run.settings),
        disable=not _progress_enabled(progress),
        desc=bench.title,
        unit="pass",
    )
    try:
        for m in resolved:
            outcome = MetricOutcome(m.key, m.name)
            run.outcomes[m.key] = outcome
            reason = m.unavailable()
            if reason:
                outcome.skipped = reason
                bar.update(len(run.settings))
                continue
            per_setting = _score_settings(m, run, cache, outcome, bar, strict)
            if outcome.skipped is None and not per_setting:
                outcome.skipped = "no setting of this benchmark fits the metric" + (
                    f" ({'; '.join(outcome.notes)})" if outcome.notes else ""
                )
            if outcome.skipped is None:
                run.scores[m.key] = per_setting
                outcome.values = bench.evaluate(dataset, per_setting, options)
            m.close()
    finally:
        bar.close()
    return run


def _setting_skip(m: BenchMetric, setting) -> str | None:
    """Why ``m`` does not run on ``setting`` (``""``: silently, the setting is not for it; a note otherwise);
    ``None`` when it runs."""
    if m.uses_references and not setting.references:
        return ""
    if not m.uses_references and not setting.reference_free:
        return ""
    if m.uses_references and any(not u.references for u in setting.units):
        n = sum(not u.references for u in setting.units)
        return f"{setting.name}: {n} items have no references"
    return None


def _score_settings(m: BenchMetric, run, cache, outcome, bar, strict: bool) -> dict[str, np.ndarray]:
    """``m``'s per-item scores on every setting of ``run`` it fits (negated for distances); a missing image or a
    failing metric ends the metric (recorded in ``outcome``) and returns what was scored so far.

    Raises:
        Exception: the metric's own error, with ``strict``.
    """
    per_setting: dict[str, np.ndarray] = {}
    memory: dict[str, float] = {}
    for setting in run.settings:
        bar.set_postfix_str(f"{m.name} {setting.name}")
        skip = _setting_skip(m, setting)
        if skip is not None:
            if skip:
                outcome.notes.append(skip)
            bar.update(1)
            continue
        if m.uses_images:
            missing = _visual_missing(setting.units)
            if missing:
                outcome.skipped = f"{missing} of {len(setting.units)} images/videos are missing (pass --image-root / --video-root)"
                bar.update(len(run.settings) - len(per_setting))
                break
        try:
            scores = score_setting(m, run.benchmark.name, setting, cache, memory, outcome)
        except Exception as e:  # a failing metric is reported, the other metrics still run
            if strict:
                raise
            outcome.skipped = f"failed: {type(e).__name__}: {e}"
            outcome.error = e
            # The reason is recorded in the outcome; the traceback only when debugging is asked for.
            logger.debug("%s on %s failed", m.name, run.benchmark.title, exc_info=True)
            break
        per_setting[setting.name] = scores if m.higher_is_better else -scores
        bar.update(1)
    return per_setting


def _check_data_folder(
    bench: Benchmark, data_dir: str | os.PathLike | None, path: str | os.PathLike | None
) -> None:
    """Refuse a ``data_dir`` or ``path`` that is not a folder, by name: recorded as a skipped run, the mistake
    surfaced only later, as a ``TypeError`` on the run's empty dataset. A benchmark whose loader reads its Hub
    dataset when the folder is absent (online) is let through."""
    if bench.hub_repo is not None and not offline():
        return
    if path is not None:
        where, expected = Path(path).expanduser(), f"the folder holding the {bench.title} files"
        name = "path"
    elif data_dir is not None:
        where = Path(data_dir).expanduser()
        expected = (
            f"the benchmarks' data folder, one sub-folder per benchmark ({bench.folder}/ for {bench.title})"
        )
        name = "data_dir"
    else:
        return
    if not where.is_dir():
        what = "is not a folder" if where.exists() else "does not exist"
        raise ValueError(f"{name} {str(where)!r} {what}: expected {expected}")


def run_benchmarks(
    benchmarks: Sequence[str | Benchmark],
    metrics: Sequence,
    data_dir: str | os.PathLike,
    **kwargs,
) -> list[BenchmarkRun]:
    """:func:`run_benchmark` over several benchmarks (same metrics, cache and options)."""
    return [run_benchmark(b, metrics, data_dir=data_dir, **kwargs) for b in benchmarks]
