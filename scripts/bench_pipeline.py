"""Do the encoding pipelines overlap their stages? Measured on any machine with a stand-in accelerator.

The GPU benchmark (bench_gpu.py) needs a GPU. This one replaces the model by ``capeval_dev.perf.simulated``'s
stand-in: a forward pass sleeps for rows / rate seconds with the host idle, as it is while a GPU computes,
while reading, decoding and tokenising run for real. The stand-in's rate is set to the reader's (or the
tokenizer's) measured rate, the hardest case: stages run one after the other reach 0.5 of the slower limit,
overlapping stages nearly 1.0. Reports end to end / min(forward alone, reader or tokenizer alone), medians
of --repeats interleaved runs, for the image reader in processes (what a GPU uses) and threads, and for
captions with tokenising overlapped (what a GPU uses) and in sequence (what the CPU does).
Example:  python scripts/bench_pipeline.py --n-images 1024 --n-captions 30000 --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
from pathlib import Path

import torch

from capeval.clip.backbones import load_backbone
from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config
from capeval_dev.perf import throughput as tp
from capeval_dev.perf.simulated import simulated_backbone
from capeval_dev.perf.timing import markdown_table


def _backbone(work: Path):
    """A tiny CLIP with the real tokenizer and a 224-pixel input: only its tokenizer and geometry are used."""
    folder = work / "tokenizer-clip"
    if not (folder / "config.json").is_file():
        from transformers import CLIPModel

        save_clip_folder(
            CLIPModel(tiny_clip_config(image_size=224, patch_size=32)), build_clip_tokenizer(), folder
        )
    return load_backbone(str(folder), device="cpu")


def image_rows(bb, paths: list[str], args) -> list[list]:
    workers = args.num_workers
    rows = []
    for reader in ("processes", "threads"):
        rate = tp.pool_images_per_s(paths, bb.image_size, bb.device, args.batch_size, workers, reader=reader)
        sim = simulated_backbone(bb, images_per_s=rate, captions_per_s=1.0)
        runs = {"forward": [], "reader": [], "e2e": []}
        for _ in range(args.repeats):
            runs["forward"].append(tp.forward_images_per_s(sim, len(paths), args.batch_size))
            runs["reader"].append(
                tp.pool_images_per_s(paths, bb.image_size, bb.device, args.batch_size, workers, reader=reader)
            )
            runs["e2e"].append(
                tp.end_to_end_images_per_s(sim, paths, args.batch_size, workers, reader=reader)
            )
        med = {k: statistics.median(v) for k, v in runs.items()}
        ratio = med["e2e"] / min(med["forward"], med["reader"])
        rows.append([f"images, reader in {reader}", med["forward"], med["reader"], med["e2e"], ratio])
    return rows


def caption_rows(bb, captions: list[str], args) -> list[list]:
    rate = tp.tokenize_captions_per_s(bb, captions)
    overlapped = simulated_backbone(bb, images_per_s=1.0, captions_per_s=rate)
    # The same stand-in reported as a CPU: encode_texts then tokenises each window before encoding it.
    in_sequence = dataclasses.replace(overlapped, device=torch.device("cpu"))
    rows = []
    for name, sim in (
        ("captions, tokenising overlapped", overlapped),
        ("captions, in sequence", in_sequence),
    ):
        runs = {"forward": [], "tokenize": [], "e2e": []}
        for _ in range(args.repeats):
            runs["forward"].append(tp.forward_captions_per_s(sim, captions, args.text_batch_size))
            runs["tokenize"].append(tp.tokenize_captions_per_s(bb, captions))
            runs["e2e"].append(tp.end_to_end_captions_per_s(sim, captions, args.text_batch_size))
        med = {k: statistics.median(v) for k, v in runs.items()}
        ratio = med["e2e"] / min(med["forward"], med["tokenize"])
        rows.append([name, med["forward"], med["tokenize"], med["e2e"], ratio])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n-images", type=int, default=1024, help="500x375 JPEG files read end to end")
    parser.add_argument("--n-captions", type=int, default=30000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--text-batch-size", type=int, default=1024)
    parser.add_argument("--num-workers", type=int, default=os.cpu_count() or 2, help="image readers")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["images", "captions"], default=None)
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "capeval-bench-pipeline"))
    args = parser.parse_args()
    # The stand-in's outputs are tiny CPU tensors; one intra-op thread keeps OpenMP workers from spinning on
    # the cores the readers and the tokenizer need (on a GPU these operations run on the device).
    torch.set_num_threads(1)
    work = Path(args.workdir)
    bb = _backbone(work)
    print(
        f"{os.cpu_count()} cores; torch {torch.__version__}; stand-in accelerator (capeval_dev.perf.simulated)"
    )
    rows = []
    if args.only in (None, "images"):
        rows += image_rows(bb, tp.make_jpeg_corpus(work / "jpegs", args.n_images), args)
    if args.only in (None, "captions"):
        rows += caption_rows(bb, tp.make_captions(args.n_captions), args)
    headers = ["pipeline", "forward alone /s", "reader or tokenizer alone /s", "end to end /s", "e2e / min"]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
