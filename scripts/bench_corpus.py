"""Rows/s, peak memory and CPU time of ``capeval corpus`` on both executors, at two shard sizes, in one run.

Each run is the command as a user types it (``python -m capeval.cli corpus SHARDS --output DIR --executor X``), in a
child process whose process tree (the driver, its decoding workers, and with Ray the raylet, the read tasks and
the actors) is sampled every 50 ms with psutil: the driver's peak RSS, the largest peak RSS of any other process
of the tree, and the CPU seconds of the whole tree per 1,000 rows. The shards are WebDataset tars of drawn shapes
(``capeval_dev.testing.shapes_shards``), scored with the shapes CLIP.

    PYTHONPATH=src python scripts/bench_corpus.py                    # 2 shards of 1,000 and of 10,000 samples
        # executors: local, local with OMP_NUM_THREADS=1, ray
    PYTHONPATH=src python scripts/bench_corpus.py --sizes 200 --repeats 1 --executors local
    PYTHONPATH=src python scripts/bench_corpus.py --background-load 1 --executors local local-1-thread
        # a shared host: another process keeps one core busy throughout
    PYTHONPATH=src python scripts/bench_corpus.py --jsonl --sizes 250 5000 --chunk-size 25 --batch-size 5 \
        --executors local-1-thread --repeats 1
        # memory against the number of rows: one JSONL corpus of 250 and of 5,000 rows (20x the shards); the
        # driver's peak RSS should stay within 1.2x (the kernel's ru_maxrss column: no sampling)

Peak RSS counts the pages of files and of shared memory a process maps; Ray's object store is shared memory that
every process reading or writing an object maps, so a Ray worker's RSS also shows the objects it passed on. The
private columns (``RssAnon``) are each process's own memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from capeval.shapes import shapes_clip_path
from capeval_dev.testing.shapes_shards import write_shapes_shards


def run_once(source: Path, out: Path, executor: str, batch_size: int, extra: tuple[str, ...] = ()) -> dict:
    """One ``capeval corpus`` run in a child; its wall time, the tree's peak RSS and CPU time, and the driver's
    peak RSS as the kernel counts it (``ru_maxrss``). ``local-1-thread`` is the local executor with
    ``OMP_NUM_THREADS=1``, the setting a shared host's users reach for."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if executor == "local-1-thread":
        executor, env["OMP_NUM_THREADS"] = "local", "1"
    args = [
        sys.executable, "-m", "capeval.cli", "corpus", str(source), "--output", str(out),
        "--model", str(shapes_clip_path()), "--batch-size", str(batch_size), "--executor", executor,
        "--no-progress", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    root = psutil.Process(child.pid)
    peaks: dict[int, int] = {}
    private: dict[int, int] = {}
    cpu: dict[int, float] = {}
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            break
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:  # exited (a zombie until wait4 reaps it, above)
            time.sleep(0.005)
            continue
        for proc in tree:
            try:
                memory = proc.memory_info()
                peaks[proc.pid] = max(peaks.get(proc.pid, 0), memory.rss)
                private[proc.pid] = max(private.get(proc.pid, 0), _private(proc.pid, memory))
                times = proc.cpu_times()
                cpu[proc.pid] = times.user + times.system
            except psutil.Error:
                continue
        time.sleep(0.05)
    output = child.stdout.read().decode(errors="replace")
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise RuntimeError(f"capeval corpus ({executor}) failed:\n{output[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    driver = peaks.pop(child.pid, 0)
    driver_private = private.pop(child.pid, 0)
    return {
        "rows": summary["rows"],
        "rows_per_s": summary["rows"] / seconds,
        "driver_rss_mib": driver / 2**20,
        "driver_maxrss_mib": usage.ru_maxrss / 1024,
        "worker_rss_mib": max(peaks.values(), default=0) / 2**20,
        "driver_private_mib": driver_private / 2**20,
        "worker_private_mib": max(private.values(), default=0) / 2**20,
        "cpu_s_per_1000_rows": 1000 * sum(cpu.values()) / summary["rows"],
    }


def _private(pid: int, memory) -> int:
    """A process's resident memory of its own (``RssAnon``): RSS less the pages of files and of shared memory,
    which Ray's object store maps into every process that reads or writes an object (its pages count in the RSS of
    each, though they are one copy); RSS where the OS does not say."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return memory.rss


def write_jsonl_corpus(root: Path, rows: int) -> Path:
    """A JSONL corpus of ``rows`` distinct 40x40 noise PNGs and captions with two references each; row 3's image is
    corrupt and row 7's caption blank (the error rows a real corpus has)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    colors = ("red", "green", "blue", "yellow", "purple")
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(rows):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(
            root / "images" / f"{i:06d}.png"
        )
        caption = "   " if i == 7 else f"a {colors[i % 5]} shape {i % 23}"
        image = "images/corrupt.png" if i == 3 else f"images/{i:06d}.png"
        references = [f"a {colors[(i + 1) % 5]} thing", "some shape"]
        lines.append(
            json.dumps({"id": f"row{i}", "image": image, "caption": caption, "references": references})
        )
    (root / "images" / "corrupt.png").write_bytes(b"\x89PNG not really")
    path = root / "corpus.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _print_ratios(results: list[dict], unit: str = "/shard") -> None:
    """Each executor's rows/s against the local run with one thread, and each peak RSS at the largest size (samples
    per shard, or rows of a JSONL corpus: ``unit``) against the smallest."""
    by = {(r["samples_per_shard"], r["executor"]): r for r in results}
    sizes = sorted({size for size, _ in by})
    for (size, executor), r in by.items():
        peer = by.get((size, "local-1-thread"))
        if peer and executor != "local-1-thread":
            print(
                f"{size:,}{unit}: {executor} rows/s = {r['rows_per_s'] / peer['rows_per_s']:.2f}x local-1-thread"
            )
    for executor in dict.fromkeys(e for _, e in by):
        small, large = by.get((sizes[0], executor)), by.get((sizes[-1], executor))
        if small and large and small is not large:
            keys = (
                "driver_rss_mib",
                "driver_maxrss_mib",
                "worker_rss_mib",
                "driver_private_mib",
                "worker_private_mib",
            )
            for key in keys:
                if small[key]:
                    print(
                        f"{executor}: {key} at {sizes[-1]:,}{unit} = {large[key] / small[key]:.3f}x {sizes[0]:,}{unit}"
                    )


@contextlib.contextmanager
def background_load(processes: int):
    """``processes`` other processes, each keeping one core busy, for the time of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1000, 10000], help="samples per shard (with --jsonl: rows)"
    )
    parser.add_argument(
        "--jsonl",
        action="store_true",
        help="score one JSONL corpus of each size in rows, cut by --chunk-size",
    )
    parser.add_argument("--chunk-size", type=int, default=25, help="rows per shard of the JSONL corpus")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--executors", nargs="+", default=["local", "local-1-thread", "ray"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--background-load", type=int, default=0, help="processes spinning beside each run")
    parser.add_argument("--json", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_corpus_"))
    results = []
    for size in args.sizes:
        source = work / f"in-{size}"
        if args.jsonl:
            source = write_jsonl_corpus(source, size)
        else:
            write_shapes_shards(source, args.shards, size, image_size=(64, 64))
        extra = ("--chunk-size", str(args.chunk_size)) if args.jsonl else ()
        # Repeats go round the executors, so a change in the host's load over the runs falls on each alike.
        runs: dict[str, list[dict]] = {executor: [] for executor in args.executors}
        with background_load(args.background_load):
            for k in range(args.repeats):
                for executor in args.executors:
                    out = work / f"out-{size}-{executor}-{k}"
                    runs[executor].append(run_once(source, out, executor, args.batch_size, extra))
        for executor, done in runs.items():
            row = {"samples_per_shard": size, "executor": executor}
            row.update({key: statistics.median(r[key] for r in done) for key in done[0] if key != "rows"})
            row["rows_per_s_runs"] = [round(r["rows_per_s"], 1) for r in done]  # the spread behind the median
            results.append(row)
            print(json.dumps(row), flush=True)
    load = f", {args.background_load} core(s) kept busy beside" if args.background_load else ""
    inputs = (
        f"one JSONL corpus in shards of {args.chunk_size} rows, 40x40 PNG"
        if args.jsonl
        else f"{args.shards} shards per run, 64x64 JPEG"
    )
    print(f"\n{inputs}, shapes CLIP, batch {args.batch_size}, "
          f"median of {args.repeats}, {psutil.cpu_count()} cores{load}")  # fmt: skip
    size_name = "rows" if args.jsonl else "samples/shard"
    print(f"{size_name:>13} {'executor':14} {'rows/s':>8} {'driver MiB':>10} {'(maxrss)':>8} {'(private)':>9} "
          f"{'worker MiB':>10} {'(private)':>9} {'CPU-s/1k rows':>13}  rows/s of each run")  # fmt: skip
    for r in results:
        print(f"{r['samples_per_shard']:>13,} {r['executor']:14} {r['rows_per_s']:8.1f} {r['driver_rss_mib']:10.0f} "
              f"{r['driver_maxrss_mib']:8.0f} {r['driver_private_mib']:9.0f} {r['worker_rss_mib']:10.0f} "
              f"{r['worker_private_mib']:9.0f} {r['cpu_s_per_1000_rows']:13.2f}  {r['rows_per_s_runs']}")  # fmt: skip
    _print_ratios(results, " rows" if args.jsonl else "/shard")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
