"""The local executor of ``score_corpus``: shards scored in this process, or shared by the processes of a launch.

In one process, the pending shards are read (``reader.read_shards``) and scored one after another: a shard's rows
stream from its file, are prepared a bounded window ahead of the model by ``DecodePool``'s worker processes, scored
in batches of ``batch_size`` (``RowScorer.score``), and only the scores are held until the shard is written.
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
from capeval.corpus.reader import ShardReadError, read_shards
from capeval.corpus.row_batches import DecodePool, default_decode_workers
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
def _torch_threads(device, workers: int, processes: int, decode: DecodePool) -> Iterator[Callable[[], None]]:
    """On the CPU, a function setting torch's threads before each shard (``cpu_share.torch_threads``: the cores
    left by the decoding workers and by other processes over the last shard); torch's own count restored after.
    Elsewhere (a GPU), or where the user pinned the threads (``OMP_NUM_THREADS``), it does nothing. In a launch of
    several processes the other processes' load is not watched: it is the launch's own."""
    import torch

    if device.type != "cpu" or threads_pinned():
        yield lambda: None
        return
    before = torch.get_num_threads()
    load = CoreLoad(decode.pids) if processes == 1 else None
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


def score_shard_locally(
    scorer: RowScorer, rows: Iterable, batch_size: int, decode: DecodePool | None = None
) -> dict[str, Any]:
    """Score one shard's rows in batches of ``batch_size`` in this process, as they are read, ``decode``'s workers
    preparing them ahead of the model (None: each batch prepared here when it is needed).

    Returns:
        dict: the scored columns of the whole shard (``RowScorer.score``'s, joined).
    """
    with DecodePool(0) if decode is None else contextlib.nullcontext(decode) as pool:
        batches = pool.batches(rows, scorer.image_size, batch_size)
        return concat_batches([scorer.score(batch) for batch in batches])


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
    """Read, score and write ``pending`` shards in this process; returns ``{shard: why}`` for those not read."""
    device = scorer.scorers[scorer.metrics[0]].backbone.device
    workers = plan.num_workers if plan.num_workers is not None else default_decode_workers(device)
    failed: dict[str, str] = {}
    scored_rows = 0
    bar = _progress_bar(plan.progress, len(pending))
    with DecodePool(workers) as decode, _torch_threads(device, workers, processes, decode) as set_threads:
        for shard, stream, why in read_shards(pending, plan.columns, plan.corpus.streamed):
            set_threads()
            if why is None:
                try:
                    scored = score_shard_locally(scorer, stream.rows, plan.batch_size, decode)
                except ShardReadError as err:  # the shard failed part-way: none of its rows is kept
                    why = str(err)
                # A change explains a read that failed part-way better than the failure itself does.
                why = changed_while_read(shard, records[shard.name]) or why
                if why is None:
                    scored_rows += len(scored["index"])
                    write_shard_output(output, shard.name, scored, scorer.columns(), plan.embeddings,
                                       records[shard.name], late_errors=stream.late_errors)  # fmt: skip
            if why is not None:
                failed[shard.name] = why
            if bar is not None:
                bar.update(1)
                bar.set_postfix(rows=bar.format_sizeof(scored_rows), refresh=False)
    if bar is not None:
        bar.close()
    return failed


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
