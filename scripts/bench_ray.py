"""Rows/s of the shard engines on this machine: the local engine against Ray Data with 1 and 2 actors, on the
real (tiny) shapes CLIP and on the stand-in accelerator of ``capeval_dev.perf.simulated``, all in one run.

The stand-in answers a forward pass after ``rows / rate`` seconds without using a core, as a GPU leaves the
host free, so the overlap of Ray's CPU read tasks (decode, resize) with the "accelerator" shows on a CPU-only
machine. The local engine on a CPU reads, then scores, one batch after another (its decoding workers run
beside a GPU only).

    PYTHONPATH=src python scripts/bench_ray.py                       # the table (about 3 minutes here)
    PYTHONPATH=src python scripts/bench_ray.py --actor-only --device cuda --model openai/clip-vit-base-patch32
        # images/s per device of the actor's batch function (prepare + score) without Ray, and of each half:
        # prepare (decode + resize, one CPU core) and score (the model), so a cluster's CPUs per GPU follow
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from capeval.corpus.local_executor import score_shard_locally
from capeval.corpus.ray_engine import ScoreActor, run_on_ray
from capeval.corpus.reader import read_shard
from capeval.corpus.row_scoring import RowScorer, prepare_rows
from capeval.corpus.shard_outputs import input_record, remove_stale_temporaries, write_shard_output
from capeval.corpus.shards import list_shards
from capeval.shapes import shapes_clip_path
from capeval_dev.perf.simulated import simulated_backbone
from capeval_dev.testing.shapes_shards import write_shapes_shards

METRICS = ["clipscore"]


def simulate(scorer: RowScorer, rate: float) -> RowScorer:
    """The scorer's models replaced by the stand-in accelerator (``rate`` images/s and captions/s)."""
    for metric in scorer.scorers.values():
        metric.backbone = simulated_backbone(metric.backbone, images_per_s=rate, captions_per_s=rate * 4)
    return scorer


class SimulatedActor(ScoreActor):
    rate = 0.0  # set before the run; the class travels to the workers by value (it lives in __main__)

    def __init__(self, metrics, options, embeddings) -> None:
        super().__init__(metrics, options, embeddings)
        simulate(self.scorer, self.rate)


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rows-per-shard", type=int, default=64)
    parser.add_argument("--image-size", type=int, nargs=2, default=[640, 480], metavar=("W", "H"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0, help="stand-in accelerator images/s")
    parser.add_argument("--model", default=str(shapes_clip_path()))
    parser.add_argument("--actor-only", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32", help="float32, float16 or bfloat16 (--actor-only)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    write_shapes_shards(root / "in", args.shards, args.rows_per_shard, image_size=tuple(args.image_size))
    shards = list_shards(root / "in")
    rows = args.shards * args.rows_per_shard
    options = {"model": args.model, "device": args.device, "dtype": "float32"}

    if args.actor_only:
        scorer = RowScorer(METRICS, {**options, "dtype": args.dtype})
        samples = [r for s in shards for r in read_shard(s)]
        cuts = range(0, len(samples), args.batch_size)
        prepared = [prepare_rows(samples[s : s + args.batch_size], scorer.image_size) for s in cuts]

        def both():
            for s in cuts:
                scorer.score(prepare_rows(samples[s : s + args.batch_size], scorer.image_size))

        def prepare_only():
            for s in cuts:
                prepare_rows(samples[s : s + args.batch_size], scorer.image_size)

        def score_only():
            for batch in prepared:
                scorer.score(batch)

        both()  # warm-up (CUDA kernels, allocator)
        device = scorer.scorers[METRICS[0]].backbone.device
        print(f"{rows} rows of {args.image_size[0]}x{args.image_size[1]} JPEG, batch {args.batch_size}, "
              f"{args.dtype}, {args.model}, median of {args.repeats}")  # fmt: skip
        for name, fn in (
            (f"actor batch function, prepare + score ({device})", both),
            ("prepare only (decode + resize, this process's CPU)", prepare_only),
            (f"score only ({device})", score_only),
        ):
            print(f"{name:56} {rows / timed(fn, args.repeats):9.1f} images/s")
        return

    import ray

    ray.init(num_cpus=None, include_dashboard=False, log_to_driver=False, configure_logging=False)
    runs = 0

    def fresh() -> Path:
        nonlocal runs
        runs += 1
        out = root / f"out{runs}"
        remove_stale_temporaries(out)
        return out

    def local(scorer):
        records = {s.name: input_record(s) for s in shards}

        def run() -> None:  # the local executor's loop, in this process (no decoding workers on a CPU)
            out = fresh()
            for shard in shards:
                scored = score_shard_locally(scorer, read_shard(shard), args.batch_size)
                write_shard_output(out, shard.name, scored, scorer.columns(), False, records[shard.name])

        return run

    def on_ray(workers: int, actor=ScoreActor):
        scorer = RowScorer(METRICS, options)
        return lambda: run_on_ray(
            shards, fresh(), METRICS, options, records={s.name: input_record(s) for s in shards}, columns={},
            batch_size=args.batch_size, embeddings=False, score_columns=scorer.columns(),
            image_size=scorer.image_size, num_workers=workers, actor_class=actor,
        )  # fmt: skip

    SimulatedActor.rate = args.rate
    rows_s = {}
    rows_s["local, shapes CLIP"] = rows / timed(local(RowScorer(METRICS, options)), args.repeats)
    for w in (1, 2):
        rows_s[f"ray {w} actor(s), shapes CLIP"] = rows / timed(on_ray(w), args.repeats)
    rows_s[f"local, stand-in {args.rate:g}/s"] = rows / timed(
        local(simulate(RowScorer(METRICS, options), args.rate)), args.repeats
    )
    for w in (1, 2):
        rows_s[f"ray {w} actor(s), stand-in {args.rate:g}/s"] = rows / timed(
            on_ray(w, SimulatedActor), args.repeats
        )
    print(f"{rows} rows ({args.shards} shards of {args.rows_per_shard}, {args.image_size[0]}x{args.image_size[1]} "
          f"JPEG), batch {args.batch_size}, median of {args.repeats}; Ray started once, before timing")  # fmt: skip
    print(f"{'engine':44} {'rows/s':>8} {'vs local':>9}")
    for name, value in rows_s.items():
        base = (
            rows_s["local, shapes CLIP"] if "shapes" in name else rows_s[f"local, stand-in {args.rate:g}/s"]
        )
        print(f"{name:44} {value:8.1f} {value / base:8.2f}x")


if __name__ == "__main__":
    main()
