"""The local executor's torch threads on the CPU: the cores this process may use, less its decoding workers, less
the cores other processes keep busy (measured from ``/proc/stat``, this process's and its workers' own time taken
out), set again before each shard."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
import torch

from capeval.corpus import cpu_share, local_executor
from capeval.corpus.cpu_share import CoreLoad, torch_threads, usable_cores
from capeval.corpus.row_scoring import RowScorer
from capeval.corpus.run import score_corpus
from capeval.shapes import shapes_clip_path
from capeval_dev.testing.shapes_shards import write_shapes_shards

linux_only = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc/stat")


@pytest.fixture
def threads_of_torch():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# --- the rule ----------------------------------------------------------------------------------------------------


def test_threads_are_the_share_of_the_cores_less_workers_and_other_load(monkeypatch, threads_of_torch):
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 16)
    torch.set_num_threads(16)
    assert torch_threads(0) == 16
    assert torch_threads(3) == 13
    assert torch_threads(0, processes=4) == 4
    assert torch_threads(0, busy_elsewhere=2.6) == 13  # a busy core is a core; 0.4 of one is not
    assert torch_threads(0, busy_elsewhere=0.4) == 16
    assert torch_threads(8, busy_elsewhere=12.0) == 1  # at least one
    torch.set_num_threads(2)  # never more than torch was given (OMP_NUM_THREADS)
    assert torch_threads(0) == 2
    assert torch_threads(0, ceiling=16) == 16  # the run's own ceiling, whatever the count is now


def test_usable_cores_are_this_process_affinity():
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert usable_cores() == expected


# --- measuring the others' load ----------------------------------------------------------------------------------


@linux_only
def test_a_process_spinning_beside_counts_as_load_unless_it_is_one_of_ours():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started
        ours, theirs = CoreLoad(lambda: [spinner.pid]), CoreLoad()
        before = psutil.Process(spinner.pid).cpu_times()
        start = time.monotonic()
        time.sleep(1.0)
        seen_by_ours, seen_by_theirs = ours.busy_elsewhere(), theirs.busy_elsewhere()
        after = psutil.Process(spinner.pid).cpu_times()
        spun = (after.user + after.system - before.user - before.system) / (time.monotonic() - start)
    finally:
        spinner.kill()
        spinner.wait()
    # Over the same second, the two measures differ by the spinner's own use of a core (psutil's reading of it).
    assert spun > 0.3
    assert seen_by_theirs - seen_by_ours == pytest.approx(spun, abs=0.15)


@linux_only
def test_this_process_own_work_is_not_load():
    cores = sorted(os.sched_getaffinity(0))
    load = CoreLoad()
    busy_before, own_before, wall_before = (
        cpu_share._busy_seconds(cores),
        time.process_time(),
        time.monotonic(),
    )
    while time.process_time() - own_before < 0.5:
        pass
    elsewhere = load.busy_elsewhere()
    busy = cpu_share._busy_seconds(cores) - busy_before
    own = time.process_time() - own_before
    wall = time.monotonic() - wall_before
    # The kernel counted our 0.5 s of spinning as busy time on our cores; the load seen elsewhere is that busy
    # time less ours (whatever else the host ran meanwhile), not the whole of it.
    assert busy >= 0.9 * own
    assert elsewhere == pytest.approx(max(0.0, (busy - own) / wall), abs=0.1)
    assert elsewhere <= busy / wall - 0.8 * own / wall


def test_without_proc_stat_the_load_is_zero(monkeypatch):
    monkeypatch.setattr(cpu_share, "_busy_seconds", lambda cores: None)
    assert CoreLoad().busy_elsewhere() == 0.0


# --- the executor ------------------------------------------------------------------------------------------------


def _threads_per_shard(tmp_path, monkeypatch, loads: list[float], shards: int) -> list[int]:
    """torch's thread count as each shard is scored by a local run on a 4-core host whose load reads ``loads``
    (cores busy elsewhere), one value per shard."""
    readings = iter(loads)
    seen = []

    class FakeLoad:
        def __init__(self, own_pids):
            self.own_pids = own_pids

        def busy_elsewhere(self):
            return next(readings)

    real_score = RowScorer.score
    shards_seen = []

    def score(self, batch):
        if batch["shard"][0] not in shards_seen:  # a shard's first batch: the threads it is scored on
            shards_seen.append(batch["shard"][0])
            seen.append(torch.get_num_threads())
        return real_score(self, batch)

    monkeypatch.setattr(local_executor, "CoreLoad", FakeLoad)
    monkeypatch.setattr(local_executor, "FIRST_LOOK_SECONDS", 0.0)
    monkeypatch.setattr(RowScorer, "score", score)
    monkeypatch.setattr(cpu_share, "usable_cores", lambda: 4)
    write_shapes_shards(tmp_path / "in", shards=shards, rows_per_shard=2)
    score_corpus(
        tmp_path / "in", tmp_path / "out", ["clipscore"], model=str(shapes_clip_path()), device="cpu"
    )
    return seen


def test_the_local_executor_sets_the_threads_before_each_shard_from_the_load(
    tmp_path, monkeypatch, threads_of_torch
):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(4)
    assert _threads_per_shard(tmp_path, monkeypatch, [0.0, 1.0, 5.0], shards=3) == [4, 3, 1]
    assert torch.get_num_threads() == 4  # torch's own count is back after the run


def test_the_threads_go_up_again_when_the_load_goes_away(tmp_path, monkeypatch, threads_of_torch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(4)
    # One busy shard does not leave every later shard on one thread: the count starts from torch's at the run's start.
    assert _threads_per_shard(tmp_path, monkeypatch, [5.0, 0.0, 1.0], shards=3) == [1, 4, 3]


def test_threads_pinned_by_omp_num_threads_are_kept_whatever_the_load(
    tmp_path, monkeypatch, threads_of_torch
):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    # as the user set it, though 3 of the 4 cores read busy
    assert _threads_per_shard(tmp_path, monkeypatch, [3.0, 3.0], shards=2) == [2, 2]
