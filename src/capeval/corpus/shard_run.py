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

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capeval.clip.batching import BATCH_SIZE
from capeval.corpus.lock import OutputLock
from capeval.corpus.outputs import check_manifest, claim_output_folder
from capeval.corpus.row_scoring import RowScorer, check_row_metrics, prepare_rows
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


def score_shard_locally(scorer: RowScorer, rows: list, batch_size: int) -> dict[str, Any]:
    """Prepare and score one shard's rows in batches of ``batch_size``, in this process."""
    batches = [
        scorer.score(prepare_rows(rows[s : s + batch_size], scorer.image_size))
        for s in range(0, len(rows), batch_size)
    ]
    return concat_batches(batches)


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
        num_workers: Ray actors holding a model (default: one per GPU, else 1).
        worker_gpus, worker_cpus: resources of each actor (default: 1 GPU when the cluster has GPUs, else
            half a CPU so the read tasks keep CPUs).
        model, device, dtype, prefix, w, checkpoint: metric options (with Ray, ``device`` is the actors':
            the driver loads the model once on its CPU to check it before any work).

    Returns:
        ShardRunResult: the folders and the summary.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    names = check_row_metrics(metrics)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    options = {"model": model, "device": device, "dtype": dtype}
    for name, value in (("prefix", prefix), ("w", w), ("checkpoint", checkpoint)):
        if value is not None:
            options[name] = value
    if "pacscore" in names and checkpoint is None:
        raise ValueError("pacscore needs its weights: give checkpoint=...")
    if model is None and "pacscore" not in names:
        from capeval.clip.backbones import DEFAULT_MODEL

        options["model"] = DEFAULT_MODEL
    shards = list_shards(source)
    columns = choose_columns(shards, caption_column, image_column)
    output = Path(output_dir)
    # Built here first, on the driver: a model that cannot be loaded fails the run now, not on the workers.
    # With Ray, the driver (often a head node without a GPU) loads it on its CPU: the actors take `device`.
    driver_options = {**options, "device": "cpu"} if engine == "ray" else options
    scorer = RowScorer(names, driver_options, embeddings=save_embeddings)
    key = threshold_key or names[0]
    if key not in scorer.columns():
        raise ValueError(f"threshold_key {key!r} is not a score column of this run: {scorer.columns()}")
    manifest = {
        "format": FORMAT,
        "metrics": names,
        "signatures": scorer.signatures,
        "source": source_description(source),
        "columns": columns,
        "embeddings": save_embeddings,
    }
    output.mkdir(parents=True, exist_ok=True)
    claim_output_folder(output)
    plan = _Plan(
        source=source, engine=engine, columns=columns, batch_size=batch_size, embeddings=save_embeddings,
        key_metric=key, cut={"threshold": threshold, "top_fraction": top_fraction},
        ray={"ray_address": ray_address, "num_workers": num_workers, "worker_gpus": worker_gpus,
             "worker_cpus": worker_cpus, "options": options},
    )  # fmt: skip
    with OutputLock(output):
        check_manifest(output, manifest)
        remove_stale_temporaries(output)
        return _score_pending(plan, shards, output, scorer)


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
    ray: dict  # run_on_ray's cluster settings and the metric options


def _score_pending(plan: _Plan, shards: list[Shard], output: Path, scorer: RowScorer) -> ShardRunResult:
    """Score the shards whose output is not done (missing, damaged, or from another input), then summarise."""
    records = {s.name: input_record(s.path) for s in shards}
    pending = [s for s in shards if not is_done(output, s.name, records[s.name])]
    start = time.perf_counter()
    caption_column, image_column = plan.columns["caption"], plan.columns["image"]
    if plan.engine == "local":
        failed = _run_locally(
            scorer, pending, output, (caption_column, image_column), plan.batch_size, plan.embeddings, records
        )
    else:
        from capeval.corpus.ray_engine import run_on_ray

        failed = run_on_ray(
            pending, output, scorer.metrics, records=records, caption_column=caption_column,
            image_column=image_column, batch_size=plan.batch_size, embeddings=plan.embeddings,
            score_columns=scorer.columns(), image_size=scorer.image_size, **plan.ray,
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
) -> dict[str, str]:
    """Read, score and write each shard in this process; returns ``{shard: why}`` for those not read."""
    failed: dict[str, str] = {}
    for shard in shards:
        try:
            rows = read_shard(shard, *columns)
        except ValueError as err:  # ShardReadError, or a Parquet shard without the columns: as on Ray
            failed[shard.name] = str(err)
            continue
        if not rows:
            failed[shard.name] = f"shard {shard.path} holds no sample"
            continue
        scored = score_shard_locally(scorer, rows, batch_size)
        write_shard_output(output, shard.name, scored, scorer.columns(), embeddings, records[shard.name])
    return failed
