"""Throughput of the encoding stages alone and end to end (images/s, captions/s).

The end-to-end pipeline should approach the slower of its two stages measured alone: the model's forward
passes on ready tensors, and the decode + pre-process worker pool with no model. Reaching it means the
stages overlap instead of adding up.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import torch

from capeval.clip.backbones import Backbone
from capeval.clip.image_encoding import default_workers, encode_images, image_reader
from capeval.clip.text_encoding import encode_texts, pad_batch, tokenize_unique
from capeval.clip.tokenization import clear_word_cache
from capeval_dev.perf.workload import _caption, draw_photo_like


def make_jpeg_corpus(root: str | Path, n_files: int, n_distinct: int = 256, seed: int = 0) -> list[str]:
    """``n_files`` JPEG files (500x375) under distinct paths; contents cycle over ``n_distinct`` drawings."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    originals = []
    for i in range(min(n_distinct, n_files)):
        path = root / f"orig-{i:05d}.jpg"
        if not path.exists():
            draw_photo_like(rng).save(path, quality=90)
        originals.append(path)
    paths = []
    for i in range(n_files):
        path = root / f"img-{i:06d}.jpg"
        if not path.exists():
            shutil.copyfile(originals[i % len(originals)], path)
        paths.append(str(path))
    return paths


def make_captions(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{_caption(rng)} #{i}" for i in range(n)]


def _sync(bb: Backbone) -> None:
    if bb.device.type == "cuda":
        torch.cuda.synchronize(bb.device)


def pool_images_per_s(
    paths: list[str],
    size: int,
    device: torch.device,
    batch_size: int,
    num_workers: int | None = None,
    reader: str | None = None,
) -> float:
    """Decode + pre-process throughput of the reader ``encode_images`` would use, with no model."""
    workers = num_workers or default_workers(device)
    read = image_reader(reader, device, len(paths), batch_size, workers)
    start = time.perf_counter()
    for _ in read(paths, list(range(len(paths))), size, batch_size, workers, device.type == "cuda"):
        pass
    return len(paths) / (time.perf_counter() - start)


@torch.inference_mode()
def forward_images_per_s(bb: Backbone, n: int, batch_size: int) -> float:
    """Forward-only throughput on a ready (B, 3, H, W) batch already on the device."""
    x = torch.randn(batch_size, 3, bb.image_size, bb.image_size, device=bb.device, dtype=bb.dtype)
    bb.model.get_image_features(pixel_values=x)
    _sync(bb)
    steps = max(1, n // batch_size)
    start = time.perf_counter()
    for _ in range(steps):
        bb.model.get_image_features(pixel_values=x).pooler_output.float()
    _sync(bb)
    return steps * batch_size / (time.perf_counter() - start)


def end_to_end_images_per_s(
    bb: Backbone, paths: list[str], batch_size: int, num_workers: int | None = None, reader: str | None = None
) -> float:
    start = time.perf_counter()
    encode_images(bb, paths, batch_size=batch_size, num_workers=num_workers, progress=False, reader=reader)
    _sync(bb)
    return len(paths) / (time.perf_counter() - start)


def tokenize_captions_per_s(bb: Backbone, captions: list[str], prefix: str = "A photo depicts") -> float:
    """Tokenising alone, as a fresh process would (no word cached from an earlier run)."""
    clear_word_cache(bb.tokenizer)
    start = time.perf_counter()
    tokenize_unique(bb, captions, prefix)
    return len(captions) / (time.perf_counter() - start)


@torch.inference_mode()
def forward_captions_per_s(
    bb: Backbone, captions: list[str], batch_size: int, prefix: str = "A photo depicts"
) -> float:
    """Forward-only throughput on pre-tokenised, length-sorted, padded batches already on the device."""
    ids, _ = tokenize_unique(bb, captions, prefix)
    ids = sorted(ids, key=len)
    batches = []
    for s in range(0, len(ids), batch_size):
        t, m = pad_batch(ids[s : s + batch_size], bb.tokenizer.pad_token_id)
        batches.append((t.to(bb.device), m.to(bb.device)))
    bb.model.get_text_features(input_ids=batches[0][0], attention_mask=batches[0][1])
    _sync(bb)
    start = time.perf_counter()
    for t, m in batches:
        bb.model.get_text_features(input_ids=t, attention_mask=m).pooler_output.float()
    _sync(bb)
    return len(ids) / (time.perf_counter() - start)


def end_to_end_captions_per_s(bb: Backbone, captions: list[str], batch_size: int) -> float:
    clear_word_cache(bb.tokenizer)
    start = time.perf_counter()
    encode_texts(bb, captions, prefix="A photo depicts", batch_size=batch_size, progress=False)
    _sync(bb)
    return len(captions) / (time.perf_counter() - start)
