"""The local executor's torch threads on the CPU: the cores this process may use, less its decoding workers, less
the cores other processes keep busy (measured from ``/proc/stat``, this process's and its workers' own time taken
out), set again before each shard."""

from __future__ import annotations

import io
import os
import time
from types import SimpleNamespace

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


class _Host:
    """A host as ``CoreLoad`` reads it: the busy seconds ``/proc/stat`` counts on the cores, each process's CPU
    seconds, this process's own and the clock, all set by the test."""

    def __init__(self, monkeypatch) -> None:
        self.wall = self.busy = self.own = 0.0
        self.processes: dict[int, float] = {}
        monkeypatch.setattr(cpu_share, "_busy_seconds", lambda cores: self.busy)
        monkeypatch.setattr(cpu_share, "_process_seconds", lambda pid: self.processes.get(pid, 0.0))
        clock = SimpleNamespace(monotonic=lambda: self.wall, process_time=lambda: self.own)
        monkeypatch.setattr(cpu_share, "time", clock)

    def run(self, seconds: float, own: float = 0.0, **others: float) -> None:
        """``seconds`` pass; this process works ``own`` CPU seconds and each other (``pid<N>=cpu seconds``) its."""
        self.wall += seconds
        self.own += own
        self.busy += own
        for name, cpu in others.items():
            pid = int(name.removeprefix("pid"))
            self.processes[pid] = self.processes.get(pid, 0.0) + cpu
            self.busy += cpu


def test_a_process_spinning_beside_counts_as_load_unless_it_is_one_of_ours(monkeypatch):
    host = _Host(monkeypatch)
    ours, theirs = CoreLoad(lambda: [42]), CoreLoad()
    # Over a second, a worker of ours (pid 42) spins a core and a stranger (pid 7) uses a fifth of one.
    host.run(1.0, own=0.3, pid42=1.0, pid7=0.2)
    assert ours.busy_elsewhere() == pytest.approx(0.2)
    # The spinner is load to a measure that does not own it.
    assert theirs.busy_elsewhere() == pytest.approx(1.2)
    host.run(2.0, pid42=2.0)  # measured since the previous call, over its own time
    assert ours.busy_elsewhere() == pytest.approx(0.0)
    assert theirs.busy_elsewhere() == pytest.approx(1.0)


def test_this_process_own_work_is_not_load(monkeypatch):
    host = _Host(monkeypatch)
    load = CoreLoad()
    host.run(0.5, own=0.5)
    assert load.busy_elsewhere() == pytest.approx(0.0)
    host.run(0.5, own=0.5, pid9=0.25)  # our work and a stranger's: only the stranger's is load
    assert load.busy_elsewhere() == pytest.approx(0.5)


def test_the_load_is_never_negative_nor_measured_over_no_time(monkeypatch):
    host = _Host(monkeypatch)
    load = CoreLoad()
    host.run(1.0, own=0.5)
    host.busy -= 0.2  # /proc/stat counts in ticks: our own time can read above the cores' busy time
    assert load.busy_elsewhere() == 0.0
    host.busy += 5.0
    assert load.busy_elsewhere() == 0.0  # no time passed since the previous call


def test_proc_stat_is_read_as_the_given_cores_busy_seconds(monkeypatch):
    stat = (
        "cpu  900 9 90 9000 90 9 9 0 0 0\n"
        "cpu0 100 5 50 1000 20 3 2 1 7 0\n"  # user nice system idle iowait irq softirq steal guest guest_nice
        "cpu1 10 0 10 5000 400 0 0 0 0 0\n"
        "cpu10 77 0 0 0 0 0 0 0 0 0\n"
        "intr 12345 0 0\n"
    )
    monkeypatch.setattr(cpu_share, "open", lambda *a, **k: io.StringIO(stat), raising=False)
    ticks = cpu_share._TICKS
    # idle and I/O wait are not busy; guest time is in user already; cpu10 is not cpu1
    assert cpu_share._busy_seconds([0]) == pytest.approx((100 + 5 + 50 + 3 + 2 + 1) / ticks)
    assert cpu_share._busy_seconds([0, 1]) == pytest.approx((161 + 20) / ticks)
    assert cpu_share._busy_seconds([]) is None


def test_a_process_cpu_seconds_are_its_user_and_system_time(monkeypatch):
    # proc(5): pid (comm) state ppid ... utime stime are fields 14 and 15; a command name may hold ") "
    stat = "77 (a) b (c) S 1 77 77 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 0 0\n"
    monkeypatch.setattr(cpu_share, "open", lambda *a, **k: io.StringIO(stat), raising=False)
    assert cpu_share._process_seconds(77) == pytest.approx(300 / cpu_share._TICKS)


def test_a_process_gone_has_no_cpu_seconds(monkeypatch):
    def gone(path, *args, **kwargs):
        raise FileNotFoundError(path)

    monkeypatch.setattr(cpu_share, "open", gone, raising=False)
    assert cpu_share._process_seconds(77) == 0.0


@linux_only
def test_the_real_proc_files_read_as_this_process_cpu_time_and_counters_that_only_grow():
    cores = sorted(os.sched_getaffinity(0))
    first = cpu_share._busy_seconds(cores)
    # the same process's CPU time from the kernel's /proc/<pid>/stat and from the clock (ticks of 10 ms apart)
    assert cpu_share._process_seconds(os.getpid()) == pytest.approx(time.process_time(), abs=0.1)
    assert first is not None and first > 0
    assert cpu_share._busy_seconds(cores) >= first
    assert CoreLoad().busy_elsewhere() >= 0.0


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
