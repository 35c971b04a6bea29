"""Speed of RefCLIPScore on a Flickr8k-shaped workload: capeval vs the authors' pipeline structure,
torchmetrics' CLIPScore and the bare forward passes, in one run (medians of interleaved repetitions).

Random weights in the real ViT-B/32 (or ViT-L/14) geometry: speed does not depend on weight values.
Example:  .venv/bin/python scripts/bench_clip.py --n-images 32 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

import capeval
from capeval.clip.backbones import load_backbone
from capeval_dev.perf import pipelines
from capeval_dev.perf.models import build_benchmark_clip
from capeval_dev.perf.timing import markdown_table, median, time_interleaved
from capeval_dev.perf.workload import make_image_caption_workload, make_shapes_workload


def build_random_model(kind: str, root: Path) -> Path:
    folder = root / f"random-{kind}"
    if not (folder / "config.json").is_file():
        build_benchmark_clip(kind, folder)
    return folder


def bf16_drift(workload, opts: dict, label: str) -> dict:
    """Per-sample drift of bf16 against fp32 RefCLIP-S, and whether the ranking survives (Kendall tau)."""
    from scipy.stats import kendalltau

    a = pipelines.capeval_refclip(capeval.RefCLIPScore(**{**opts, "dtype": "float32"}), workload)
    b = pipelines.capeval_refclip(capeval.RefCLIPScore(**{**opts, "dtype": "bfloat16"}), workload)
    drift = np.abs(a - b)
    out = {
        "pairs": len(a),
        "fp32_score_std": float(a.std()),
        "median_drift": float(np.median(drift)),
        "max_drift": float(drift.max()),
        "kendall_tau": float(kendalltau(a, b).statistic),
    }
    print(
        f"bf16 vs fp32, {label}, {out['pairs']} pairs (fp32 score std {out['fp32_score_std']:.3g}): drift median "
        f"{out['median_drift']:.2e}, max {out['max_drift']:.2e}, Kendall tau {out['kendall_tau']:.4f}"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n-images", type=int, default=32, help="distinct images (candidates = round(5.66 n))"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="interleaved repetitions; medians are reported"
    )
    parser.add_argument("--arch", choices=["vit-b32", "vit-l14"], default="vit-b32")
    parser.add_argument("--model", default=None, help="a CLIP folder or Hub id instead of random weights")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["authors", "torchmetrics"], help="pipelines to skip"
    )
    parser.add_argument(
        "--bf16-pairs", type=int, default=0, help="also report bf16-vs-fp32 drift on this many pairs"
    )
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "capeval-bench"))
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parser.parse_args()

    work = Path(args.workdir)
    model = args.model or str(build_random_model(args.arch, work))
    workload = make_image_caption_workload(work / "images", args.n_images)
    bb = load_backbone(model, device=args.device, dtype=args.dtype)
    opts = dict(model=model, device=args.device, dtype=args.dtype, batch_size=args.batch_size, progress=False)
    ref_scorer = capeval.RefCLIPScore(**opts)
    clip_scorer = capeval.CLIPScore(**opts)
    clip_noprefix = capeval.CLIPScore(**{**opts, "prefix": ""})
    pixels, text_batches = pipelines.prepare_bare_inputs(bb, workload, args.batch_size)

    runs = {
        "capeval RefCLIP-S": lambda: pipelines.capeval_refclip(ref_scorer, workload),
        "bare forward (limit)": lambda: pipelines.bare_forward(bb, pixels, text_batches, args.batch_size),
        "capeval CLIP-S": lambda: pipelines.capeval_clip(clip_scorer, workload),
    }
    if "authors" not in args.skip:
        runs["authors' structure RefCLIP-S"] = lambda: pipelines.authors_structure(bb, workload)
    if "torchmetrics" not in args.skip:
        runs["torchmetrics CLIP-S"] = lambda: pipelines.torchmetrics_clip(bb, workload, args.batch_size)
    # warm-up (model load, allocator, thread pools) before timing
    pipelines.capeval_refclip(ref_scorer, workload)
    times, results = time_interleaved(runs, args.repeats)

    n_cand = len(workload.candidates)
    med = {k: median(v) for k, v in times.items()}
    base = med["capeval RefCLIP-S"]
    rows = []
    for name, t in med.items():
        rows.append([name, t, n_cand / t, t / base])
    print(f"workload: {args.n_images} images, {n_cand} candidates, 5 references per image; {args.arch} random weights"
          f" on {args.device} {args.dtype}, batch {args.batch_size}, {args.repeats} repeats")  # fmt: skip
    print(markdown_table(["pipeline", "median s", "candidates/s", "time / capeval RefCLIP-S"], rows))
    figures = {"median_seconds": med, "candidates": n_cand}
    print()
    if "authors' structure RefCLIP-S" in results:
        diff = np.abs(results["capeval RefCLIP-S"] - results["authors' structure RefCLIP-S"])
        figures["speedup_vs_authors"] = med["authors' structure RefCLIP-S"] / base
        print(
            f"capeval vs authors' structure: {figures['speedup_vs_authors']:.2f}x faster; per-sample max |diff| {diff.max():.2e}"
        )
    if "torchmetrics CLIP-S" in results:
        ours = np.asarray(clip_noprefix(workload.candidates, images=workload.candidate_images)["scores"])
        theirs = results["torchmetrics CLIP-S"] * 2.5 / 100
        figures["speedup_vs_torchmetrics"] = med["torchmetrics CLIP-S"] / med["capeval CLIP-S"]
        print(
            f"capeval CLIP-S vs torchmetrics: {figures['speedup_vs_torchmetrics']:.2f}x faster; per-sample max |diff| "
            f"(no prompt, 2.5 cos vs 100 cos / 40) {np.abs(ours - theirs).max():.2e}"
        )
    figures["ratio_to_limit"] = base / med["bare forward (limit)"]
    print(f"capeval RefCLIP-S / bare forward: {figures['ratio_to_limit']:.2f}x the limit")

    if args.bf16_pairs:
        n_img = int(np.ceil(args.bf16_pairs / 5.66))
        figures["bf16"] = bf16_drift(
            make_image_caption_workload(work / "images", n_img), opts, "random " + args.arch
        )
        from capeval.shapes import shapes_clip_path

        shapes_opts = {**opts, "model": str(shapes_clip_path())}
        figures["bf16_shapes"] = bf16_drift(make_shapes_workload(args.bf16_pairs), shapes_opts, "shapes CLIP")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
