"""Scoring sharded corpora (WebDataset tars, Parquet) into one Parquet file per shard, on either engine.

``engine="local"`` scores the shards one after another in this process; ``engine="ray"`` hands them to a
Ray cluster (``capeval.corpus.ray_engine``). Both read shards with ``capeval.corpus.shards``, score with
``capeval.corpus.row_scoring`` and write ``capeval.corpus.shard_outputs``' files, so their outputs are the
same files with the same numbers. A rerun skips shards whose output exists whole (resumption is per shard)
and whose input shard is unchanged (``shard_outputs.is_done``), and a shard that cannot be read is reported in
the summary while the others are scored. The output folder is held by one run at a time (``run.lock``) and must
be new, empty, or a run's own (``outputs.claim_output_folder``): nothing a run did not write is deleted.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capeval.clip.batching import BATCH_SIZE
from capeval.corpus.lock import OutputLock
from capeval.corpus.outputs import check_manifest, claim_output_folder
from capeval.corpus.row_batches import DecodePool, default_decode_workers
from capeval.corpus.row_scoring import RowScorer, check_row_metrics
from capeval.corpus.shard_outputs import (
    FORMAT,
    input_record,
    is_done,
    remove_stale_temporaries,
    source_description,
    write_shard_output,
)
from capeval.corpus.shard_summary import summarise_outputs
from capeval.corpus.shards import Shard, choose_columns, list_shards, read_shard
from capeval.diagnostics.run_warnings import summarised_warnings

ENGINES = ("local", "ray")


@dataclass
class ShardRunResult:
    """Where a shard run wrote its files, and its summary (``summary.json``)."""

    output_dir: Path
    scores: Path  # the folder of per-shard Parquet files
    kept: Path | None
    summary: dict


def concat_batches(batches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One shard's scored batches as one set of columns (lists joined, arrays stacked)."""
    import numpy as np

    out: dict[str, Any] = {}
    for name in batches[0]:
        parts = [b[name] for b in batches]
        out[name] = (
            np.concatenate(parts) if isinstance(parts[0], np.ndarray) else [v for p in parts for v in p]
        )
    return out


def score_shard_locally(
    scorer: RowScorer, rows: list, batch_size: int, decode: DecodePool | None = None
) -> dict[str, Any]:
    """Score one shard's rows in batches of ``batch_size`` in this process, ``decode``'s workers preparing them
    ahead of the model (None: each batch prepared here when it is needed)."""
    with DecodePool(0) if decode is None else contextlib.nullcontext(decode) as pool:
        batches = pool.batches(rows, scorer.image_size, batch_size)
        return concat_batches([scorer.score(batch) for batch in batches])


@summarised_warnings()
def score_shards(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    output_dir: str | os.PathLike,
    metrics: Sequence[str] = ("clipscore",),
    *,
    engine: str = "local",
    caption_column: str | None = None,
    image_column: str | None = None,
    threshold: float | None = None,
    top_fraction: float | None = None,
    threshold_key: str | None = None,
    save_embeddings: bool = False,
    batch_size: int = BATCH_SIZE,
    ray_address: str | None = None,
    num_workers: int | None = None,
    worker_gpus: float | None = None,
    worker_cpus: float | None = None,
    model: str | None = None,
    device: str | None = None,
    dtype: str = "float32",
    prefix: str | None = None,
    w: float | None = None,
    checkpoint: str | None = None,
) -> ShardRunResult:
    """Score every row of every shard; rerunning with the same ``output_dir`` skips finished shards.

    Args:
        source: a folder of ``NNNNN.tar`` (img2dataset's WebDataset layout) or ``.parquet`` shards, a glob,
            a file, or a list of files.
        output_dir: where ``run.json``, ``scores/<shard>.parquet``, ``summary.json`` and ``kept.jsonl`` go: a new
            or empty folder, or one of an earlier run of the same settings and source (resumed).
        metrics: per-row metrics (``clipscore``, ``refclipscore``, ``pacscore``).
        engine: ``"local"`` (this process) or ``"ray"`` (a Ray cluster, ``pip install 'capeval[ray]'``).
        caption_column, image_column: Parquet shards' columns (default: chosen once, by name, from the first
            shard's columns, and recorded in ``run.json`` and the summary).
        threshold, top_fraction: keep rows scoring at least ``threshold``, or the top fraction (DataComp's cut).
        threshold_key: the score column they apply to (default: the first metric's).
        save_embeddings: also write float16 image and caption embeddings.
        batch_size: rows per forward pass (and per Ray batch).
        ray_address: the cluster to join (``"auto"``: the one ``ray start`` made); None starts a local one.
        num_workers: local: processes decoding rows ahead of the model (default: every core, at most 32, beside a
            GPU; 0, in this process, on the CPU); Ray: actors holding a model (default: one per GPU, else 1).
        worker_gpus, worker_cpus: resources of each actor (default: 1 GPU when the cluster has GPUs, else
            half a CPU so the read tasks keep CPUs).
        model, device, dtype, prefix, w, checkpoint: metric options (with Ray, ``device`` is the actors':
            the driver loads the model once on its CPU to check it before any work).

    Returns:
        ShardRunResult: the folders and the summary.
    """
    given = dict(model=model, device=device, dtype=dtype, prefix=prefix, w=w, checkpoint=checkpoint)
    names, options = _checked_settings(engine, metrics, batch_size, given)
    shards = list_shards(source)
    columns = choose_columns(shards, caption_column, image_column)
    output = Path(output_dir)
    scorer = RowScorer(names, _driver_options(options, engine), embeddings=save_embeddings)
    plan = _Plan(
        source=source, engine=engine, columns=columns, batch_size=batch_size, embeddings=save_embeddings,
        key_metric=_threshold_column(scorer, threshold_key),
        cut={"threshold": threshold, "top_fraction": top_fraction}, num_workers=num_workers,
        ray={"ray_address": ray_address, "worker_gpus": worker_gpus, "worker_cpus": worker_cpus,
             "options": options},
    )  # fmt: skip
    with _claimed_output(output, plan.manifest(scorer)):
        return _score_pending(plan, shards, output, scorer)


def _checked_settings(
    engine: str, metrics: Sequence[str], batch_size: int, given: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """Refuse an unknown engine, bad metrics, a batch size below 1 or PAC-S without weights; return the metric
    names and the metric options.

    Args:
        engine: ``"local"`` or ``"ray"``.
        metrics: the per-row metrics asked for.
        batch_size: rows per forward pass.
        given: ``model``, ``device``, ``dtype``, ``prefix``, ``w``, ``checkpoint`` as the caller gave them.

    Returns:
        ``(names, options)``: the checked metric names; ``model``, ``device`` and ``dtype`` always, ``prefix``,
        ``w`` and ``checkpoint`` only when given, and capeval's default model when none is given (PAC-S has none).
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    names = check_row_metrics(metrics)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    options = {k: given[k] for k in ("model", "device", "dtype")}
    options.update({k: given[k] for k in ("prefix", "w", "checkpoint") if given[k] is not None})
    if "pacscore" in names and given["checkpoint"] is None:
        raise ValueError("pacscore needs its weights: give checkpoint=...")
    if given["model"] is None and "pacscore" not in names:
        from capeval.clip.backbones import DEFAULT_MODEL

        options["model"] = DEFAULT_MODEL
    return names, options


def _driver_options(options: dict[str, Any], engine: str) -> dict[str, Any]:
    """The options the driver builds the run's metrics with, before any work, so that a model that cannot be
    loaded fails the run now, not on the workers: with Ray the driver (often a head node without a GPU) loads
    them on its CPU and the actors take the ``device`` asked for; the local engine loads them where asked."""
    return {**options, "device": "cpu"} if engine == "ray" else options


def _threshold_column(scorer: RowScorer, threshold_key: str | None) -> str:
    """The score column a threshold or top fraction applies to: ``threshold_key``, else the first metric's.

    Raises:
        ValueError: the scorer writes no such column.
    """
    key = threshold_key or scorer.metrics[0]
    if key not in scorer.columns():
        raise ValueError(f"threshold_key {key!r} is not a score column of this run: {scorer.columns()}")
    return key


@contextmanager
def _claimed_output(output: Path, manifest: dict[str, Any]) -> Iterator[Path]:
    """Hold ``output`` for this run: created if new, refused if it holds files of no run, locked against other
    runs, its ``run.json`` written or checked against ``manifest``, a killed run's temporaries removed.

    Yields:
        ``output``, locked until the ``with`` block ends.
    """
    output.mkdir(parents=True, exist_ok=True)
    claim_output_folder(output)
    with OutputLock(output):
        check_manifest(output, manifest)
        remove_stale_temporaries(output)
        yield output


@dataclass(frozen=True)
class _Plan:
    """The settings of one shard run that the steps after the checks need."""

    source: Any
    engine: str
    columns: dict
    batch_size: int
    embeddings: bool
    key_metric: str
    cut: dict  # threshold, top_fraction
    num_workers: int | None  # local: decoding processes; Ray: actors (None: each executor's default)
    ray: dict  # run_on_ray's cluster settings and the metric options

    def manifest(self, scorer: RowScorer) -> dict[str, Any]:
        """The run's ``run.json``: what a resumed run must share (format, metrics and their signatures, the
        source, the columns read, whether embeddings are written)."""
        return {
            "format": FORMAT,
            "metrics": scorer.metrics,
            "signatures": scorer.signatures,
            "source": source_description(self.source),
            "columns": self.columns,
            "embeddings": self.embeddings,
        }


def _score_pending(plan: _Plan, shards: list[Shard], output: Path, scorer: RowScorer) -> ShardRunResult:
    """Score the shards whose output is not done (missing, damaged, or from another input), then summarise."""
    records = {s.name: input_record(s.path) for s in shards}
    pending = [s for s in shards if not is_done(output, s.name, records[s.name])]
    start = time.perf_counter()
    caption_column, image_column = plan.columns["caption"], plan.columns["image"]
    if plan.engine == "local":
        workers = plan.num_workers
        if workers is None:
            workers = default_decode_workers(next(iter(scorer.scorers.values())).backbone.device)
        failed = _run_locally(
            scorer, pending, output, (caption_column, image_column), plan.batch_size, plan.embeddings, records,
            workers,
        )  # fmt: skip
    else:
        from capeval.corpus.ray_engine import run_on_ray

        failed = run_on_ray(
            pending, output, scorer.metrics, records=records, caption_column=caption_column,
            image_column=image_column, batch_size=plan.batch_size, embeddings=plan.embeddings,
            score_columns=scorer.columns(), image_size=scorer.image_size, num_workers=plan.num_workers,
            **plan.ray,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    if failed and len(failed) == len(shards):
        listed = "; ".join(f"{name}: {why}" for name, why in sorted(failed.items()))
        raise ValueError(f"none of the {len(shards)} shard(s) in {plan.source} could be read ({listed})")
    written = [s.name for s in shards if s.name not in failed]
    details = {"engine": plan.engine, "signatures": scorer.signatures, "columns": plan.columns}
    details["shards_scored_now"] = len(pending) - len(failed)
    summary = summarise_outputs(
        output, written, plan.key_metric, failed_shards=failed, seconds=seconds, details=details, **plan.cut
    )
    kept = output / "kept.jsonl" if any(v is not None for v in plan.cut.values()) else None
    return ShardRunResult(output_dir=output, scores=output / "scores", kept=kept, summary=summary)


def _run_locally(
    scorer: RowScorer,
    shards: list[Shard],
    output: Path,
    columns: tuple[str | None, str | None],
    batch_size: int,
    embeddings: bool,
    records: dict[str, dict],
    workers: int = 0,
) -> dict[str, str]:
    """Read, score and write each shard in this process (``workers`` processes decoding ahead of the model);
    returns ``{shard: why}`` for those not read."""
    failed: dict[str, str] = {}
    with DecodePool(workers) as decode:
        for shard in shards:
            try:
                rows = read_shard(shard, *columns)
            except ValueError as err:  # ShardReadError, or a Parquet shard without the columns: as on Ray
                failed[shard.name] = str(err)
                continue
            if not rows:
                failed[shard.name] = f"shard {shard.path} holds no sample"
                continue
            scored = score_shard_locally(scorer, rows, batch_size, decode)
            write_shard_output(output, shard.name, scored, scorer.columns(), embeddings, records[shard.name])
    return failed
