"""Where the corpus engine's time goes: the scoring process against its decoding workers, and the command against
the forward and the decoding measured alone, in one run.

Shards in img2dataset's layout (``NNNNN.tar``: ``<key>.jpg``, ``<key>.txt``, ``<key>.json``), every picture and
caption distinct (drawn shapes, 224x224 and 640x480 JPEGs), scored by ``score_corpus`` in a child process.

1. **The model made free**: a CLIP of ViT-B/32 geometry (224 px input) whose forward answers at once
   (``capeval_dev.perf.simulated.SleepingCLIP`` at an infinite rate), with 1 and 2 decoding workers. The child
   reports its own CPU seconds (every thread: the scoring process) and its workers' (``getrusage``), over the
   call only; printed per row, with their ratio (goal: the scoring process at most 0.1 of a worker) and rows/s.
2. **A tiny real model on the CPU** (no workers: the model and the decoding share the cores): the command's rows/s
   against ``1 / (1/forward + 1/decode)``, the forward and the decoding each timed alone on the same batches.

    PYTHONPATH=src python scripts/bench_corpus_engine.py                    # 2 x 1,000 rows per picture size
    PYTHONPATH=src python scripts/bench_corpus_engine.py --rows 300 --repeats 1
    PYTHONPATH=/path/to/other/checkout/src python scripts/bench_corpus_engine.py --sections free --no-raw-cosine-run
        # the same measure of another version of capeval (the script uses only score_corpus)
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CHILD = r"""
import json, math, resource, sys, time
settings = json.loads(sys.argv[1])
if settings["free"]:
    import capeval.clipscore as clipscore
    from capeval_dev.perf.simulated import simulated_backbone
    real_load = clipscore.load_backbone
    clipscore.load_backbone = lambda *a, **k: simulated_backbone(real_load(*a, **k), math.inf, math.inf)
from capeval.corpus.run import score_corpus

# A first small run, not measured: imports, the model's load and the first batches' warm-up are the run's start,
# not its cost per row.
score_corpus(settings["warmup"], settings["output"] + "-warmup", model=settings["model"], batch_size=settings["batch"],
             num_workers=settings["workers"], progress=False)


def usage():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime

before, start = usage(), time.perf_counter()
extra = {} if settings["raw_cosine"] else {"raw_cosine": False}
result = score_corpus(settings["source"], settings["output"], model=settings["model"], batch_size=settings["batch"],
                      num_workers=settings["workers"], progress=False, **extra)
seconds, after = time.perf_counter() - start, usage()
print(json.dumps({"rows": result.summary["rows"], "scored": result.summary["scored"], "seconds": seconds,
                  "own_cpu": after[0] - before[0], "workers_cpu": after[1] - before[1]}))
"""


def write_shards(folder: Path, shards: int, rows: int, size: tuple[int, int], seed: int) -> None:
    """``shards`` tars of ``rows`` samples in img2dataset's layout, every picture and caption distinct."""
    import numpy as np

    from capeval.shapes import Scene, caption, draw
    from capeval.shapes.scenes import COLORS, POSITIONS, SHAPES

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for s in range(shards):
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for i in range(rows):
                key = f"{s:05d}{i:04d}"
                scene = Scene(
                    str(rng.choice(list(COLORS))), str(rng.choice(SHAPES)), str(rng.choice(POSITIONS))
                )
                buf = io.BytesIO()
                draw(scene, rng=rng, size=size).save(buf, format="JPEG", quality=90)
                members = {
                    "jpg": buf.getvalue(),
                    "txt": f"{caption(scene)}, picture {key}".encode(),
                    "json": json.dumps({"key": key, "width": size[0], "height": size[1]}).encode(),
                }
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def run_child(
    source: Path, output: Path, model: str, workers: int, free: bool, batch: int, raw_cosine: bool = True
) -> dict:
    settings = {"source": str(source), "output": str(output), "model": model, "workers": workers, "free": free,
                "batch": batch, "warmup": str(source.parent / "warmup"), "raw_cosine": raw_cosine}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the scoring child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def free_model_section(
    work: Path, sources: dict, model: str, repeats: int, batch: int, raw_off: bool = True
) -> None:
    print("\n1. The model made free (ViT-B/32 geometry, forward at an infinite rate): CPU-s per 1,000 rows")
    print(
        f"{'pictures':>9} {'workers':>12} {'scoring process':>15} {'workers':>8} {'ratio':>6} {'rows/s':>7}  runs"
    )
    settings = [(1, True), (2, True), *([(2, False)] if raw_off else [])]  # (workers, raw_cosine)
    for name, source in sources.items():
        # Repeats go round the settings, so a change in the host's load falls on each alike.
        done: dict[tuple[int, bool], list[dict]] = {s: [] for s in settings}
        for k in range(repeats):
            for workers, raw in settings:
                out = work / f"free-{name}-{workers}-{raw}-{k}"
                done[(workers, raw)].append(run_child(source, out, model, workers, True, batch, raw))
        for (workers, raw), runs in done.items():
            own = statistics.median(1000 * r["own_cpu"] / r["rows"] for r in runs)
            decode = statistics.median(1000 * r["workers_cpu"] / r["rows"] for r in runs)
            rate = statistics.median(r["rows"] / r["seconds"] for r in runs)
            shown = ", ".join(f"{r['rows'] / r['seconds']:.0f}" for r in runs)
            label = f"{workers}" + ("" if raw else ", no raw")
            print(f"{name:>9} {label:>12} {own:15.3f} {decode:8.3f} {own / decode:6.3f} {rate:7.0f}  {shown}")


def real_model_section(work: Path, sources: dict, model: str, repeats: int, batch: int) -> None:
    import time

    from capeval.corpus.reader import choose_columns, read_shard
    from capeval.corpus.row_scoring import RowScorer, prepare_rows
    from capeval.corpus.shards import list_shards

    print(
        "\n2. A tiny real model on the CPU (no workers): rows/s of the command against 1/(1/forward + 1/decode)"
    )
    print(f"{'pictures':>9} {'decode':>7} {'forward':>8} {'both':>7} {'command':>8} {'ratio':>6}  runs")
    scorer = RowScorer(["clipscore"], {"model": model, "device": "cpu", "dtype": "float32"})
    for name, source in sources.items():
        shards = list_shards(source)
        columns = choose_columns(shards, {})
        rows = [row for shard in shards for row in read_shard(shard, columns)]
        cut = [rows[s : s + batch] for s in range(0, len(rows), batch)]
        start = time.perf_counter()
        prepared = [prepare_rows(b, scorer.image_size) for b in cut]
        decode = len(rows) / (time.perf_counter() - start)
        start = time.perf_counter()
        for b in prepared:
            scorer.score(b)
        forward = len(rows) / (time.perf_counter() - start)
        both = 1 / (1 / forward + 1 / decode)
        runs = [run_child(source, work / f"real-{name}-{k}", model, 0, False, batch) for k in range(repeats)]
        rate = statistics.median(r["rows"] / r["seconds"] for r in runs)
        shown = ", ".join(f"{r['rows'] / r['seconds']:.0f}" for r in runs)
        print(f"{name:>9} {decode:7.0f} {forward:8.0f} {both:7.0f} {rate:8.0f} {rate / both:6.2f}  {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1000, help="rows per shard (2 shards per picture size)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sections", nargs="+", default=["free", "real"], choices=["free", "real"])
    parser.add_argument(
        "--no-raw-cosine-run",
        action="store_true",
        help="leave out the run without raw_cosine (a capeval without that option)",
    )
    args = parser.parse_args()

    from capeval.shapes.tiny_clip import build_tiny_clip

    work = Path(tempfile.mkdtemp(prefix="bench_corpus_engine_"))
    sources = {}
    for name, size in {"224x224": (224, 224), "640x480": (640, 480)}.items():
        sources[name] = work / f"in-{name}"
        write_shards(sources[name], 2, args.rows, size, seed=len(sources))
    write_shards(work / "warmup", 1, 2 * args.batch_size, (224, 224), seed=99)
    # ViT-B/32 geometry (224 px, patch 32) on a tiny transformer: the real tokenizer, the real preprocessing.
    model = str(build_tiny_clip(work / "clip-224", image_size=224, patch_size=32))
    print(f"{2 * args.rows:,} rows per picture size, batch {args.batch_size}, median of {args.repeats}")
    if "free" in args.sections:
        free_model_section(work, sources, model, args.repeats, args.batch_size, not args.no_raw_cosine_run)
    if "real" in args.sections:
        real_model_section(work, sources, model, args.repeats, args.batch_size)


if __name__ == "__main__":
    main()
