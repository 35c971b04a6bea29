"""What a resumed corpus run costs against scoring it: the checks a rerun makes before it keeps each shard's output.

A JSONL corpus of ``--rows`` rows, each naming its own image file by path (small PNGs of noise), is scored once
with the shapes CLIP; then the same command is rerun ``--repeats`` times on the finished folder. A rerun lists the
shards (each JSONL shard's bytes hashed), reads each output's footer and compares what it recorded: the shard's
identity, and each image file a row read (its path, size and modification time, ``os.stat`` again). It prints the
scoring run's seconds, the median rerun's, and their ratio.

    PYTHONPATH=src python scripts/bench_resume.py                 # 100,000 rows
    PYTHONPATH=src python scripts/bench_resume.py --rows 5000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from capeval.corpus.run import score_corpus
from capeval.shapes import shapes_clip_path


def write_corpus(root: Path, rows: int) -> Path:
    """``rows`` rows in ``root/pairs.jsonl``, each naming a distinct 32x32 PNG under ``root/images``."""
    rng = np.random.default_rng(0)
    images = root / "images"
    lines = []
    for i in range(rows):
        folder = images / f"{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        lines.append(
            json.dumps({"id": f"r{i}", "image": f"images/{folder.name}/{i}.png", "caption": f"a shape {i}"})
        )
    path = root / "pairs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = write_corpus(root, args.rows)
        options = dict(model=str(shapes_clip_path()), progress=False)
        start = time.perf_counter()
        first = score_corpus(source, root / "out", **options)
        scoring = time.perf_counter() - start
        reruns = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            again = score_corpus(source, root / "out", **options)
            reruns.append(time.perf_counter() - start)
            if again.summary["shards_scored_now"]:
                raise RuntimeError(f"the rerun scored {again.summary['shards_scored_now']} shard(s) again")
    rerun = statistics.median(reruns)
    print(f"{args.rows:,} rows in {first.summary['shards']} shards, each row naming its own image file")
    print(f"scoring run: {scoring:.1f} s ({args.rows / scoring:.0f} rows/s)")
    print(
        f"rerun with every shard done: median {rerun:.2f} s of {args.repeats} ({', '.join(f'{s:.2f}' for s in reruns)})"
    )
    print(f"rerun / scoring: {rerun / scoring:.3f}")


if __name__ == "__main__":
    main()
