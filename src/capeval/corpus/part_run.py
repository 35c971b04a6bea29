"""The JSONL corpus engine's run: claim the output folder, score the parts this process owns, merge and summarise.

``score_corpus`` (``capeval.corpus.run``) checks the arguments and builds a ``PartRun``; the steps below are the
run itself, one method each: ``claim`` (the main process takes the folder: it must be new, empty or this run's;
the lock, stale temporaries, ``run.json``), ``score_parts`` (each process its parts ``p % world == rank``, each
part scored from cached embeddings and written atomically), ``summarise`` (the main process merges the parts and
writes ``summary.json``; every process gets the summary).
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from capeval.corpus.cached_encoding import CachedEncoder
from capeval.corpus.distributed import _raise_if_any_failed
from capeval.corpus.embedding_cache import EmbeddingCache, hash_text
from capeval.corpus.items import Columns, Item, to_item
from capeval.corpus.lock import OutputLock
from capeval.corpus.outputs import (
    FORMAT,
    DamagedPartError,
    atomic_write,
    check_manifest,
    check_part,
    claim_output_folder,
    merge_parts,
    part_path,
    write_part,
)
from capeval.corpus.row_scoring import per_row_fields
from capeval.corpus.sources import Source
from capeval.diagnostics.categories import DamagedFileWarning, user_stacklevel
from capeval.registry import spec


@dataclass
class RunCounters:
    """Rows and parts this invocation scored, and the parts it found done."""

    rows: int = 0
    parts: int = 0
    parts_skipped: int = 0
    parts_rescored: int = 0  # damaged part files found and scored again


def _score_part(scorer, encoder: CachedEncoder, items: list[Item], name: str) -> None:
    """Fill each item's scores (``item.row`` gets them under ``__scores__``) or its error."""
    live = [it for it in items if it.error is None]
    for it, (content, error) in zip(live, encoder.hash_images([it.image for it in live]), strict=True):
        it.content, it.error = content, error
    live = [it for it in live if it.error is None]
    images = encoder.image_vectors([(it.content, it.image) for it in live])
    for it in live:
        if isinstance(images[it.content], str):
            it.error = images[it.content]
    live = [it for it in live if it.error is None]
    if not live:
        return
    takes_refs = spec(name).reads("references")  # CLIP-S ignores a references column
    texts = [it.caption for it in live] + [r for it in live if takes_refs for r in (it.references or [])]
    vectors = encoder.text_vectors(texts)

    def cached_texts(batch: list[str]) -> torch.Tensor:
        return torch.stack([vectors[hash_text(t)] for t in batch])

    # Rows with and without references in separate calls: PAC-S scores a row that has none (its RefPAC-S is
    # absent, and the summary's score_counts say over how many rows each mean is taken).
    groups = (
        [[it for it in live if it.references], [it for it in live if not it.references]]
        if takes_refs
        else [live]
    )
    for group in groups:
        if not group:
            continue
        references = [it.references for it in group] if takes_refs and group[0].references else None
        predictions, references = scorer.checked_inputs([it.caption for it in group], references)
        image_emb = torch.stack([images[it.content] for it in group])
        # The metric's own maths, fed the cached embeddings.
        text_emb, reference_emb = scorer.caption_and_reference_embeddings(
            predictions, references, cached_texts
        )
        result = scorer.score_embeddings(image_emb, text_emb, reference_emb)
        fields = per_row_fields(name, result, len(group))
        for k, it in enumerate(group):
            scores = {f: values[k] for f, values in fields.items()}
            bad = {f: v for f, v in scores.items() if not math.isfinite(v)}
            if bad:
                # NaN would poison the corpus mean and every comparison with the threshold.
                it.error = f"the model gave a non-finite score ({bad}): its embeddings overflowed; try dtype='float32'"
            else:
                it.row["__scores__"] = scores


@dataclass
class PartRun:
    """One JSONL corpus run in this process.

    Attributes:
        output: the output folder.
        metric: the metric's name; ``scorer`` its scorer (built on this process's device).
        source: the rows (``capeval.corpus.sources``); ``columns`` the row fields read.
        chunk_size: rows per part; ``state`` this process's place in the launch (``process_state``).
        cache: the embedding cache file.
    """

    output: Path
    metric: str
    scorer: Any
    source: Source
    columns: Columns
    chunk_size: int
    state: Any
    cache: Path
    counters: RunCounters = field(default_factory=RunCounters)

    def execute(
        self, num_workers: int | None, progress: bool | None, threshold: float | None, threshold_key: str
    ) -> dict:
        """Claim the folder, score this process's parts, merge and summarise; the lock is held throughout."""
        lock = self.claim()
        try:
            self.state.wait_for_everyone()
            started = time.time()
            encoder = self.score_parts(num_workers, progress)
            self.state.wait_for_everyone()
            return self.summarise(threshold, threshold_key, encoder, started)
        finally:
            if lock is not None:
                lock.release()  # the OS releases it too if this process dies

    def manifest(self) -> dict:
        """What ``run.json`` records: a rerun with other settings or another source is refused."""
        c = self.columns
        return {
            "format": FORMAT,
            "metric": self.metric,
            "signature": self.scorer.signature,
            "source": self.source.description,
            "columns": {"caption": c.caption, "image": c.image, "references": c.references, "id": c.id},
            "chunk_size": self.chunk_size,
        }

    def claim(self) -> OutputLock | None:
        """The main process takes the folder for every process of the run (the lock is returned, held).

        Raises:
            ValueError, OSError: in every process, when the main one could not claim the folder (another run
                holds it, it is not a capeval folder, the source is empty, ``run.json`` disagrees).
        """
        error = lock = None
        if self.state.is_main_process:
            try:
                claim_output_folder(self.output)
                lock = OutputLock(self.output).acquire()
                self.source.check_not_empty()  # before run.json: a corrected source must not meet "other settings"
                parts = self.output / "parts"
                for stale in parts.glob(".*.tmp") if parts.is_dir() else ():
                    stale.unlink()  # a killed run's half-written parts (no other run can be writing: we hold the lock)
                check_manifest(self.output, self.manifest())
            except (ValueError, OSError) as err:  # every process raises, none waits for the main one
                error = err
                if lock is not None:
                    lock.release()
                    lock = None
        _raise_if_any_failed(error, self.state)
        return lock

    def wanted(self, part: int, count: int) -> bool:
        """Whether this process scores ``part``: one of its parts, not on disk or damaged there."""
        if part % self.state.num_processes != self.state.process_index:
            return False
        path = part_path(self.output, part)
        if not path.exists():
            return True
        try:
            check_part(path, part, self.chunk_size, self.metric, count)
        except DamagedPartError as err:
            self.counters.parts_rescored += 1
            warnings.warn(
                f"{err.path} is damaged ({err.problem}): scoring part {part} again",
                DamagedFileWarning,
                stacklevel=user_stacklevel(),
            )
            return True
        return False

    def _finished_parts(self) -> int:
        parts = self.output / "parts"
        return len(list(parts.glob("part-*.jsonl"))) if parts.is_dir() else 0

    def _progress_bar(self, progress: bool | None):
        """The main process's bar over rows, starting from the parts already on disk (``None`` elsewhere)."""
        if not self.state.is_main_process:
            return None
        from tqdm.auto import tqdm

        total = self.source.count()  # for the bar's ETA only
        done = self._finished_parts() * self.chunk_size
        world = self.state.num_processes
        return tqdm(
            total=total,
            initial=min(total, done) if total else done,
            desc=f"{self.metric} ({world} process{'es' if world > 1 else ''})",
            unit="row",
            dynamic_ncols=True,
            smoothing=0.05,
            disable=(not progress) if progress is not None else None,
        )

    def score_parts(self, num_workers: int | None, progress: bool | None) -> CachedEncoder:
        """Score and write every part this process owns; returns the encoder (its counters for the summary)."""
        workers = num_workers or max(1, min(8, os.cpu_count() or 1))
        store = EmbeddingCache(self.cache)
        scorer = self.scorer
        encoder = CachedEncoder(scorer.backbone, scorer.prefix, store, scorer.batch_size, workers)
        needs_refs = spec(self.metric).needs("references")
        bar = self._progress_bar(progress)
        try:
            for part, rows, count in self.source.parts(self.chunk_size, self.wanted):
                if rows is None:
                    if part % self.state.num_processes == self.state.process_index:
                        self.counters.parts_skipped += 1
                    continue
                items = [to_item(index, row, self.columns, needs_refs) for index, row in rows]
                _score_part(scorer, encoder, items, self.metric)
                write_part(self.output, part, part * self.chunk_size, count, count < self.chunk_size, items)
                self.counters.parts += 1
                self.counters.rows += count
                if bar is not None:
                    done = self._finished_parts() * self.chunk_size
                    bar.n = min(bar.total, done) if bar.total else done
                    bar.refresh()
        finally:
            encoder.close()
            store.close()
            if bar is not None:
                bar.close()
        return encoder

    def summarise(self, threshold: float | None, threshold_key: str | None, encoder, started: float) -> dict:
        """Merge the parts and write ``summary.json`` (main process); every process returns the summary.

        Raises:
            ValueError, OSError: in every process, when the main one could not merge (a part missing or damaged).
        """
        from capeval import __version__

        summary = error = None
        if self.state.is_main_process:
            try:
                merged = merge_parts(self.output, self.metric, threshold, threshold_key, self.chunk_size)
                summary = {
                    "metric": self.metric,
                    "signature": self.scorer.signature,
                    "corpus_score": merged["means"].get(self.metric),
                    **merged,
                    "threshold": threshold,
                    "threshold_key": threshold_key if threshold is not None else None,
                    "this_run": {
                        **self.counters.__dict__,
                        **encoder.counters.__dict__,
                        "seconds": round(time.time() - started, 3),
                        "processes": self.state.num_processes,
                    },
                    "capeval": __version__,
                }
                text = json.dumps(summary, indent=2) + "\n"
                atomic_write(self.output / "summary.json", lambda fh: fh.write(text))
            except (ValueError, OSError) as err:  # every process raises, none waits in the broadcast
                error = err
        _raise_if_any_failed(error, self.state)
        if self.state.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            holder = [summary]
            broadcast_object_list(holder)
            summary = holder[0]
        return summary
