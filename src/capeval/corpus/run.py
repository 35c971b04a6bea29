"""Scoring a corpus of any size and format, resumably, on this machine or a Ray cluster.

``score_corpus(source, output_dir, metrics=["clipscore"], model=...)`` reads any source as shards of rows
(``capeval.corpus.reader``: WebDataset tars and Parquet files as they are; JSONL and CSV files, image folders and
``datasets`` datasets cut into shards of ``chunk_size`` rows), scores every row with per-row image metrics, and
writes one output schema whatever the source:

- ``scores/<shard>.parquet``: one per input shard, one row per sample (``capeval.corpus.shard_outputs``), written
  atomically, its footer recording the input shard's identity;
- ``summary.json`` and, with a ``threshold`` or ``top_fraction``, ``kept.jsonl`` (``capeval.corpus.shard_summary``);
- ``run.json`` (the settings) and ``run.lock`` (one run per folder at a time, ``capeval.corpus.run_folder``).

One resume rule: a rerun skips a shard whose output is whole and records the same input; a shard whose input
changed is scored again and said so (``shard_outputs.is_done``). A shard that cannot be read is reported in the
summary while the others are scored.

Two executors differ only in where the work runs: ``"local"`` (this process; under ``torchrun`` / ``accelerate
launch`` each process takes every ``world_size``-th pending shard, ``capeval.corpus.local_executor``) and ``"ray"``
(read tasks and an actor pool, ``capeval.corpus.ray_engine``). Both read with ``reader.read_shard``, prepare and
score with ``capeval.corpus.row_scoring`` and write with ``shard_outputs``: the same input gives the same rows.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capeval.clip.batching import BATCH_SIZE
from capeval.corpus.local_executor import run_local
from capeval.corpus.reader import Corpus, choose_columns, open_corpus
from capeval.corpus.row_scoring import RowScorer, check_row_metrics
from capeval.corpus.run_folder import claimed_output
from capeval.corpus.run_plan import CorpusResult, RunPlan, score_pending
from capeval.corpus.shard_outputs import remove_stale_temporaries
from capeval.diagnostics.extras import require_extra
from capeval.diagnostics.run_warnings import summarised_warnings

CHUNK_SIZE = 1024  # rows per shard of a row source: the unit of resumption, of memory and of a Ray read task
EXECUTORS = ("local", "ray")


@summarised_warnings()  # one warning per kind for the whole corpus, not one per shard
def score_corpus(
    source: Any,
    output_dir: str | os.PathLike,
    metrics: str | Sequence[str] = ("clipscore",),
    *,
    executor: str = "local",
    caption_column: str | None = None,
    image_column: str | None = None,
    references_column: str | None = None,
    id_column: str | None = None,
    split: str | None = None,
    threshold: float | None = None,
    top_fraction: float | None = None,
    threshold_key: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    batch_size: int = BATCH_SIZE,
    num_workers: int | None = None,
    save_embeddings: bool = False,
    resharder_subset: bool = False,
    embedding_layout: bool = False,
    progress: bool | None = None,
    ray: dict[str, Any] | None = None,
    model: str | os.PathLike | None = None,
    device: str | None = None,
    dtype: str = "float32",
    prefix: str | None = None,
    w: float | None = None,
    checkpoint: str | os.PathLike | None = None,
    allow_pipe: bool = False,
    image_root: str | os.PathLike | None = None,
    raw_cosine: bool = True,
) -> CorpusResult:
    """Score every row of a corpus; rerunning with the same ``output_dir`` resumes (see the module docstring).

    Args:
        source: tars or Parquet shards (a folder, glob, brace pattern, URL, ``pipe:`` command, list), a JSONL or
            CSV file or folder of them, an image folder with ``.txt`` captions, a ``datasets`` dataset or its name.
        output_dir: a new or empty folder, or one of an earlier run of the same settings and source (resumed).
        metrics: per-row image metrics (``clipscore``, ``refclipscore``, ``pacscore``), one or several.
        executor: ``"local"`` (this process, or each process of a ``torchrun`` launch) or ``"ray"``.
        caption_column, image_column, references_column, id_column: the fields read; unset, each is chosen once
            from the first shard's fields and recorded in ``run.json``. split: a dataset's split.
        threshold, top_fraction, threshold_key: write ``kept.jsonl`` with the rows scoring at least ``threshold``,
            or the top fraction (DataComp's cut), on ``threshold_key`` (default: the first metric's score).
        chunk_size, batch_size: rows per shard of a row source; rows per forward pass (and Ray scoring call).
        num_workers: local: processes decoding rows ahead of the model (default: every core, at most 32, beside
            a GPU; none on the CPU); Ray: actors holding a model (default: one per GPU, else 1).
        save_embeddings, resharder_subset, embedding_layout: also write float16 embeddings (null on error rows);
            ``kept_uids.npy`` for DataComp's ``resharder.py --subset-file`` (needs a cut); clip-retrieval's
            ``embeddings/`` layout (implies ``save_embeddings``).
        progress: a progress bar over shards and rows (None: on a terminal only).
        ray: ``address`` (``"auto"``: the cluster ``ray start`` made; unset: a local one), ``worker_gpus``,
            ``worker_cpus``.
        model, device, dtype, prefix, w, checkpoint: metric options (with Ray, ``device`` is the actors').
        allow_pipe: run a ``pipe:CMD`` source (a shell command whose output is read as a tar), given as ``source``
            itself: ``capeval corpus`` sets it for its own source argument. A ``pipe:`` item of a list, a list file
            or a listing is refused whatever this says: a command never comes from data.
        image_root: the folder rows may read the images they name by path in (JSONL, CSV, Parquet, ``datasets``
            rows, image folders). Unset, a row reads only inside its data file's folder (an absolute path, ``..`` or
            a link leading out of it is an error row) and a source without a folder reads no path.
        raw_cosine: write the ``raw_cosine`` column (the plain cosine LAION's and DataComp's thresholds apply to);
            with a metric's prompt it costs a second text forward pass per caption.

    Returns:
        CorpusResult: the folders and the summary (identical in every process of a launch).

    Raises:
        EmptySourceError: the source holds no row. ValueError, TypeError: a setting or source refused, named.
    """
    settings = CorpusSettings.of(locals())  # first: the keywords as given, one object from here on
    require_extra("corpus", "score_corpus")
    names = check_row_metrics(metrics)
    options = _metric_options(names, settings.metric_options)
    settings.check()
    corpus = _open(source, settings)
    columns = choose_columns(corpus.shards, settings.columns_given)
    state = _process_state(executor, device, options)
    scorer = RowScorer(
        names, _driver_options(options, executor), embeddings=settings.embeddings, raw_cosine=raw_cosine
    )
    plan = settings.plan(corpus, columns, _threshold_column(scorer, threshold_key), options)
    if executor == "local":
        return run_local(plan, Path(output_dir), scorer, state)
    with claimed_output(Path(output_dir), plan.manifest(scorer), remove_stale_temporaries):
        return score_pending(plan, Path(output_dir), scorer, _run_ray)


@dataclass(frozen=True)
class CorpusSettings:
    """The settings of one ``score_corpus`` call (its keywords, as given), made once and passed as one object.

    ``check`` refuses what cannot run before anything is read or written; the properties give each step the part
    it reads.
    """

    executor: str
    caption_column: str | None
    image_column: str | None
    references_column: str | None
    id_column: str | None
    split: str | None
    threshold: float | None
    top_fraction: float | None
    threshold_key: str | None
    chunk_size: int
    batch_size: int
    num_workers: int | None
    save_embeddings: bool
    resharder_subset: bool
    embedding_layout: bool
    progress: bool | None
    ray: dict[str, Any] | None
    model: str | os.PathLike | None
    device: str | None
    dtype: str
    prefix: str | None
    w: float | None
    checkpoint: str | os.PathLike | None
    allow_pipe: bool
    image_root: str | os.PathLike | None
    raw_cosine: bool

    @classmethod
    def of(cls, given: dict[str, Any]) -> CorpusSettings:
        """The settings among ``given`` (``score_corpus``'s arguments; the source and output are not settings)."""
        return cls(**{name: given[name] for name in cls.__dataclass_fields__})

    def check(self) -> None:
        """Refuse settings before anything is read or written: an unknown executor, sizes that are not positive
        integers, a cut that would filter silently wrong, a resharder subset without a cut, Ray settings off Ray.

        Raises:
            ValueError, TypeError: the setting, named with its value.
        """
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        _check_sizes(chunk_size=self.chunk_size, batch_size=self.batch_size, num_workers=self.num_workers)
        if self.executor == "ray" and self.num_workers == 0:
            raise ValueError(
                "num_workers=0 means no decoding worker on the local executor; on Ray it is the number of actors "
                "holding a model, at least 1 (leave it unset for one per GPU, else 1)"
            )
        _check_cut(self.threshold, self.top_fraction)
        if self.resharder_subset and self.threshold is None and self.top_fraction is None:
            raise ValueError("resharder_subset writes the kept rows' uids: give threshold or top_fraction")
        if not isinstance(self.raw_cosine, bool):
            raise TypeError(
                f"raw_cosine must be True or False, got {type(self.raw_cosine).__name__} {self.raw_cosine!r}"
            )
        self.ray_settings  # noqa: B018 - checked now, before the source is opened

    def plan(
        self, corpus: Corpus, columns: dict[str, str], key_metric: str, options: dict[str, Any]
    ) -> RunPlan:
        """What every executor runs: the opened source, the columns chosen, the column a cut applies to and the
        metric options, with these settings."""
        return RunPlan(
            corpus=corpus,
            executor=self.executor,
            columns=columns,
            chunk_size=self.chunk_size,
            batch_size=self.batch_size,
            embeddings=self.embeddings,
            key_metric=key_metric,
            cut={"threshold": self.threshold, "top_fraction": self.top_fraction},
            num_workers=self.num_workers,
            progress=self.progress,
            ray={**self.ray_settings, "options": options},
            exports={"resharder_subset": self.resharder_subset, "embedding_layout": self.embedding_layout},
        )

    @property
    def metric_options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("model", "device", "dtype", "prefix", "w", "checkpoint")}

    @property
    def columns_given(self) -> dict[str, str | None]:
        return {
            "caption": self.caption_column,
            "image": self.image_column,
            "references": self.references_column,
            "id": self.id_column,
        }

    @property
    def embeddings(self) -> bool:
        """Embeddings are written (the clip-retrieval layout is made from them)."""
        return self.save_embeddings or self.embedding_layout

    @property
    def ray_settings(self) -> dict[str, Any]:
        """``address``, ``worker_gpus``, ``worker_cpus`` (None where unset).

        Raises:
            ValueError: Ray settings for the local executor, or an unknown one.
        """
        known = {"address", "worker_gpus", "worker_cpus"}
        given = dict(self.ray or {})
        if given and self.executor != "ray":
            raise ValueError(f"ray={given} applies to executor='ray', not {self.executor!r}")
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"unknown Ray setting(s) {unknown}; known: {sorted(known)}")
        return {k: given.get(k) for k in sorted(known)}


def _open(source: Any, settings: CorpusSettings) -> Corpus:
    """The source as shards (``reader.open_corpus``); a streamed dataset, read in order by one process, is refused
    on Ray."""
    corpus = open_corpus(
        source,
        settings.chunk_size,
        settings.split,
        settings.image_column,
        settings.allow_pipe,
        settings.image_root,
    )
    if corpus.streamed and settings.executor == "ray":
        raise ValueError(
            "a streamed dataset is read in order by one process, so it runs on executor='local'; for Ray, save it "
            "with save_to_disk (or export Parquet shards) and give that"
        )
    return corpus


def _process_state(executor: str, device: str | None, options: dict[str, Any]):
    """This process's place in a ``torchrun`` launch (local executor; None on Ray): with several processes, each
    scores on its own device."""
    if executor != "local":
        return None
    from capeval.corpus.distributed import process_state

    state = process_state(device)
    if state.num_processes > 1:
        options["device"] = str(state.device)
    return state


def _metric_options(names: list[str], given: dict[str, Any]) -> dict[str, Any]:
    """The metric options: ``model``, ``device`` and ``dtype`` always, ``prefix``, ``w`` and ``checkpoint`` only when
    given, capeval's default model when none is given (PAC-S takes its checkpoint's).

    Raises:
        ValueError: PAC-S without weights. TypeError: a model object (a resumable run names its model in
            ``run.json``; an object has no name that outlives the process).
    """
    if given["model"] is not None and not isinstance(given["model"], (str, os.PathLike)):
        raise TypeError(
            "score_corpus takes model= as a Hub id, a folder or a file; a model object cannot be resumed: save it "
            "with save_pretrained (and its processor) and pass that folder"
        )
    options = {k: given[k] for k in ("model", "device", "dtype")}
    options.update({k: given[k] for k in ("prefix", "w", "checkpoint") if given[k] is not None})
    if "pacscore" in names and given["checkpoint"] is None:
        raise ValueError("pacscore needs its weights: give checkpoint=...")
    if given["model"] is None and "pacscore" not in names:
        from capeval.clip.backbones import DEFAULT_MODEL

        options["model"] = DEFAULT_MODEL
    return options


def _check_sizes(**sizes: Any) -> None:
    """Refuse sizes that are not positive integers (``num_workers`` may be None, the default, or 0 locally)."""
    for name, value in sizes.items():
        if value is None and name == "num_workers":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
        if value < (0 if name == "num_workers" else 1):
            raise ValueError(f"{name} must be >= {0 if name == 'num_workers' else 1}, got {value}")


def _check_cut(threshold: Any, top_fraction: Any) -> None:
    """Refuse a cut that would filter silently wrong: both given, a threshold that is not a finite number (NaN
    keeps no row and says nothing), a fraction outside (0, 1]."""
    if threshold is not None and top_fraction is not None:
        raise ValueError("give threshold or top_fraction, not both")
    for name, value in (("threshold", threshold), ("top_fraction", top_fraction)):
        if value is None:
            continue
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if top_fraction is not None and not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction must be in (0, 1], got {top_fraction}")


def _driver_options(options: dict[str, Any], executor: str) -> dict[str, Any]:
    """The options the driver builds the run's metrics with, before any work, so that a model that cannot be
    loaded fails the run now, not on the workers: with Ray the driver (often a head node without a GPU) loads
    them on its CPU and the actors take the ``device`` asked for; the local executor loads them where asked."""
    return {**options, "device": "cpu"} if executor == "ray" else options


def _threshold_column(scorer: RowScorer, threshold_key: str | None) -> str:
    """The score column a threshold or top fraction applies to: ``threshold_key``, else the first metric's.

    Raises:
        ValueError: the scorer writes no such column.
    """
    key = threshold_key or scorer.metrics[0]
    if key not in scorer.columns():
        raise ValueError(f"threshold_key {key!r} is not a score column of this run: {scorer.columns()}")
    return key


def _run_ray(plan: RunPlan, pending: list, output: Path, scorer: RowScorer, records: dict[str, dict]) -> dict:
    from capeval.corpus.ray_engine import run_on_ray

    return run_on_ray(
        pending,
        output,
        scorer.metrics,
        records=records,
        columns=plan.columns,
        batch_size=plan.batch_size,
        embeddings=plan.embeddings,
        score_columns=scorer.columns(),
        image_size=scorer.image_size,
        num_workers=plan.num_workers,
        **plan.ray,
    )
