"""How many torch threads the local executor runs on the CPU: the cores it may use that nothing else is using.

A model on the CPU runs ``torch.get_num_threads()`` threads, one per core by default. On a shared host that is
the wrong number: with another process keeping one of two cores busy, two threads spent their time waiting on each
other (``scripts/bench_corpus.py --background-load 1`` measures it: the default run was 0.73-0.81x the speed of
the same run with ``OMP_NUM_THREADS=1``). So the threads are the cores this process may run on (its CPU affinity,
which a container or ``taskset`` sets), shared among the processes of a launch, less the decoding workers, less
the cores other processes kept busy over the last shard (``CoreLoad``, read from ``/proc/stat``), and never more
than torch was given (``torch.set_num_threads``).

Where the user set ``OMP_NUM_THREADS``, that count is kept as given (``threads_pinned``): float sums run in another
order on another number of threads, so scores of two runs differ in the 7th digit (2e-7 measured on the test CLIP)
when the load changed the count between them, and a pinned count is how a user gets them equal bit for bit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

# How long the load is watched before the first shard (from the executor's start), nothing of this run scoring:
# /proc/stat counts in ticks of 10 ms, so 0.2 s on 2 cores reads a core's load to about 0.03.
FIRST_LOOK_SECONDS = 0.2
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc's unit of CPU time


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it, else every core)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def threads_pinned() -> bool:
    """Whether the user fixed torch's threads with ``OMP_NUM_THREADS`` (``torchrun`` sets it to 1 where unset)."""
    return bool(os.environ.get("OMP_NUM_THREADS", "").strip())


def torch_threads(
    decode_workers: int, processes: int = 1, busy_elsewhere: float = 0.0, ceiling: int | None = None
) -> int:
    """The model's torch threads: this process's share of the usable cores, less one per decoding worker, less the
    cores busy with other work (``busy_elsewhere``, rounded), at least one, and never more than torch was given
    when the run started (``ceiling``; default: torch's count now). The count is decided afresh at each call from
    that ceiling, so it goes up again when the load goes away."""
    import torch

    share = usable_cores() // max(1, processes) - decode_workers - round(busy_elsewhere)
    return max(1, min(torch.get_num_threads() if ceiling is None else ceiling, share))


class CoreLoad:
    """The cores of this process's affinity that other processes kept busy, measured between calls of
    ``busy_elsewhere``: the busy time ``/proc/stat`` counts on those cores, less this process's own CPU time and
    its workers' (``own_pids``), over the time between the calls.

    Where ``/proc/stat`` cannot be read (not Linux), every measure is 0: the threads are then the cores' share.
    """

    def __init__(self, own_pids: Callable[[], Iterable[int]] = tuple) -> None:
        self.own_pids = own_pids
        try:
            self.cores = sorted(os.sched_getaffinity(0))
        except AttributeError:
            self.cores = []
        self._last = self._now()

    def busy_elsewhere(self) -> float:
        """Cores busy with other processes, on average, since the previous call (or since this was made)."""
        now = self._now()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return 0.0
        wall, busy, own = (a - b for a, b in zip(now, last, strict=True))
        return max(0.0, (busy - own) / wall)

    def _now(self) -> tuple[float, float, float] | None:
        """(wall seconds, busy CPU seconds of the cores, CPU seconds of this process and its workers), or None."""
        busy = _busy_seconds(self.cores)
        if busy is None:
            return None
        own = time.process_time() + sum(_process_seconds(pid) for pid in self.own_pids())
        return time.monotonic(), busy, own


def _busy_seconds(cores: list[int]) -> float | None:
    """CPU seconds the given cores spent on anything but idling and waiting for I/O, since boot."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cores}
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if name in wanted:
            # user nice system idle iowait irq softirq steal (guest time, after them, is counted in user already)
            ticks = [int(f) for f in fields[:8]]
            busy += sum(ticks) - ticks[3] - ticks[4]
    return busy / _TICKS if wanted else None


def _process_seconds(pid: int) -> float:
    """A process's user and system CPU seconds (``/proc/<pid>/stat``), 0 for one gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of proc(5)
