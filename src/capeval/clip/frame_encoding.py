"""Per-frame CLIP embeddings of videos: decoded a few videos ahead of the model, or given precomputed.

EMScore (Shi et al. 2022) embeds every frame of a video with CLIP's image encoder, or a fixed number of
frames evenly spaced. Frames are decoded by ``capeval.clip.video`` on a small thread pool and encoded in
chunks of several batches by the image encoder, so a long list of videos never sits in memory at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from capeval.clip.backbones import Backbone
from capeval.clip.batching import BATCH_SIZE, progress_bar, unique_indices
from capeval.clip.image_encoding import default_workers, encode_images
from capeval.clip.video import (
    NUM_FRAMES,
    VideoInput,
    check_num_frames,
    read_frames,
    sample_indices,
    video_key,
)

CHUNK_FRAMES = 256  # frames decoded ahead and encoded together (bounds memory, not results)


def encode_videos(
    backbone: Backbone,
    videos: Sequence[VideoInput],
    num_frames: int | None = NUM_FRAMES,
    batch_size: int = BATCH_SIZE,
    num_workers: int | None = None,
    progress: bool | None = None,
) -> list[torch.Tensor]:
    """Per-frame CLIP embeddings of each video; a video given several times is decoded and encoded once.

    Args:
        backbone: from ``load_backbone``.
        videos: file paths, lists of frames (PIL images, arrays, tensors, image paths), (T, H, W, C) arrays
            or (T, C, H, W) tensors.
        num_frames: frames per video, evenly spaced; ``None`` = every frame.
        batch_size: frames per forward pass of the image encoder.
        num_workers: threads decoding videos ahead of the model (default: every core, at most 32, on a GPU,
            where decoding and resizing frames is the bottleneck; at most 4 on the CPU).
        progress: show a progress bar (``None``: only for long runs on a terminal).

    Returns:
        list of (K_i, D) float32 CPU tensors, each row L2-normalised, in input order (shared, not copied,
        between repeated videos).
    """
    num_frames = check_num_frames(num_frames)
    keys = [video_key(v, i) for i, v in enumerate(videos)]
    uniques, inverse = unique_indices(keys)
    size = backbone.image_size
    # Frames are encoded in chunks of several batches so a long list of videos never sits in memory at once.
    chunk_frames = max(batch_size * 4, CHUNK_FRAMES)
    workers = num_workers or default_workers(backbone.device)
    window = max(2, workers * 2)
    out: list[torch.Tensor | None] = [None] * len(uniques)

    pending: list[np.ndarray] = []
    owners: list[tuple[int, int]] = []  # (unique position, frame count)

    def flush() -> None:
        if not pending:
            return
        emb = encode_images(
            backbone, pending, batch_size=batch_size, num_workers=1, progress=False, prepared=True
        )
        start = 0
        for pos, count in owners:
            out[pos] = emb[start : start + count].clone()
            start += count
        pending.clear()
        owners.clear()

    with (
        ThreadPoolExecutor(max_workers=workers) as pool,
        progress_bar(len(uniques), "videos", progress) as bar,
    ):
        futures = {}
        submitted = 0
        try:
            for pos in range(len(uniques)):
                while submitted < len(uniques) and submitted < pos + window:
                    i = uniques[submitted]
                    futures[submitted] = pool.submit(read_frames, videos[i], num_frames, size, i)
                    submitted += 1
                frames = futures.pop(pos).result()
                pending.extend(frames)
                owners.append((pos, len(frames)))
                if len(pending) >= chunk_frames:
                    flush()
                bar.update(1)
            flush()
        finally:
            for fut in futures.values():
                fut.cancel()
    return [out[j] for j in inverse]


def _as_frame_tensor(e, i: int, name: str) -> torch.Tensor:
    """One video's frame embeddings as a float32 CPU tensor; text or non-real values are refused by index."""
    if isinstance(e, (str, bytes)):
        raise TypeError(f"{name} {i} is a {type(e).__name__}; expected a (frames, D) array of embeddings")
    if not isinstance(e, torch.Tensor):
        try:
            # No dtype here: numpy would quietly read the text "0.5" as a number.
            arr = np.asarray(e)
        except (ValueError, TypeError) as err:
            raise TypeError(f"{name} {i} is not an array of numbers: {err}") from None
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"{name} {i} must hold real numbers, got dtype {arr.dtype}")
        e = torch.from_numpy(np.asarray(arr, dtype=np.float32))
    elif e.is_complex() or e.dtype == torch.bool:
        raise TypeError(f"{name} {i} must hold real numbers, got a {e.dtype} tensor")
    return e.detach().float().cpu()


def frame_embeddings(
    embeds, n: int, dim: int, num_frames: int | None = NUM_FRAMES, name: str = "video_embeds"
) -> list[torch.Tensor]:
    """Precomputed frame embeddings, one (K_i, D) array per video, sampled and L2-normalised row by row.

    ``num_frames`` samples the given frames as it samples decoded ones (the authors' VATEX-EVAL script keeps
    10 of its cached per-frame features this way).

    Args:
        embeds: a list of N (K_i, D) arrays/tensors, or one (N, K, D) array/tensor.
        n: number of predictions.
        dim: the model's embedding size D.

    Returns:
        list of N (K, D) float32 CPU tensors.
    """
    num_frames = check_num_frames(num_frames)
    if isinstance(embeds, (np.ndarray, torch.Tensor)):
        if embeds.ndim != 3:
            raise ValueError(
                f"{name} must be a list of (K, D) frame embeddings or one (N, K, D) array, "
                f"got shape {tuple(embeds.shape)}"
            )
        embeds = list(embeds)
    if isinstance(embeds, (str, bytes)) or not isinstance(embeds, Sequence):
        raise TypeError(
            f"{name} must be a list with one (K, D) array per prediction, got {type(embeds).__name__}"
        )
    if len(embeds) != n:
        raise ValueError(f"got {len(embeds)} {name} for {n} predictions")
    out = []
    cache: dict[int, torch.Tensor] = {}
    for i, e in enumerate(embeds):
        if id(e) in cache:
            out.append(cache[id(e)])
            continue
        t = _as_frame_tensor(e, i, name)
        if t.ndim == 1:
            t = t[None]
        if t.ndim != 2 or t.shape[1] != dim:
            raise ValueError(
                f"{name} {i} has shape {tuple(t.shape)}; expected (frames, {dim}) for this model"
            )
        if t.shape[0] == 0:
            raise ValueError(f"{name} {i} has no frames")
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} {i} holds NaN or inf")
        t = F.normalize(t[sample_indices(t.shape[0], num_frames)], dim=-1)
        cache[id(e)] = t
        out.append(t)
    return out
