"""End-to-end encoding throughput against the two limits, per architecture and dtype (meant for a GPU).

For each (architecture, dtype): images/s of (1) forward passes alone on ready tensors, (2) the decode +
pre-process worker pool alone, (3) capeval's encode_images from JPEG files; and captions/s of forward alone,
tokenisation alone and encode_texts. Reports end-to-end / min(limits). Medians of --repeats runs.
Example:  python scripts/bench_gpu.py --device cuda --arch vit-b32 vit-l14 --dtype float16 bfloat16
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
from pathlib import Path

import torch
import transformers

import capeval
from capeval.clip.backbones import load_backbone
from capeval.perf import throughput as tp
from capeval.perf.models import build_benchmark_clip
from capeval.perf.timing import markdown_table


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--arch", nargs="+", default=["vit-b32", "vit-l14"], choices=["vit-b32", "vit-l14"])
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--n-images", type=int, default=2048)
    parser.add_argument("--n-captions", type=int, default=50000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--text-batch-size", type=int, default=1024)
    parser.add_argument(
        "--num-workers", type=int, default=None, help="image reader threads (default: capeval's)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "capeval-bench-gpu"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    work = Path(args.workdir)
    paths = tp.make_jpeg_corpus(work / "jpegs", args.n_images)
    captions = tp.make_captions(args.n_captions)
    device_name = (
        torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor() or "cpu"
    )
    print(
        f"device: {device_name}; capeval {capeval.__version__}, torch {torch.__version__}, transformers {transformers.__version__}"
    )
    rows, figures = [], []
    for arch in args.arch:
        folder = work / f"random-{arch}"
        if not (folder / "config.json").is_file():
            build_benchmark_clip(arch, folder)
        for dtype in args.dtype:
            bb = load_backbone(str(folder), device=args.device, dtype=dtype)
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
    print(
        markdown_table(
            [
                "arch",
                "dtype",
                "img fwd/s",
                "img pool/s",
                "img e2e/s",
                "e2e/min",
                "cap fwd/s",
                "cap tok/s",
                "cap e2e/s",
                "e2e/min",
            ],
            rows,
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device_name, "rows": figures}, indent=2))


if __name__ == "__main__":
    main()
