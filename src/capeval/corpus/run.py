"""Scoring corpora of any size: streaming, resumable after a crash, sharded across processes, filterable.

``score_corpus(source, output_dir, metric="clipscore", model=...)`` reads the rows of a JSONL file, a folder
of JSONL files, a folder of images with ``.txt`` captions, or a ``datasets`` dataset (in memory, saved with
``save_to_disk``, or streaming) in parts of ``chunk_size`` rows, and writes:

- ``parts/part-NNNNNNNN.jsonl``: each part's results, written atomically (temporary file + rename) when the
  part is done: a part file exists complete or not at all. A rerun skips the parts that exist and pass
  ``outputs.read_part``'s checks; a damaged one (garbage, empty, a row missing, a non-finite score, a header
  that disagrees with the source) is scored again, with a warning naming the file and what was wrong.
- ``embeddings.sqlite``: every image and caption embedding, committed batch by batch and keyed by content
  hash and model signature (``capeval.corpus.embedding_cache``): a run killed mid-part resumes from the last batch,
  and nothing is encoded twice, in this run or any later one sharing the cache.
- ``scores.jsonl`` (one line per input row, in input order: ``index``, ``id``, the per-row scores, or
  ``error``), ``errors.jsonl``, ``kept.jsonl`` (rows whose score passes ``threshold``, with their fields) and
  ``summary.json``, all written atomically once every part exists.
- ``run.json`` (the settings, ``outputs.check_manifest``) and ``run.lock``: one run per folder at a time
  (``capeval.corpus.lock``); a second is refused with an error naming the folder.

A source that yields no row is refused before anything is written (``sources.EmptySourceError``, saying what
the path holds). A row whose score comes out NaN or infinite (a model that overflows) is an error row, never a
number in the mean.

Memory stays bounded by the part size whatever the corpus size: rows are read lazily, one part at a time,
and the outputs are merged line by line. Under ``torchrun`` / ``accelerate launch`` each process takes the
parts ``p % world_size == rank`` (on its own GPU) and the main process merges.

Results equal an uninterrupted run exactly (same machine and thread count): within a part, images and captions missing from the cache are
encoded in batches cut the same way whatever is already cached (a resumed part's missing items are a suffix
of the uninterrupted run's list). With several processes, an image or caption repeated across parts of
different processes may be encoded in another batch than in a one-process run: equal up to float rounding.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capeval.corpus.items import Columns
from capeval.corpus.part_run import PartRun
from capeval.corpus.sources import DatasetSource, ImageFolderSource, JsonlSource, Source, open_source
from capeval.diagnostics.run_warnings import summarised_warnings
from capeval.registry import build_scorer, row_image_metrics, spec

__all__ = [
    "CorpusResult",
    "DatasetSource",
    "ImageFolderSource",
    "JsonlSource",
    "Source",
    "open_source",
    "score_corpus",
]

CHUNK_SIZE = 1024  # rows per part: the unit of resumption and of memory use


@dataclass
class CorpusResult:
    """Where a corpus run wrote its outputs, and its summary (also in ``summary.json``)."""

    output_dir: Path
    scores: Path
    errors: Path
    kept: Path | None
    summary: dict


@summarised_warnings()  # one warning per kind for the whole corpus, not one per chunk
def score_corpus(
    source: Any,
    output_dir: str | os.PathLike,
    metric: str = "clipscore",
    *,
    caption_column: str | None = None,
    image_column: str | None = None,
    references_column: str | None = None,
    id_column: str | None = "id",
    split: str | None = None,
    threshold: float | None = None,
    threshold_key: str | None = None,
    cache: str | os.PathLike | None = None,
    chunk_size: int = CHUNK_SIZE,
    progress: bool | None = None,
    num_workers: int | None = None,
    engine: str = "local",
    metrics: Sequence[str] | None = None,
    top_fraction: float | None = None,
    save_embeddings: bool = False,
    ray_address: str | None = None,
    **options,
) -> CorpusResult:
    """Score every row of a corpus, resumably; see the module docstring for the files written.

    Args:
        source: JSONL file, folder of JSONL files, folder of images with ``.txt`` captions, ``save_to_disk``
            folder, ``datasets`` dataset (``Dataset`` or streaming ``IterableDataset``), or a dataset name
            streamed with ``datasets.load_dataset(name, split=split, streaming=True)``.
        output_dir: where parts and outputs go; rerunning with the same folder resumes.
        metric: ``"clipscore"``, ``"refclipscore"`` or ``"pacscore"``.
        caption_column, image_column, references_column, id_column: the row fields used (unset: ``caption``
            and ``image``; for Parquet shards, chosen once from the first shard's columns). Images are paths
            (relative to the JSONL file), ``datasets`` Image values, or decoded pictures.
        threshold, threshold_key: write ``kept.jsonl`` with the rows whose ``threshold_key`` score (default:
            the metric's own) is at least ``threshold``.
        split, cache: a dataset's split; the embedding cache file (default ``output_dir/embeddings.sqlite``).
        chunk_size, progress: rows per part (the unit of resumption and memory); a progress bar (``None``: on
            a terminal only).
        num_workers: threads reading and decoding images (``engine="ray"``: actors holding a model).
        engine: ``"local"`` or ``"ray"``. Shards (img2dataset's ``.tar`` files or ``.parquet`` files: a folder,
            a glob, a list) and every ``"ray"`` run go to ``capeval.corpus.shard_run.score_shards``.
        metrics, top_fraction, save_embeddings: shards only: several per-row metrics (default ``[metric]``),
            DataComp's cut (the top fraction by ``threshold_key``), float16 image and caption embeddings too.
        ray_address: the Ray cluster to join (``"auto"``); None starts a local one.
        **options: metric options (``model``, ``device``, ``dtype``, ``batch_size``, ``prefix``, ``w``, ...).

    Returns:
        CorpusResult: output paths and the summary (identical in every process).
    """
    from capeval.corpus.distributed import process_state
    from capeval.corpus.shards import is_shard_source

    _refuse_model_object(options)
    if engine == "ray" or is_shard_source(source):
        return _score_shard_source(
            source, output_dir, list(metrics or [metric]), engine, caption_column, image_column, threshold,
            top_fraction, threshold_key, save_embeddings, ray_address, num_workers, options,
        )  # fmt: skip
    if metrics is not None or top_fraction is not None or save_embeddings:
        raise ValueError(
            "metrics=, top_fraction= and save_embeddings= apply to shards (.tar/.parquet files); this source is "
            f"{type(source).__name__} {source!r:.80}: use metric= and threshold="
        )
    columns = Columns(caption_column or "caption", image_column or "image", references_column, id_column)
    _check_run_arguments(metric, columns, chunk_size, threshold, num_workers)
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    state = process_state(options.get("device"))
    if state.num_processes > 1:
        options["device"] = state.device  # one GPU per process
    run = PartRun(
        output=output, metric=metric, scorer=build_scorer(metric, **options, progress=False),
        source=open_source(source, columns.image, split), columns=columns, chunk_size=chunk_size, state=state,
        cache=Path(cache) if cache else output / "embeddings.sqlite",
    )  # fmt: skip
    summary = run.execute(num_workers, progress, threshold, threshold_key or metric)
    kept = output / "kept.jsonl" if threshold is not None else None
    return CorpusResult(output, output / "scores.jsonl", output / "errors.jsonl", kept, summary)


def _refuse_model_object(options: dict) -> None:
    """A resumable run names its model in run.json and its cache keys: a model object has no name that outlives
    the process, and its weights change."""
    if not isinstance(options.get("model", ""), (str, os.PathLike)):
        raise TypeError(
            "score_corpus takes model= as a Hub id or a folder; a model object cannot be resumed or cached: save "
            "it with save_pretrained (and its processor) and pass that folder"
        )


def _score_shard_source(
    source, output_dir, metrics, engine, caption_column, image_column, threshold, top_fraction, threshold_key,
    save_embeddings, ray_address, num_workers, options,
) -> CorpusResult:  # fmt: skip
    """``score_corpus`` of shards: ``score_shards`` with the corpus options, its result as a ``CorpusResult``."""
    from capeval.corpus.shard_run import score_shards

    taken = {"model", "device", "dtype", "prefix", "w", "checkpoint", "batch_size"}
    unknown = sorted(set(options) - taken - {"progress"})
    if unknown:
        raise TypeError(f"shard scoring does not take the option(s) {unknown}; it takes {sorted(taken)}")
    result = score_shards(
        source,
        output_dir,
        metrics,
        engine=engine,
        caption_column=caption_column,
        image_column=image_column,
        threshold=threshold,
        top_fraction=top_fraction,
        threshold_key=threshold_key,
        save_embeddings=save_embeddings,
        ray_address=ray_address,
        num_workers=num_workers if engine == "ray" else None,
        **{k: v for k, v in options.items() if k in taken},
    )
    return CorpusResult(
        output_dir=result.output_dir, scores=result.scores, errors=result.scores, kept=result.kept,
        summary=result.summary,
    )  # fmt: skip


def _check_run_arguments(
    metric: str, columns: Columns, chunk_size: Any, threshold: Any, num_workers: Any
) -> None:
    """Refuse run settings that would crash late or filter silently wrong: a metric that is not a per-row image
    metric, a missing references column where the metric needs one, sizes that are not positive integers, a
    threshold that is not a finite number."""
    image_metrics = row_image_metrics()
    if metric not in image_metrics:
        raise ValueError(f"corpus scoring takes an image metric ({', '.join(image_metrics)}), got {metric!r}")
    if spec(metric).needs("references") and columns.references is None:
        raise ValueError(f"{metric} needs references: name their column (references_column=...)")
    for name, value in (("chunk_size", chunk_size), ("num_workers", num_workers)):
        if value is None and name == "num_workers":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if threshold is not None:
        if not isinstance(threshold, numbers.Real) or isinstance(threshold, bool):
            raise TypeError(f"threshold must be a number, got {type(threshold).__name__} {threshold!r}")
        if not math.isfinite(threshold):
            # NaN keeps no row and says nothing; an infinity keeps none or all.
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
