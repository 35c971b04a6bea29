"""What a model object costs per call against the same weights loaded by name, in one run.

A model object (``model=(model, processor)``, the model being trained) has its weights hashed (and checked for
NaN/inf) at every call, and is never cached; a model loaded by name is hashed once per process. This prints the
median seconds of one CLIP-S call each way at ViT-B/32's size (random weights, OpenAI's tokenizer and image
processing), the hash alone, and the ratio.

    PYTHONPATH=src python scripts/bench_model_object.py                 # 32 images, 5 repeats
    PYTHONPATH=src python scripts/bench_model_object.py --images 256 --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import capeval
from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
from capeval.clip.in_memory import hash_weights
from capeval.testing.shapes import example_items
from capeval.testing.tiny_clip import build_clip_tokenizer, save_clip_folder, vit_b32_config


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    from transformers import CLIPImageProcessorPil, CLIPModel, CLIPProcessor

    torch.manual_seed(0)
    model = CLIPModel(vit_b32_config()).to(args.device)
    tokenizer = build_clip_tokenizer()
    images = CLIPImageProcessorPil(
        size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
        image_mean=list(OPENAI_IMAGE_MEAN), image_std=list(OPENAI_IMAGE_STD),
    )  # fmt: skip
    processor = CLIPProcessor(image_processor=images, tokenizer=tokenizer)
    scenes = list(example_items(min(args.images, 12)).values())
    pictures = [scenes[i % len(scenes)]["image"] for i in range(args.images)]
    captions = [scenes[i % len(scenes)]["candidate"] for i in range(args.images)]

    with tempfile.TemporaryDirectory() as folder:
        save_clip_folder(model.cpu(), tokenizer, folder)
        images.save_pretrained(folder)
        model.to(args.device)
        by_name = capeval.CLIPScore(model=folder, device=args.device)
        by_object = capeval.CLIPScore(model=(model, processor))
        by_name(captions, images=pictures)  # warm-up: first-call costs out of the timing
        by_object(captions, images=pictures)
        t_name = median_seconds(lambda: by_name(captions, images=pictures), args.repeats)
        t_object = median_seconds(lambda: by_object(captions, images=pictures), args.repeats)
        t_hash = median_seconds(lambda: hash_weights(model, "model"), args.repeats)
    params = sum(p.numel() for p in model.parameters())
    print(f"ViT-B/32 size ({params / 1e6:.0f}M parameters), {args.images} images, device {args.device}, "
          f"medians of {args.repeats}")  # fmt: skip
    print(f"  by name (loaded once):      {t_name:.3f} s per call")
    print(f"  model object (hashed/call): {t_object:.3f} s per call  ({t_object / t_name:.2f}x)")
    print(f"  weights hash alone:         {t_hash:.3f} s")


if __name__ == "__main__":
    main()
