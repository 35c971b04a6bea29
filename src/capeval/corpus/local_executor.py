"""The local executor of ``score_corpus``: shards scored in this process, or shared by the processes of a launch.

In one process, worker processes read the pending shards and prepare their rows in batches
(``capeval.corpus.row_batches``: each reads a shard itself, decodes and resizes its images into memory it shares
with this process); this process scores each batch as it comes (``RowScorer.score``), holds only the scores until a
shard's last batch is in, and a writer thread writes the shard. Without workers (the default on the CPU, whose
cores the model needs) the shards are read here, one after another.
Under ``torchrun`` / ``accelerate launch`` the main process claims the folder and decides the pending shards, each
process scores every ``world_size``-th of them on its own device, and the main one summarises; every process
returns the summary.

The cores are shared, not oversubscribed: on the CPU, the model's torch threads are set before each shard to the
cores the decoding workers and other processes leave (``capeval.corpus.cpu_share``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from capeval.corpus.cpu_share import FIRST_LOOK_SECONDS, CoreLoad, threads_pinned, torch_threads
from capeval.corpus.distributed import _raise_if_any_failed
from capeval.corpus.row_batches import ShardBatch, default_decode_workers, read_batches
from capeval.corpus.row_scoring import RowScorer
from capeval.corpus.run_folder import claimed_output
from capeval.corpus.run_plan import pending_shards, score_pending, summarise
from capeval.corpus.shard_outputs import (
    changed_while_read,
    input_record,
    remove_stale_temporaries,
    write_shard_output,
)


@contextlib.contextmanager
def _torch_threads(device, workers: int, processes: int) -> Iterator[Callable[[], None]]:
    """On the CPU, a function setting torch's threads before each shard (``cpu_share.torch_threads``: the cores
    left by the decoding workers and by other processes over the last shard); beside a GPU, one thread for the whole
    run; torch's own count restored after. Where the user pinned the threads (``OMP_NUM_THREADS``), nothing is set.
    In a launch of several processes the other processes' load is not watched: it is the launch's own."""
    import torch

    if threads_pinned():
        yield lambda: None
        return
    before = torch.get_num_threads()
    if device.type != "cpu":
        # The model runs on the accelerator; what runs here on the CPU per batch (the scores' maths on a (B, D)
        # matrix) is too small to share out, and torch's threads spinning after it took the decoding workers' cores.
        torch.set_num_threads(1)
        try:
            yield lambda: None
        finally:
            torch.set_num_threads(before)
        return
    load = CoreLoad(_children) if processes == 1 else None
    started = time.monotonic()
    first = True

    def set_threads() -> None:
        nonlocal first
        busy = 0.0
        if load is not None:
            if first:  # the first shard: the load is watched a moment first, this run idle
                time.sleep(max(0.0, FIRST_LOOK_SECONDS - (time.monotonic() - started)))
                first = False
            busy = load.busy_elsewhere()
        torch.set_num_threads(torch_threads(workers, processes, busy, ceiling=before))

    try:
        yield set_threads
    finally:
        torch.set_num_threads(before)


def _children() -> list[int]:
    """This process's children (the decoding workers), whose CPU time is this run's own, not other work's."""
    import multiprocessing

    return [p.pid for p in multiprocessing.active_children()]


def score_shard_locally(scorer: RowScorer, rows: Iterable, batch_size: int) -> dict[str, Any]:
    """Score one shard's rows in this process, in batches of ``batch_size`` as they are read (for scripts and
    tests; the executor reads through ``row_batches.read_batches``).

    Returns:
        dict: the scored columns of the whole shard (``RowScorer.score``'s, joined).
    """
    import itertools

    from capeval.corpus.row_scoring import prepare_rows

    rows = iter(rows)
    batches = []
    while batch := list(itertools.islice(rows, batch_size)):
        batches.append(scorer.score(prepare_rows(batch, scorer.image_size)))
    return concat_batches(batches)


def concat_batches(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """One shard's scored batches as one set of columns (lists joined, arrays stacked)."""
    import numpy as np

    out: dict[str, Any] = {}
    for name in batches[0]:
        parts = [b[name] for b in batches]
        out[name] = (
            np.concatenate(parts) if isinstance(parts[0], np.ndarray) else [v for p in parts for v in p]
        )
    return out


def run_local(plan, output: Path, scorer: RowScorer, state):
    """``score_corpus``'s local executor (``plan`` is its ``_Plan``, ``state`` this process's ``process_state``):
    the folder claimed, the pending shards scored here (or shared by the processes of a launch), the run
    summarised."""
    if state.num_processes == 1:
        with claimed_output(output, plan.manifest(scorer), remove_stale_temporaries):
            return score_pending(plan, output, scorer, execute_locally)
    return _run_in_launch(plan, output, scorer, state)


def execute_locally(
    plan, pending: list, output: Path, scorer: RowScorer, records: dict[str, dict], processes: int = 1
) -> dict[str, str]:
    """Read, score and write ``pending`` shards; returns ``{shard: why}`` for those not read.

    The worker processes (``row_batches.read_batches``) read and prepare the shards' batches; this process scores
    each batch as it comes, keeps each shard's scores until its last batch is in, and hands the shard to a writer
    thread, which checks that the input did not change while it was read and writes it.
    """
    device = scorer.scorers[scorer.metrics[0]].backbone.device
    workers = plan.num_workers if plan.num_workers is not None else default_decode_workers(device)
    failed: dict[str, str] = {}
    scored: dict[int, dict[int, dict]] = {}  # shard -> batch number -> its scores
    counts = {"rows": 0}
    bar = _progress_bar(plan.progress, len(pending))
    batches = read_batches(
        pending,
        plan.columns,
        plan.batch_size,
        scorer.image_size,
        workers,
        plan.corpus.streamed,
        scorer.tokenize,
    )
    with (
        _torch_threads(device, workers, processes) as set_threads,
        _Writer(output, scorer, plan, records) as writer,
    ):
        started: set[int] = set()
        for item in batches:
            if isinstance(item, ShardBatch):
                if item.position not in started:  # the threads follow the load as each shard starts
                    started.add(item.position)
                    set_threads()
                try:
                    scores = scorer.score(item.rows)
                finally:
                    item.release()
                # A part read again after its worker died gives its batches again: each is kept once.
                scored.setdefault(item.position, {}).setdefault(item.number, scores)
                continue
            shard, parts = pending[item.position], scored.pop(item.position, {})
            if item.failure is None and len(parts) != item.batches:
                item.failure = f"shard {shard.where}: {len(parts)} of its {item.batches} batches were scored"
            if item.failure is not None:
                failed[shard.name] = _explained(shard, records, item.failure)
            else:
                counts["rows"] += item.rows
                writer.write(shard, [parts[n] for n in range(item.batches)], item.late_errors, failed)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(rows=bar.format_sizeof(counts["rows"]), refresh=False)
    if bar is not None:
        bar.close()
    return failed


def _explained(shard, records: dict[str, dict], failure: str) -> str:
    """A change explains a read that failed part-way better than the failure itself does (a download finishing over
    a tar makes it unreadable mid-way)."""
    return changed_while_read(shard, records[shard.name]) or failure


class _Writer:
    """Writes whole shards on a thread of its own, one at a time, after checking that each input did not change
    while it was read; the scoring thread goes on with the next batches meanwhile. At most two shards wait."""

    def __init__(self, output: Path, scorer: RowScorer, plan, records: dict[str, dict]) -> None:
        import queue
        import threading

        self.output, self.scorer, self.plan, self.records = output, scorer, plan, records
        self.queue: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="capeval-writer", daemon=True)

    def __enter__(self) -> _Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error

    def write(self, shard, batches: list[dict], late_errors: dict[int, str], failed: dict[str, str]) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put((shard, batches, late_errors, failed))

    def _run(self) -> None:
        while (job := self.queue.get()) is not None:
            if self.error is not None:
                continue
            shard, batches, late_errors, failed = job
            try:
                why = changed_while_read(shard, self.records[shard.name])
                if why is not None:
                    failed[shard.name] = why
                    continue
                rows, columns = concat_batches(batches), self.scorer.columns()
                record = self.records[shard.name]
                write_shard_output(
                    self.output,
                    shard.name,
                    rows,
                    columns,
                    self.plan.embeddings,
                    record,
                    late_errors=late_errors,
                )
            except BaseException as err:  # raised in the scoring thread at its next write or at the end
                self.error = err


def _progress_bar(progress: bool | None, shards: int):
    """A bar over shards with the rows scored beside it: on a terminal when ``progress`` is None."""
    from tqdm.auto import tqdm

    if progress is False or shards == 0:
        return None
    return tqdm(
        total=shards,
        unit="shard",
        desc="scoring",
        dynamic_ncols=True,
        disable=None if progress is None else False,
    )


def _run_in_launch(plan, output: Path, scorer: RowScorer, state):
    """The run shared by the processes of a ``torchrun`` / ``accelerate launch``: the main process holds the
    folder throughout; an error in any process is raised in all, so none waits forever."""
    import time

    from accelerate.utils import broadcast_object_list, gather_object

    names: list[Any] = [None]
    error = None
    folder = contextlib.ExitStack()
    if state.is_main_process:
        try:
            folder.enter_context(claimed_output(output, plan.manifest(scorer), remove_stale_temporaries))
            names[0] = [s.name for s in pending_shards(plan, output)[0]]
        except (ValueError, OSError) as err:
            error = err
            folder.close()
    _raise_if_any_failed(error, state)
    with folder:
        broadcast_object_list(names)
        start = time.perf_counter()
        pending = [s for s in plan.corpus.shards if s.name in set(names[0])]
        mine = pending[state.process_index :: state.num_processes]
        failed, error = {}, None
        try:
            records = {s.name: input_record(s) for s in mine}
            failed = execute_locally(plan, mine, output, scorer, records, state.num_processes)
        except (ValueError, OSError) as err:
            error = err
        _raise_if_any_failed(error, state)
        failures = {k: v for f in gather_object([failed]) for k, v in f.items()}
        result, error = [None], None
        if state.is_main_process:
            try:
                seconds = time.perf_counter() - start
                result[0] = summarise(
                    plan, output, scorer, failures, len(pending), seconds, state.num_processes
                )
            except (ValueError, OSError) as err:
                error = err
        _raise_if_any_failed(error, state)
        broadcast_object_list(result)
        return result[0]
