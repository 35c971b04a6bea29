"""Peak memory of image encoding against batch size: host RSS, and device memory on a GPU.

Each batch size runs in a fresh subprocess so its peak RSS (the kernel's ru_maxrss) is its own. On a GPU,
``--oom-check`` then runs the out-of-memory back-off for real: the largest batch under a memory cap sized for the
smallest (``capeval_dev.perf.device_checks.oom_backoff``), in one more subprocess.
Example:  .venv/bin/python scripts/bench_memory.py --batch-sizes 8 32 64 128 --n-images 256
          python scripts/bench_memory.py --device cuda --dtype float16 --arch vit-l14 --batch-sizes 64 1024 --oom-check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from capeval_dev.perf.timing import markdown_table

CHILD = """
import json, resource, sys, time, torch
from capeval.clip.backbones import load_backbone
from capeval.clip.image_encoding import encode_images
model, device, dtype, batch, paths = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
bb = load_backbone(model, device=device, dtype=dtype)
rss_model = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if bb.device.type == "cuda":
    torch.cuda.reset_peak_memory_stats()
start = time.perf_counter()
encode_images(bb, paths, batch_size=batch, progress=False)
elapsed = time.perf_counter() - start
out = {"batch_size": batch, "rss_after_load_mib": rss_model,
       "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
       "images_per_s": len(paths) / elapsed}
if bb.device.type == "cuda":
    out["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
print(json.dumps(out))
"""

OOM_CHILD = """
import json, sys
from capeval.clip.backbones import load_backbone
from capeval.clip.image_encoding import encode_images
from capeval_dev.perf.device_checks import oom_backoff
model, device, dtype, small, large, paths = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6])
bb = load_backbone(model, device=device, dtype=dtype)
print(json.dumps(oom_backoff(lambda b: encode_images(bb, paths, batch_size=b, progress=False), small, large)))
"""


def child_json(code: str, *argv: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32, 64, 128])
    parser.add_argument("--n-images", type=int, default=256)
    parser.add_argument("--arch", choices=["vit-b32", "vit-l14"], default="vit-b32")
    parser.add_argument("--model", default=None, help="a CLIP folder or Hub id instead of random weights")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "capeval-bench"))
    parser.add_argument("--oom-check", action="store_true", help="on a GPU: the back-off under a real cap")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from capeval_dev.perf.models import build_benchmark_clip
    from capeval_dev.perf.throughput import make_jpeg_corpus

    work = Path(args.workdir)
    model = args.model
    if model is None:
        folder = work / f"random-{args.arch}"
        if not (folder / "config.json").is_file():
            build_benchmark_clip(args.arch, folder)
        model = str(folder)
    paths = make_jpeg_corpus(work / "jpegs", args.n_images)
    rows, figures = [], []
    for batch in args.batch_sizes:
        result = child_json(CHILD, model, args.device, args.dtype, str(batch), json.dumps(paths))
        figures.append(result)
        rows.append(
            [batch, result["rss_after_load_mib"], result["peak_rss_mib"], result.get("peak_device_mib", "-"),
             result["images_per_s"]]
        )  # fmt: skip
    print(f"{args.n_images} JPEGs 500x375, {args.arch} on {args.device} {args.dtype}")
    print(
        markdown_table(["batch", "RSS after load MiB", "peak RSS MiB", "peak device MiB", "images/s"], rows)
    )
    report = {"batches": figures}
    if args.oom_check:
        small, large = min(args.batch_sizes), max(args.batch_sizes)
        oom = child_json(OOM_CHILD, model, args.device, args.dtype, str(small), str(large), json.dumps(paths))
        report["oom_backoff"] = oom
        print(
            f"out-of-memory back-off: batch {large} under a {oom['cap_mib']:.0f} MiB cap (weights "
            f"{oom['weights_mib']:.0f} MiB + 1.5x batch {small}'s activations): {len(oom['warnings'])} step(s) "
            f"{oom['warnings']}; peak {oom['peak_mib_under_cap']:.0f} MiB; embeddings vs uncapped batch {small}: "
            f"max |diff| {oom['max_abs_diff_vs_uncapped']:.2e}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
