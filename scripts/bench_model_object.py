"""What naming the model costs per call: a model object against the same weights in a local folder, each
against the bare forward of the same batch, in one run.

A model object (``model=(model, processor)``, the model being trained) is named by a revision over its weights,
config and tokenizer (``capeval.clip.model_identity.model_object_revision``). The weights' sha256 (with a NaN/inf
check) and the tokenizer's are kept per object and computed again only when a cheap key changes (per tensor its
version counter, storage and layout, and the bits of 64 probed elements; the tokenizer's settings and pipeline); the
config is read at each call. A local folder is hashed once per process (keyed by each file's path, size, mtime and
inode). This prints the median seconds of the bare forward (``get_image_features`` and ``get_text_features`` on
inputs prepared once), of a CLIP-S call each way, of the torchmetrics ``update`` with the model object, of a
model-object call right after an in-place step (hashed again) and of the naming alone, each one's ratio to the bare
forward, and what a model-object call costs over the same call on the folder. Random weights at ViT-B/32's size
(built here, nothing downloaded), OpenAI's tokenizer and image processing, distinct images and captions (capeval
encodes a repeated one once).

    PYTHONPATH=src python scripts/bench_model_object.py                   # 32 images, 7 repeats
    PYTHONPATH=src python scripts/bench_model_object.py --images 64 --device cuda
    PYTHONPATH=src python scripts/bench_model_object.py --threads 1 --repeats 5   # a CPU shared with other work
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import capeval
from capeval.clip import model_identity
from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
from capeval.shapes import example_items
from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, vit_b32_config


def interleaved_medians(runs: dict, repeats: int) -> dict[str, float]:
    """Median wall seconds of each ``name -> (fn, before or None)``, timed round-robin (one of each per round) so
    every figure meets the same load on a shared machine; ``before()`` runs untimed ahead of its ``fn()``."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (fn, before) in runs.items():
            if before is not None:
                before()
            start = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def build(device: str):
    """A random CLIP of ViT-B/32's size on ``device`` with its processor."""
    from transformers import CLIPImageProcessorPil, CLIPModel, CLIPProcessor

    torch.manual_seed(0)
    model = CLIPModel(vit_b32_config()).to(device)
    images = CLIPImageProcessorPil(
        size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
        image_mean=list(OPENAI_IMAGE_MEAN), image_std=list(OPENAI_IMAGE_STD),
    )  # fmt: skip
    return model, CLIPProcessor(image_processor=images, tokenizer=build_clip_tokenizer())


def bare_forward(model, processor, captions, pictures, device: str):
    """The model's own forward on inputs prepared once: what every way of calling it pays at least."""
    inputs = processor(text=captions, images=pictures, return_tensors="pt", padding=True).to(device)

    def forward():
        with torch.inference_mode():
            model.get_image_features(pixel_values=inputs["pixel_values"])
            model.get_text_features(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])

    return forward


def measure(args) -> dict[str, float]:
    model, processor = build(args.device)
    scenes = list(example_items(args.images).values())  # distinct scenes: capeval would encode a repeat once
    pictures = [scene["image"] for scene in scenes]
    captions = [scene["candidate"] for scene in scenes]
    weight = model.visual_projection.weight

    def step():  # an in-place write, as an optimiser step makes: the kept digest no longer applies
        with torch.no_grad():
            weight.add_(0.0)

    with tempfile.TemporaryDirectory() as folder:
        save_clip_folder(model.cpu(), processor.tokenizer, folder)
        processor.image_processor.save_pretrained(folder)
        model.to(args.device).eval()
        forward = bare_forward(model, processor, captions, pictures, args.device)
        by_folder = capeval.CLIPScore(model=folder, device=args.device)
        by_object = capeval.CLIPScore(model=(model, processor))
        tokenizer = processor.tokenizer
        runs = {
            "bare forward": (forward, None),
            "call, local folder": (lambda: by_folder(captions, images=pictures), None),
            "call, model object": (lambda: by_object(captions, images=pictures), None),
            "call, model object after a step": (lambda: by_object(captions, images=pictures), step),
            "naming, model object: from scratch": (
                lambda: model_identity.hash_model_object(model, tokenizer, "m"),
                None,
            ),
            "naming, model object: kept": (
                lambda: model_identity.model_object_revision(model, tokenizer, "m"),
                None,
            ),
        }
        try:
            from capeval.torchmetrics import CLIPScore as MetricCLIPScore
        except ImportError:  # the torchmetrics extra is not installed: its row is left out
            MetricCLIPScore = None
        if MetricCLIPScore is not None:
            metric = MetricCLIPScore(model=(model, processor))
            runs["torchmetrics update, model object"] = (
                lambda: metric.update(captions, images=pictures),
                None,
            )
        for fn, _ in runs.values():
            fn()  # first-call costs (loading, allocator) out of the timing
        return interleaved_medians(runs, args.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32, help="distinct images (and captions), at most 75")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # one thread: steadier figures on a CPU other processes share
    times = measure(args)
    forward = times["bare forward"]
    print(
        f"ViT-B/32 size (random weights), {args.images} images, device {args.device}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}, medians of {args.repeats}"
    )
    for name, seconds in times.items():
        print(f"  {name:<36} {seconds:7.3f} s  {seconds / forward:5.2f}x the bare forward")
    folder = times["call, local folder"]
    naming = times["naming, model object: kept"]
    print(
        f"  a model object over a local folder: {times['call, model object'] - folder:+.3f} s per call "
        f"({(times['call, model object'] - folder) / forward:+.1%} of the bare forward), "
        f"{times['call, model object after a step'] - folder:+.3f} s right after a step; "
        f"naming on unchanged weights: {naming / forward:.2%} of the bare forward"
    )


if __name__ == "__main__":
    main()
