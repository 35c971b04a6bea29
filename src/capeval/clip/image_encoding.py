"""Images to L2-normalised CLIP embeddings, each distinct image read and encoded once.

Images are read and resized by worker threads (CPU) or processes (GPU) while the model runs on the previous
batch. On GPU out-of-memory the batch size is halved and the batch retried. Captions are encoded by
``capeval.clip.text_encoding``, video frames by ``capeval.clip.frame_encoding``; ``capeval.clip`` lists all three.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from capeval.clip.backbones import Backbone
from capeval.clip.batching import BATCH_SIZE, _BatchSize, progress_bar, run_with_backoff, unique_indices
from capeval.clip.images import image_key, normalize_pixels, preprocess_image
from capeval.clip.text_encoding import encode_text_tokens, encode_texts, pad_batch, tokenize_unique

__all__ = [
    "BATCH_SIZE",
    "encode_images",
    "encode_pixels",
    "encode_text_tokens",
    "encode_texts",
    "pad_batch",
    "run_with_backoff",
    "tokenize_unique",
    "unique_indices",
]

logger = logging.getLogger(__name__)


def default_workers(device: torch.device | None = None) -> int:
    cores = os.cpu_count() or 2
    # On a GPU decoding is the bottleneck: use every core. On the CPU the model needs the cores itself.
    return max(1, min(32, cores) if device is not None and device.type == "cuda" else min(4, cores))


class _TF32Off:
    """cuDNN's process-wide TF32 switch, held off while any thread encodes float32 images on a GPU.

    Each thread saving and restoring the flag itself would leave it off for good when two encodings overlap (the
    second saves the first's "off"); here the first to enter saves it and the last to leave restores it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved: bool | None = None

    @staticmethod
    def _set(value: bool) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32 = value

    def enter(self) -> None:
        with self.lock:
            if self.users == 0:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.saved = torch.backends.cudnn.allow_tf32
                self._set(False)
            self.users += 1

    def leave(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                self._set(self.saved)


_TF32 = _TF32Off()


@contextlib.contextmanager
def _ieee_fp32_convolutions(backbone: Backbone):
    """float32 on a GPU means float32: cuDNN's default TF32 convolutions (the patch embedding) move CLIP-S by
    up to 1e-4 against the CPU; they stay on for fp16/bf16, where they do not matter."""
    if backbone.device.type != "cuda" or backbone.dtype != torch.float32:
        yield
        return
    _TF32.enter()
    try:
        yield
    finally:
        _TF32.leave()


@torch.inference_mode()
def _image_forward(backbone: Backbone, pixels_uint8: torch.Tensor) -> torch.Tensor:
    """(B, H, W, 3) uint8 to (B, D) float32 L2-normalised embeddings, left on the model's device."""
    dev = backbone.device
    x = normalize_pixels(pixels_uint8.to(dev, non_blocking=True), backbone.image_mean, backbone.image_std)
    with _ieee_fp32_convolutions(backbone), backbone.forward_mode():
        out = backbone.model.get_image_features(pixel_values=x.to(backbone.dtype))
    emb = out.pooler_output if hasattr(out, "pooler_output") else out
    return F.normalize(emb.float(), dim=-1)


class _ReadImages(torch.utils.data.Dataset):
    """Reads and resizes the distinct images in worker processes; errors travel back as values."""

    def __init__(self, images: Sequence, order: list[int], size: int) -> None:
        self.images, self.order, self.size = images, order, size

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, k: int):
        i = self.order[k]
        try:
            return preprocess_image(self.images[i], i, self.size)
        except (ValueError, TypeError) as err:
            return err


def _stack_or_error(items: list):
    for item in items:
        if isinstance(item, Exception):
            return item
    return torch.from_numpy(np.stack(items))


def _process_batches(images: Sequence, order: list[int], size: int, batch_size: int, workers: int, pin: bool):
    """(B, H, W, 3) uint8 batches read by ``workers`` processes: no GIL shared with the model's thread.

    Workers read small chunks, so all of them stay busy even when there are few batches; the chunks are
    assembled into forward batches here, directly into pinned memory on a GPU.
    """
    chunk = max(1, min(32, -(-batch_size // workers)))
    loader = torch.utils.data.DataLoader(
        _ReadImages(images, order, size),
        batch_size=chunk,
        num_workers=workers,
        collate_fn=_stack_or_error,
        prefetch_factor=max(2, -(-4 * batch_size // (chunk * workers))),
        multiprocessing_context="fork",
    )
    pending: list[torch.Tensor] = []
    n_pending = 0
    done = 0
    for piece in loader:
        if isinstance(piece, Exception):
            raise piece
        pending.append(piece)
        n_pending += len(piece)
        while n_pending >= batch_size or (n_pending and done + n_pending == len(order)):
            rows = min(batch_size, n_pending)
            batch = torch.empty((rows, size, size, 3), dtype=torch.uint8, pin_memory=pin)
            filled = 0
            while filled < rows:
                take = min(rows - filled, len(pending[0]))
                batch[filled : filled + take] = pending[0][:take]
                pending[0] = pending[0][take:]
                if not len(pending[0]):
                    pending.pop(0)
                filled += take
            n_pending -= rows
            done += rows
            yield batch


def _thread_batches(images: Sequence, order: list[int], size: int, batch_size: int, workers: int, pin: bool):
    """The same batches read by a thread pool, a bounded window ahead of the model."""
    window = max(batch_size * 2, workers * 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures: dict[int, object] = {}
        submitted = 0
        try:
            for start in range(0, len(order), batch_size):
                stop = min(start + batch_size, len(order))
                while submitted < len(order) and submitted < stop + window:
                    i = order[submitted]
                    futures[submitted] = pool.submit(preprocess_image, images[i], i, size)
                    submitted += 1
                batch = torch.from_numpy(np.stack([futures.pop(j).result() for j in range(start, stop)]))
                yield batch.pin_memory() if pin else batch
        finally:
            for fut in futures.values():
                fut.cancel()


def _use_processes(device: torch.device, n_images: int, batch_size: int, workers: int) -> bool:
    # On a GPU the model is fast and Python threads decoding JPEGs contend for the GIL with the thread that
    # launches the model's kernels; worker processes keep both busy. On the CPU the model needs the cores.
    return device.type == "cuda" and workers > 1 and n_images >= 2 * batch_size and sys.platform != "win32"


def image_reader(reader: str | None, device: torch.device, n_images: int, batch_size: int, workers: int):
    """The batch reader ``encode_images`` uses: ``"threads"``, ``"processes"`` or ``None`` (chosen by device)."""
    if reader is None:
        reader = "processes" if _use_processes(device, n_images, batch_size, workers) else "threads"
    if reader not in ("threads", "processes"):
        raise ValueError(f"reader must be 'threads', 'processes' or None, got {reader!r}")
    if reader == "processes" and sys.platform == "win32":
        raise ValueError("reader='processes' needs fork(), which Windows lacks: use reader='threads'")
    return _process_batches if reader == "processes" else _thread_batches


def encode_pixels(backbone: Backbone, pixels: torch.Tensor, batch_size: int = BATCH_SIZE) -> torch.Tensor:
    """Embed pixels already brought to the model's input size by its geometry (``preprocess_image``'s, as the
    corpus engine's workers prepare them): normalised on the model's device, ``batch_size`` per forward pass
    (halved on GPU out-of-memory); nothing decoded, resized or de-duplicated.

    Args:
        pixels (torch.Tensor): (N, S, S, 3) uint8, S the model's input size.

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order.
    """
    if pixels.dtype != torch.uint8 or pixels.ndim != 4 or pixels.shape[-1] != 3:
        raise ValueError(f"pixels must be (N, S, S, 3) uint8, got {tuple(pixels.shape)} {pixels.dtype}")
    if len(pixels) == 0:
        return torch.zeros(0, backbone.embed_dim)
    pieces = [
        emb
        for _, emb in run_with_backoff(
            lambda c: _image_forward(backbone, pixels[c[0] : c[-1] + 1]),
            range(len(pixels)),
            batch_size,
            backbone.device,
            "images",
        )
    ]
    return torch.cat(pieces).cpu()


def encode_images(
    backbone: Backbone,
    images: Sequence,
    batch_size: int = BATCH_SIZE,
    num_workers: int | None = None,
    progress: bool | None = None,
    reader: str | None = None,
    prepared: bool = False,
) -> torch.Tensor:
    """Embed images; the same image given several times is read and encoded once.

    Args:
        backbone: from ``load_backbone``.
        images: PIL images, paths, numpy arrays, torch tensors or ``datasets`` Image dicts.
        batch_size: images per forward pass (halved on GPU out-of-memory).
        num_workers: readers decoding and resizing images ahead of the model (default: all cores, at most 32,
            as processes, on a GPU; 4 threads on the CPU).
        progress: show a progress bar (``None``: only for long runs on a terminal).
        reader: ``"processes"`` (readers in worker processes, no GIL shared with the model's thread),
            ``"threads"``, or ``None``: processes on a GPU when there are at least two batches, else threads.
        prepared: the images are already at the model's input size, brought there by the family's geometry
            (video frames from ``read_frames``): a non-CLIP family's resize is not applied a second time.

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    keys = [image_key(img, i) for i, img in enumerate(images)]
    uniques, inverse = unique_indices(keys)
    if not uniques:
        image_reader(reader, backbone.device, 0, batch_size, 1)
        return torch.zeros(0, backbone.embed_dim)
    workers = num_workers or default_workers(backbone.device)
    pin = backbone.device.type == "cuda"
    read = image_reader(reader, backbone.device, len(uniques), batch_size, workers)
    forward_size = _BatchSize(batch_size)
    pieces: list[torch.Tensor] = []
    # OpenAI's geometry leaves a square image of the input size as it is; a processor's may not (resize, then crop).
    size = int(backbone.image_size) if prepared else backbone.image_size
    with progress_bar(len(uniques), "images", progress) as bar:
        for pixels in read(images, uniques, size, batch_size, workers, pin):
            rows = list(range(len(pixels)))
            for chunk, emb in run_with_backoff(
                lambda c, px=pixels: _image_forward(backbone, px[c[0] : c[-1] + 1]),
                rows,
                forward_size.value,
                backbone.device,
                "images",
                forward_size,
            ):
                pieces.append(emb)
                bar.update(len(chunk))
    # One copy to the host at the end: no per-batch synchronisation stalls the GPU queue.
    return torch.cat(pieces).cpu()[inverse]
