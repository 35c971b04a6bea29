"""Prepared batches of one shard's rows for the local engine, decoded by worker processes ahead of the model.

Decoding and resizing a 640x480 JPEG costs one core about 5 ms, while a GPU scores a prepared row in well under
one: read in sequence, the local engine kept an H100 busy 0.3 % of the time (``scripts/bench_gpu.py --sections
corpus``). A pool of worker processes, forked once per run, prepares small chunks of rows a bounded window ahead
of the model; the chunks are put together into batches of ``batch_size`` in row order. Every row comes out
exactly as ``prepare_rows`` makes it in this process, error rows included.
"""

from __future__ import annotations

import itertools
import multiprocessing
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import torch

from capeval.corpus.row_scoring import prepare_rows

MAX_CHUNK = 32  # rows per worker task: small enough that every worker has work in a shard of few batches


def default_decode_workers(device: torch.device) -> int:
    """Worker processes decoding rows by default: as many as ``encode_images`` reads images with beside a GPU
    (every core, at most 32), none on the CPU, whose cores the model needs itself."""
    from capeval.clip.image_encoding import default_workers

    if device.type != "cuda" or sys.platform == "win32":
        return 0
    return default_workers(device)


def _joined(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One prepared batch from consecutive prepared chunks, in their order."""
    out: dict[str, Any] = {}
    for field in chunks[0]:
        values = [c[field] for c in chunks]
        if field in ("pixels", "index"):
            out[field] = np.concatenate(values)
        else:
            out[field] = [x for v in values for x in v]
    return out


class DecodePool:
    """Processes decoding rows for a whole run, forked once (forking per shard cost more than the decoding of a
    shard of 512 rows on 16 cores); ``workers=0`` prepares every batch in this process instead.

    Use as a context manager; ``batches`` streams one shard's rows through it.
    """

    def __init__(self, workers: int) -> None:
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> DecodePool:
        if self.workers:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def pids(self) -> list[int]:
        """The worker processes' ids (none before the first chunk is sent to them, or without workers)."""
        processes = getattr(self._pool, "_processes", None) or {}  # ProcessPoolExecutor starts them on demand
        return list(processes)

    def batches(self, rows: Iterable[Any], image_size: int, batch_size: int) -> Iterator[dict[str, Any]]:
        """``prepare_rows`` over consecutive batches of ``batch_size`` rows, in order, taking rows from ``rows`` only
        a bounded window ahead of the batch given out (a shard is never held whole).

        Args:
            rows: one shard's ``ShardRow``s, as they are read.
            image_size: the backbone's input size.
            batch_size: rows per yielded batch (the last may be shorter).

        Yields:
            dict: ``prepare_rows``'s batch (``pixels`` (B, size, size, 3) uint8).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        rows = iter(rows)
        head = list(itertools.islice(rows, MAX_CHUNK + 1))
        if self._pool is None or len(head) <= MAX_CHUNK:  # a few rows: sent to no worker
            rows = itertools.chain(head, rows)
            while batch := list(itertools.islice(rows, batch_size)):
                yield prepare_rows(batch, image_size)
            return
        chunk = max(1, min(MAX_CHUNK, -(-batch_size // self.workers)))
        rows = itertools.chain(head, rows)
        ahead = max(2 * self.workers, -(-2 * batch_size // chunk))  # chunks decoding while the model scores
        futures: deque = deque()
        pending: list[dict[str, Any]] = []
        held = 0

        def submit() -> None:
            part = list(itertools.islice(rows, chunk))
            if part:
                futures.append(self._pool.submit(prepare_rows, part, image_size))

        try:
            for _ in range(ahead):
                submit()
            while futures:
                piece = futures.popleft().result()
                submit()
                pending.append(piece)
                held += len(piece["key"])
                while held >= batch_size:
                    joined = _joined(pending)
                    yield {k: v[:batch_size] for k, v in joined.items()}
                    rest = {k: v[batch_size:] for k, v in joined.items()}
                    held -= batch_size
                    pending = [rest] if held else []
            if held:
                yield _joined(pending)
        finally:
            for future in futures:
                future.cancel()
