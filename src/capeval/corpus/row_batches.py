"""Shards' rows read, decoded and cut into prepared batches for the local executor, by worker processes.

On a GPU the model scores a prepared row in a few microseconds, and the process that feeds it must do per batch only
what needs the model. So the worker processes do everything per row: each takes a shard (or, with fewer shards than
workers, every ``parts``-th batch of one), reads it itself (``reader.rows_or_why``: the one reader layer), makes
its rows, decodes and resizes their images straight into a slot of memory it shares with the scoring process
(``row_scoring.prepare_rows``), and sends only the batch's small columns (keys, captions, errors) and the slot's
number through a pipe of its own. The scoring process reads the pixels where they lie, scores them, and hands the
slot back. Nothing per row is pickled but text, and no lock is shared between processes: a worker that dies (the
OOM killer) is seen by its process sentinel, its shard read again by a fresh worker, and a second death fails the
shard by name; the run never hangs on it.

A batch is ``batch_size`` consecutive rows of one shard, cut from the shard's start whoever reads it, so the model
sees the same batches whether one process or many read them, and the scores are the same bit for bit. With
``workers=0`` everything happens in this process, one shard after another (a streamed dataset is read so: its rows
come once, in order).
"""

from __future__ import annotations

import itertools
import mmap
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

import numpy as np
import torch

from capeval.corpus.reader import read_shards, rows_or_why
from capeval.corpus.row_scoring import prepare_rows
from capeval.corpus.shards import ShardReadError

SLOTS_PER_WORKER = 2  # batches a worker may hold prepared: one being scored while it fills the other
RETRIES = 1  # a shard whose worker died is read again this often, then failed by name


def default_decode_workers(device: torch.device) -> int:
    """Worker processes reading and decoding rows by default: as many as ``encode_images`` reads images with beside a
    GPU (every core, at most 32), none on the CPU, whose cores the model needs itself."""
    from capeval.clip.image_encoding import default_workers

    if device.type != "cuda" or sys.platform == "win32":
        return 0
    return default_workers(device)


@dataclass
class ShardBatch:
    """One prepared batch: ``rows`` is ``prepare_rows``' dict (its ``pixels`` may lie in memory shared with a
    worker); ``release`` gives that memory back once the batch is scored."""

    position: int  # the shard's place in the list read
    number: int  # the batch's place in its shard: rows number * batch_size onwards
    rows: dict[str, Any]
    release: Callable[[], None] = lambda: None


@dataclass
class ShardDone:
    """A shard read to its end (every one of its batches given before this), or why it could not be."""

    position: int
    batches: int = 0
    rows: int = 0
    late_errors: dict[int, str] = field(default_factory=dict)
    failure: str | None = None


def read_batches(
    shards: Sequence[Any],
    columns: dict[str, Any],
    batch_size: int,
    image_size: int,
    workers: int = 0,
    streamed: bool = False,
    tokenize: Callable[[dict], dict] | None = None,
) -> Iterator[ShardBatch | ShardDone]:
    """Every shard's prepared batches, then its ``ShardDone``; shards overlap when ``workers`` read them.

    Args:
        shards: ``capeval.corpus.shards.Shard``s to read.
        columns: ``reader.choose_columns``' choice.
        batch_size: rows per batch (a shard's last batch may be shorter).
        image_size: the backbone's input size (``Backbone.image_size``).
        workers: processes reading and decoding (0: this process, in order).
        streamed: the shards are a streamed dataset's, read in order here whatever ``workers`` says.
        tokenize: called on each prepared batch where it is prepared; its result is the batch's ``token_ids``
            (``RowScorer.tokenize``: the captions' token ids, so that the scoring process does not tokenise).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    prepare = _preparer(image_size, tokenize)
    if workers == 0 or streamed or not shards:
        yield from _read_here(shards, columns, batch_size, image_size, streamed, prepare)
        return
    with _Workers(shards, columns, batch_size, image_size, workers, prepare) as pool:
        yield from pool.run()


def _preparer(image_size: int, tokenize: Callable[[dict], dict] | None) -> Callable[[list, np.ndarray], dict]:
    """What is done with each batch of rows where it is read: ``prepare_rows`` into the given pixels, then
    ``tokenize``."""

    def prepare(rows: list, out: np.ndarray) -> dict:
        prepared = prepare_rows(rows, image_size, out=out)
        if tokenize is not None:
            prepared["token_ids"] = tokenize(prepared)
        return prepared

    return prepare


def _cut(rows: Iterator[Any], batch_size: int) -> Iterator[list[Any]]:
    while batch := list(itertools.islice(rows, batch_size)):
        yield batch


def _read_here(
    shards, columns, batch_size, image_size, streamed, prepare
) -> Iterator[ShardBatch | ShardDone]:
    """The shards read in this process, one after another, each batch prepared into one reused buffer (the caller
    scores it before asking for the next)."""
    buffer = np.empty((batch_size, int(image_size), int(image_size), 3), np.uint8)
    for position, (_, stream, why) in enumerate(read_shards(shards, columns, streamed)):
        if why is not None:
            yield ShardDone(position, failure=why)
            continue
        number = count = 0
        try:
            for rows in _cut(stream.rows, batch_size):
                yield ShardBatch(position, number, prepare(rows, buffer[: len(rows)]))
                number, count = number + 1, count + len(rows)
        except ShardReadError as err:  # part-way: none of its rows is kept
            yield ShardDone(position, failure=str(err))
            continue
        yield ShardDone(position, number, count, stream.late_errors)


# --- worker processes ---------------------------------------------------------------------------------------------


def _work(
    commands,
    results,
    shards,
    columns,
    batch_size: int,
    prepare: Callable[[list, np.ndarray], dict],
    slots: list[np.ndarray],
    free: list[int],
) -> None:
    """A worker: reads the shard parts it is sent, preparing its batches into its free slots.

    Messages in (``commands``): ``("read", position, part, parts, attempt)``, ``("release", slot)``, ``None`` (stop).
    Messages out (``results``): ``("batch", position, part, attempt, number, slot, columns)`` and
    ``("end", position, part, attempt, batches, rows, late_errors, failure)``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the scoring process stops its workers itself
    # The tokenizer's threads ran before the fork: it says so on every first use unless told to run without.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    free = list(free)

    def take_slot() -> int | None:
        while not free:
            message = commands.recv()
            if message is None:
                return None
            if message[0] == "release":
                free.append(message[1])
        return free.pop()

    while (message := commands.recv()) is not None:
        if message[0] == "release":
            free.append(message[1])
            continue
        _, position, part, parts, attempt = message
        stream, why = rows_or_why(shards[position], columns)
        if why is not None:
            results.send(("end", position, part, attempt, 0, 0, {}, why))
            continue
        number = count = 0
        try:
            for rows in _cut(stream.rows, batch_size):
                if number % parts == part:
                    slot = take_slot()
                    if slot is None:
                        return
                    prepared = prepare(rows, slots[slot][: len(rows)])
                    prepared.pop("pixels")
                    results.send(("batch", position, part, attempt, number, slot, prepared))
                number, count = number + 1, count + len(rows)
        except ShardReadError as err:
            results.send(("end", position, part, attempt, 0, 0, {}, str(err)))
            continue
        results.send(("end", position, part, attempt, number, count, dict(stream.late_errors), None))


@dataclass
class _Worker:
    """One worker process and what the scoring process knows of it."""

    index: int
    process: Any = None
    commands: Any = None  # the scoring process's end of the pipe to the worker
    results: Any = None  # ... and of the pipe from it
    job: tuple[int, int] | None = None  # (shard position, part) being read
    held: set[int] = field(default_factory=set)  # its slots lent to the caller (a batch not yet released)

    def send(self, message) -> bool:
        """Send ``message``; False when the process is gone (its death is handled where it is seen)."""
        try:
            self.commands.send(message)
        except OSError:
            return False
        return True


class _Workers:
    """The worker processes of one call of ``read_batches``, their slots, and the bookkeeping of shard parts."""

    def __init__(self, shards, columns, batch_size: int, image_size: int, workers: int, prepare) -> None:
        self.shards, self.columns, self.prepare = shards, columns, prepare
        self.batch_size, self.image_size = batch_size, int(image_size)
        # With fewer shards than workers, each shard is read by several, each preparing every parts-th batch.
        self.parts = max(1, workers // len(shards))
        count = min(workers, len(shards) * self.parts)
        slot_bytes = batch_size * self.image_size * self.image_size * 3
        # Anonymous shared memory, made before the workers fork: theirs and this process's alike, named nowhere.
        self.memory = mmap.mmap(-1, count * SLOTS_PER_WORKER * slot_bytes)
        whole = np.frombuffer(self.memory, np.uint8)
        shape = (batch_size, self.image_size, self.image_size, 3)
        self.slots = [
            [
                whole[(w * SLOTS_PER_WORKER + s) * slot_bytes :][:slot_bytes].reshape(shape)
                for s in range(SLOTS_PER_WORKER)
            ]
            for w in range(count)
        ]
        self.workers = [_Worker(w) for w in range(count)]
        self.context = multiprocessing.get_context("fork")
        self.jobs = [(position, part) for position in range(len(shards)) for part in range(self.parts)][::-1]
        self.attempts: dict[tuple[int, int], int] = {job: 0 for job in self.jobs}
        self.deaths: dict[tuple[int, int], str] = {}
        self.ends: dict[int, dict[int, tuple]] = {}  # shard -> part -> (batches, rows, late errors, failure)
        self.idle: list[_Worker] = []

    def __enter__(self) -> _Workers:
        for worker in self.workers:
            self._start(worker)
        return self

    def __exit__(self, *exc) -> None:
        for worker in self.workers:
            self._stop(worker)

    def _start(self, worker: _Worker) -> None:
        """(Re)start ``worker``, idle, with the slots the caller does not hold."""
        commands_out, commands_in = self.context.Pipe(duplex=False)
        results_out, results_in = self.context.Pipe(duplex=False)
        free = [s for s in range(SLOTS_PER_WORKER) if s not in worker.held]
        worker.process = self.context.Process(
            target=_work,
            args=(
                commands_out,
                results_in,
                self.shards,
                self.columns,
                self.batch_size,
                self.prepare,
                self.slots[worker.index],
                free,
            ),
            daemon=True,
        )
        worker.process.start()
        commands_out.close()
        results_in.close()
        worker.commands, worker.results, worker.job = commands_in, results_out, None
        self.idle.append(worker)

    def _stop(self, worker: _Worker) -> None:
        if worker.process is None:
            return
        worker.send(None)
        worker.process.join(timeout=5)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.commands.close()
        worker.results.close()
        worker.process = None

    def _release(self, worker: _Worker, slot: int) -> Callable[[], None]:
        """Give ``slot`` back to ``worker`` (to its successor, if it died meanwhile: the successor was started
        without the slots the caller held)."""

        def release() -> None:
            worker.held.discard(slot)
            if worker.process is not None:
                worker.send(("release", slot))

        return release

    def run(self) -> Iterator[ShardBatch | ShardDone]:
        while self.jobs or any(w.job is not None for w in self.workers):
            while self.jobs and self.idle:
                worker = self.idle.pop()
                worker.job = self.jobs.pop()
                position, part = worker.job
                # A worker gone while idle: its job is read again by its successor (its attempt not counted).
                if not worker.send(("read", position, part, self.parts, self.attempts[worker.job])):
                    self.jobs.append(worker.job)
                    self._restart(worker)
            busy = [w for w in self.workers if w.job is not None]
            if not busy:
                continue
            ready = set(wait([w.results for w in busy] + [w.process.sentinel for w in busy]))
            for worker in busy:
                if worker.results in ready or worker.process.sentinel in ready:
                    yield from self._receive(worker)

    def _receive(self, worker: _Worker) -> Iterator[ShardBatch | ShardDone]:
        """What ``worker`` has sent so far, or its death: batches given out, its part's end recorded."""
        while worker.job is not None:
            try:
                if not worker.results.poll():
                    if worker.process.is_alive():
                        return
                    raise EOFError  # dead, and every message it sent has been read
                message = worker.results.recv()
            except (EOFError, OSError):
                yield from self._died(worker)
                return
            kind, position, part, attempt = message[:4]
            if attempt != self.attempts[(position, part)]:
                continue  # from an attempt whose worker died: the part is being read again
            if kind == "batch":
                number, slot, columns = message[4:]
                columns["pixels"] = self.slots[worker.index][slot][: len(columns["key"])]
                worker.held.add(slot)
                yield ShardBatch(position, number, columns, self._release(worker, slot))
                continue
            worker.job = None
            self.idle.append(worker)
            yield from self._ended(position, part, message[4:])

    def _restart(self, worker: _Worker) -> str:
        """Start a successor to a dead ``worker``; returns how it died."""
        worker.process.join()
        code = worker.process.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        if code == -signal.SIGKILL:
            how += ", as the out-of-memory killer kills"
        worker.commands.close()
        worker.results.close()
        self._start(worker)
        return how

    def _died(self, worker: _Worker) -> Iterator[ShardDone]:
        """``worker`` died reading its part: the part is read again by a successor, or, the second time, its
        shard is failed by name."""
        job = worker.job
        how = self._restart(worker)
        self.attempts[job] += 1
        if self.attempts[job] <= RETRIES:
            self.deaths[job] = how
            self.jobs.append(job)
            return
        position, part = job
        why = (
            f"shard {self.shards[position].where} could not be read: the worker process reading it died "
            f"{self.attempts[job]} times ({self.deaths.get(job, how)}; then {how}); none of its rows is kept"
        )
        yield from self._ended(position, part, (0, 0, {}, why))

    def _ended(self, position: int, part: int, end: Sequence) -> Iterator[ShardDone]:
        """A part's end; once every part of the shard has ended, the shard's."""
        parts = self.ends.setdefault(position, {})
        parts[part] = tuple(end)
        if len(parts) < self.parts:
            return
        failures = [e[3] for e in parts.values() if e[3] is not None]
        if failures:
            yield ShardDone(position, failure=failures[0])
            return
        batches, rows, late, _ = next(iter(parts.values()))
        yield ShardDone(position, batches, rows, {int(k): v for k, v in late.items()})


__all__ = ["ShardBatch", "ShardDone", "default_decode_workers", "read_batches"]
