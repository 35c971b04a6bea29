"""What a GPU gives capeval, in one run (meant for a GPU; each section also runs on a CPU, smaller).

Sections (``--sections``, all by default, in this order; each prints its table and is saved in ``--json``
before the next starts, so a run cut short keeps what it measured):

- ``throughput``: for each (architecture, dtype), images/s of forward passes alone on ready tensors, of the
  decode + pre-process worker pool alone, and of ``encode_images`` from JPEG files; captions/s of forward alone,
  tokenising alone and ``encode_texts``; end to end / the slower limit. Medians of ``--repeats``.
- ``corpus``: rows/s of the local corpus engine (``score_corpus``) on WebDataset shards of 640x480 JPEGs, GPU
  utilisation sampled with nvidia-smi, and its halves apart: decode + resize on one core, scoring prepared rows;
  their ratio is the cores it takes to feed the model.
- ``model-object``: ``scripts/bench_model_object.py`` on this device (the weights' naming against the forward),
  and the refusals of a model object asked onto another device or dtype.
- ``drift``: CLIP-S per sample in float16 and bfloat16 against float32 (max, 99th percentile, median, Kendall
  tau) on the same pairs, for the random ViT-B/32 and the shapes CLIP.
- ``memory``: ``scripts/bench_memory.py``: peak device memory against batch size, then the out-of-memory
  back-off under a real cap.

Example:  python scripts/bench_gpu.py --device cuda --json gpu.json
          python scripts/bench_gpu.py --device cpu --sections throughput --arch vit-b32 --dtype float32 --n-images 64
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

import capeval
from capeval.clip.backbones import load_backbone
from capeval_dev.perf import device_checks as checks
from capeval_dev.perf import throughput as tp
from capeval_dev.perf.models import build_benchmark_clip
from capeval_dev.perf.timing import markdown_table


def measure(bb, paths: list[str], captions: list[str], args) -> dict[str, float]:
    """Medians over ``args.repeats`` of each stage alone and end to end."""
    stages = {
        "img_forward": lambda: tp.forward_images_per_s(bb, args.n_images, args.batch_size),
        "img_pool": lambda: tp.pool_images_per_s(
            paths, bb.image_size, bb.device, args.batch_size, args.num_workers
        ),
        "img_e2e": lambda: tp.end_to_end_images_per_s(bb, paths, args.batch_size, args.num_workers),
        "cap_forward": lambda: tp.forward_captions_per_s(bb, captions, args.text_batch_size),
        "cap_tokenize": lambda: tp.tokenize_captions_per_s(bb, captions),
        "cap_e2e": lambda: tp.end_to_end_captions_per_s(bb, captions, args.text_batch_size),
    }
    return {key: statistics.median(fn() for _ in range(args.repeats)) for key, fn in stages.items()}


def corpus_throughput(
    model: str, device: str, dtype: str, workdir: Path, shards: int, rows_per_shard: int, batch_size: int
) -> dict[str, Any]:
    """Rows/s of the local corpus engine on WebDataset shards of 640x480 JPEGs, with GPU utilisation sampled:
    decoding in the scoring process, and with its default decoding workers (one run). Measured first, the two
    halves of its work apart: preparing rows (decode + resize, one CPU core) and scoring prepared batches (the
    model); ``score / prepare`` is the number of decoding cores the model could use."""
    from capeval.corpus.reader import read_shard
    from capeval.corpus.row_scoring import RowScorer, prepare_rows
    from capeval.corpus.run import score_corpus
    from capeval.corpus.shards import list_shards
    from capeval_dev.testing.shapes_shards import write_shapes_shards

    source = workdir / f"shards-{shards}x{rows_per_shard}"
    if not source.is_dir():
        write_shapes_shards(source, shards, rows_per_shard, image_size=(640, 480))
    rows = shards * rows_per_shard
    options = {"model": model, "device": device, "dtype": dtype}
    scorer = RowScorer(["clipscore"], options)
    samples = [r for s in list_shards(source) for r in read_shard(s)]
    cuts = range(0, len(samples), batch_size)
    start = time.perf_counter()
    prepared = [prepare_rows(samples[s : s + batch_size], scorer.image_size) for s in cuts]
    prepare_s = time.perf_counter() - start
    scorer.score(prepared[0])  # kernels and allocator out of the timing
    start = time.perf_counter()
    for batch in prepared:
        scorer.score(batch)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    score_s = time.perf_counter() - start
    engine: dict[str, Any] = {}
    # 0: every row decoded in the scoring process, one batch after another (the engine before decoding workers)
    for label, workers in (("in_sequence", 0), ("default_workers", None)):
        out = workdir / f"corpus-out-{dtype}-{label}-{time.time_ns()}"
        with checks.GpuUtilisation() as util:
            start = time.perf_counter()
            result = score_corpus(
                source, out, ["clipscore"], batch_size=batch_size, num_workers=workers, **options
            )
            seconds = time.perf_counter() - start
        scored = sum(1 for _ in (out / "scores").glob("*.parquet"))
        if scored != shards:
            raise RuntimeError(
                f"the local engine wrote {scored} of {shards} shard outputs ({result.summary})"
            )
        engine[label] = {"rows_per_s": rows / seconds, **util.summary()}
    engine["speedup"] = engine["default_workers"]["rows_per_s"] / engine["in_sequence"]["rows_per_s"]

    prepare_rate, score_rate = rows / prepare_s, rows / score_s
    return {
        "rows": rows,
        "engine": engine,
        "prepare_rows_per_s_one_core": prepare_rate,
        "score_rows_per_s": score_rate,
        "cores_to_feed_model": score_rate / prepare_rate,
    }


SECTIONS = ("throughput", "corpus", "model-object", "drift", "memory")
SCRIPTS = Path(__file__).resolve().parent


def benchmark_clip(work: Path, arch: str) -> str:
    folder = work / f"random-{arch}"
    if not (folder / "config.json").is_file():
        build_benchmark_clip(arch, folder)
    return str(folder)


def section_throughput(args, work: Path) -> dict:
    paths = tp.make_jpeg_corpus(work / "jpegs", args.n_images)
    captions = tp.make_captions(args.n_captions)
    rows, figures = [], []
    for arch in args.arch:
        folder = benchmark_clip(work, arch)
        for dtype in args.dtype:
            bb = load_backbone(folder, device=args.device, dtype=dtype)
            tp.end_to_end_images_per_s(bb, paths[:256], args.batch_size, args.num_workers)  # warm-up
            med = measure(bb, paths, captions, args)
            img_ratio = med["img_e2e"] / min(med["img_forward"], med["img_pool"])
            cap_ratio = med["cap_e2e"] / min(med["cap_forward"], med["cap_tokenize"])
            rows.append([arch, dtype, med["img_forward"], med["img_pool"], med["img_e2e"], img_ratio,
                         med["cap_forward"], med["cap_tokenize"], med["cap_e2e"], cap_ratio])  # fmt: skip
            figures.append(
                {"arch": arch, "dtype": dtype, **med, "img_ratio": img_ratio, "cap_ratio": cap_ratio}
            )
            print(rows[-1], flush=True)
            del bb
    header = ["arch", "dtype", "img fwd/s", "img pool/s", "img e2e/s", "e2e/min",
              "cap fwd/s", "cap tok/s", "cap e2e/s", "e2e/min"]  # fmt: skip
    print(f"{args.n_images} JPEGs 500x375, {args.n_captions} captions, batch {args.batch_size} / "
          f"{args.text_batch_size}, medians of {args.repeats}")  # fmt: skip
    print(markdown_table(header, rows))
    return {"rows": figures}


def section_corpus(args, work: Path) -> dict:
    folder = benchmark_clip(work, args.arch[0])
    dtype = args.dtype[0]
    fig = corpus_throughput(
        folder, args.device, dtype, work, args.shards, args.rows_per_shard, args.batch_size
    )
    print(f"local corpus engine, {args.arch[0]} {dtype}, {fig['rows']} rows of 640x480 JPEG in {args.shards} "
          f"WebDataset shards, batch {args.batch_size}")  # fmt: skip
    for label in ("in_sequence", "default_workers"):
        run = fig["engine"][label]
        util = "not sampled" if run["gpu_util_mean"] is None else f"{run['gpu_util_mean']:.1f} % mean"
        print(f"  engine, decoding {label.replace('_', ' '):16} {run['rows_per_s']:9,.1f} rows/s  GPU {util}")
    print(f"  default workers / in sequence     {fig['engine']['speedup']:9.2f}x")
    print(f"  prepare alone, one core           {fig['prepare_rows_per_s_one_core']:9,.1f} rows/s")
    print(f"  score alone (prepared rows)       {fig['score_rows_per_s']:9,.1f} rows/s")
    print(f"  cores to feed the model           {fig['cores_to_feed_model']:9.1f}")
    return fig


def section_model_object(args, work: Path) -> dict:
    cmd = [sys.executable, str(SCRIPTS / "bench_model_object.py"), "--device", args.device,
           "--images", str(args.model_object_images), "--repeats", "7"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout + proc.stderr[-2000:])
    from bench_model_object import build

    answers = checks.model_object_refusals(lambda: build("cpu"), args.device)
    for case, answer in answers.items():
        print(f"  {case}: {answer}")
    return {"bench_model_object": proc.stdout, "returncode": proc.returncode, "refusals": answers}


def section_drift(args, work: Path) -> dict:
    from capeval.shapes import example_items, shapes_clip_path

    paths = tp.make_jpeg_corpus(work / "jpegs", args.n_images)
    captions = tp.make_captions(len(paths))
    items = [item for seed in range(4) for item in example_items(75, seed=seed).values()]
    pairs = {
        f"random {args.arch[0]}": (benchmark_clip(work, args.arch[0]), captions, paths),
        "shapes CLIP": (
            str(shapes_clip_path()),
            [i["candidate"] for i in items],
            [i["image"] for i in items],
        ),
    }
    out = {}
    for name, (model, texts, images) in pairs.items():

        def score(dtype, model=model, texts=texts, images=images):
            metric = capeval.CLIPScore(
                model=model, device=args.device, dtype=dtype, batch_size=args.batch_size
            )
            return np.asarray(metric(texts, images=images)["scores"], dtype=np.float64)

        out[name] = checks.precision_drift(score)
        for dt, fig in out[name].items():
            print(f"  {name:18} {dt:9} n={fig['n']} max {fig['max']:.2e} p99 {fig['p99']:.2e} "
                  f"median {fig['median']:.2e} tau {fig['kendall_tau']:.4f} (fp32 score std {fig['score_std']:.3f})")  # fmt: skip
    return out


def section_memory(args, work: Path) -> dict:
    target = work / "memory.json"
    arch = args.arch[-1]
    cmd = [sys.executable, str(SCRIPTS / "bench_memory.py"), "--device", args.device, "--dtype", args.dtype[0],
           "--arch", arch, "--n-images", str(args.n_images), "--workdir", str(work), "--json", str(target),
           "--batch-sizes", *map(str, args.memory_batch_sizes)]  # fmt: skip
    if args.device.startswith("cuda"):
        cmd.append("--oom-check")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout + proc.stderr[-3000:])
    return json.loads(target.read_text()) if proc.returncode == 0 else {"error": proc.stderr[-3000:]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--arch", nargs="+", default=["vit-b32", "vit-l14"], choices=["vit-b32", "vit-l14"])
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--n-images", type=int, default=2048)
    parser.add_argument("--n-captions", type=int, default=30000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--text-batch-size", type=int, default=1024)
    parser.add_argument(
        "--num-workers", type=int, default=None, help="image reader threads (default: capeval's)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shards", type=int, default=8, help="corpus: WebDataset shards")
    parser.add_argument("--rows-per-shard", type=int, default=512, help="corpus: rows per shard")
    parser.add_argument("--model-object-images", type=int, default=64)
    parser.add_argument("--memory-batch-sizes", type=int, nargs="+", default=[32, 128, 512, 2048])
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "capeval-bench-gpu"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    device_name = (
        torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor() or "cpu"
    )
    report = {
        "device": device_name,
        "versions": {
            "capeval": capeval.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },  # fmt: skip
        "argv": sys.argv[1:],
    }
    print(f"device: {device_name}; capeval {capeval.__version__}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}", flush=True)  # fmt: skip
    runs = {"throughput": section_throughput, "corpus": section_corpus, "model-object": section_model_object,
            "drift": section_drift, "memory": section_memory}  # fmt: skip
    for name in args.sections:
        print(f"\n## {name}", flush=True)
        start = time.perf_counter()
        try:
            report[name] = runs[name](args, work)
        except Exception:  # one section failing must not lose the others' figures
            report[name] = {"error": traceback.format_exc()}
            print(report[name]["error"])
        print(f"({name}: {time.perf_counter() - start:.0f} s)", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
