"""The load ``capeval.corpus.cpu_share.CoreLoad`` reads on this host, against psutil's reading of the same processes.

Two measures over the same interval (``--seconds``), printed, nothing asserted (they depend on whatever else the
host runs):

1. **A process spinning beside**: a child keeping one core busy, seen by a ``CoreLoad`` that owns it (its pid in
   ``own_pids``: a decoding worker) and by one that does not. The difference of the two should be the spinner's own
   use of a core, which psutil reads from the kernel's per-process counters.
2. **This process's own work**: the process spins itself; ``CoreLoad`` should not count it, so its reading is the
   cores' busy time (``/proc/stat``) less this process's CPU time, over the interval.

The tests check the arithmetic with an injected host (``tests/test_cpu_share.py``); this is the real host.

    PYTHONPATH=src python scripts/bench_cpu_share.py
    PYTHONPATH=src python scripts/bench_cpu_share.py --seconds 3 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psutil

from capeval.corpus import cpu_share
from capeval.corpus.cpu_share import CoreLoad


def spinner_beside(seconds: float) -> dict:
    """A spinning child, measured by a ``CoreLoad`` owning it and one not, and by psutil."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started
        ours, theirs = CoreLoad(lambda: [spinner.pid]), CoreLoad()
        before = psutil.Process(spinner.pid).cpu_times()
        start = time.monotonic()
        time.sleep(seconds)
        seen_by_ours, seen_by_theirs = ours.busy_elsewhere(), theirs.busy_elsewhere()
        after = psutil.Process(spinner.pid).cpu_times()
        spun = (after.user + after.system - before.user - before.system) / (time.monotonic() - start)
    finally:
        spinner.kill()
        spinner.wait()
    return {
        "owning_it": seen_by_ours,
        "not_owning_it": seen_by_theirs,
        "difference": seen_by_theirs - seen_by_ours,
        "spinner_psutil": spun,
    }


def own_work(seconds: float) -> dict:
    """This process spinning ``seconds`` of CPU time: the cores' busy time, ours, and the load ``CoreLoad`` reads."""
    cores = sorted(os.sched_getaffinity(0))
    load = CoreLoad()
    busy_before, own_before, wall_before = (
        cpu_share._busy_seconds(cores),
        time.process_time(),
        time.monotonic(),
    )
    while time.process_time() - own_before < seconds:
        pass
    elsewhere = load.busy_elsewhere()
    busy = cpu_share._busy_seconds(cores) - busy_before
    own = time.process_time() - own_before
    wall = time.monotonic() - wall_before
    return {
        "cores_busy": busy / wall,
        "own": own / wall,
        "core_load_reads": elsewhere,
        "busy_less_own": max(0.0, (busy - own) / wall),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of each measure")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not os.path.exists("/proc/stat"):
        sys.exit("CoreLoad reads /proc/stat: Linux only (elsewhere it reads 0)")

    print(f"{len(os.sched_getaffinity(0))} usable cores, host load average {os.getloadavg()[0]:.2f}")
    print("\n1. a process spinning beside (cores busy, on average over the interval)")
    print(f"{'owning it':>10} {'not owning':>10} {'difference':>10} {'psutil: spinner':>15}")
    for _ in range(args.repeats):
        r = spinner_beside(args.seconds)
        print(
            f"{r['owning_it']:10.3f} {r['not_owning_it']:10.3f} {r['difference']:10.3f} {r['spinner_psutil']:15.3f}"
        )
    print("\n2. this process's own work (cores, on average over the interval)")
    print(f"{'cores busy':>10} {'own':>6} {'CoreLoad':>8} {'busy - own':>10}")
    for _ in range(args.repeats):
        r = own_work(args.seconds / 2)
        print(
            f"{r['cores_busy']:10.3f} {r['own']:6.3f} {r['core_load_reads']:8.3f} {r['busy_less_own']:10.3f}"
        )


if __name__ == "__main__":
    main()
