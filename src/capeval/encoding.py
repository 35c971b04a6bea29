"""Images and captions to L2-normalised CLIP embeddings, each distinct input encoded once.

Images: read and resized on a small thread pool while the model runs on the previous batch.
Texts: de-duplicated by token ids, sorted by length and padded to the longest in each batch
(never to 77: CLIP's text encoder is causal, so padding after end-of-text cannot change the pooled
embedding, and short batches run several times faster). On GPU out-of-memory the batch size is
halved and the batch retried.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from capeval.backbones import Backbone
from capeval.images import image_key, normalize_pixels, preprocess_image
from capeval.tokenization import tokenize_captions, with_prefix

logger = logging.getLogger(__name__)
BATCH_SIZE = 64  # default encoder batch; halved automatically on GPU out-of-memory


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def _free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


class _BatchSize:
    """The current batch size, kept across calls once out-of-memory has lowered it."""

    def __init__(self, value: int) -> None:
        self.value = value


def run_with_backoff(
    run: Callable[[list[int]], torch.Tensor],
    order: Sequence[int],
    batch_size: int,
    device: torch.device,
    what: str,
    size: _BatchSize | None = None,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Call ``run`` on consecutive chunks of ``order``, halving the chunk on out-of-memory.

    Yields:
        (chunk, output) pairs; the chunks cover ``order`` once, in order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    size = size or _BatchSize(batch_size)
    size.value = min(size.value, batch_size)
    start = 0
    while start < len(order):
        chunk = list(order[start : start + size.value])
        try:
            out = run(chunk)
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not _is_oom(err) or size.value == 1:
                raise
            _free_device_memory(device)
            size.value = max(1, size.value // 2)
            warnings.warn(f"out of memory encoding {what}: batch size lowered to {size.value}", stacklevel=2)
            continue
        yield chunk, out
        start += len(chunk)


def _progress(total: int, desc: str, progress: bool | None):
    from tqdm.auto import tqdm

    # None: a bar only on a terminal and only for work worth watching.
    disable = (not progress) if progress is not None else (total < 512 or None)
    return tqdm(total=total, desc=desc, unit="it", disable=disable, dynamic_ncols=True)


def unique_indices(keys: Sequence) -> tuple[list[int], list[int]]:
    """First occurrence of each distinct key, and for every input the position of its key among them."""
    first: dict = {}
    inverse = []
    uniques = []
    for i, k in enumerate(keys):
        j = first.get(k)
        if j is None:
            j = first[k] = len(uniques)
            uniques.append(i)
        inverse.append(j)
    return uniques, inverse


def _default_workers(device: torch.device | None = None) -> int:
    cores = os.cpu_count() or 2
    # On a GPU decoding is the bottleneck: use every core. On the CPU the model needs the cores itself.
    return max(1, min(32, cores) if device is not None and device.type == "cuda" else min(4, cores))


@contextlib.contextmanager
def _ieee_fp32_convolutions(backbone: Backbone):
    """float32 on a GPU means float32: cuDNN's default TF32 convolutions (the patch embedding) move CLIP-S by
    up to 1e-4 against the CPU; they stay on for fp16/bf16, where they do not matter."""
    if backbone.device.type != "cuda" or backbone.dtype != torch.float32:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32 = previous


@torch.inference_mode()
def _image_forward(backbone: Backbone, pixels_uint8: torch.Tensor) -> torch.Tensor:
    """(B, H, W, 3) uint8 to (B, D) float32 L2-normalised embeddings, left on the model's device."""
    dev = backbone.device
    x = normalize_pixels(pixels_uint8.to(dev, non_blocking=True), backbone.image_mean, backbone.image_std)
    with _ieee_fp32_convolutions(backbone):
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


def encode_images(
    backbone: Backbone,
    images: Sequence,
    batch_size: int = BATCH_SIZE,
    num_workers: int | None = None,
    progress: bool | None = None,
) -> torch.Tensor:
    """Embed images; the same image given several times is read and encoded once.

    Args:
        backbone: from ``load_backbone``.
        images: PIL images, paths, numpy arrays, torch tensors or ``datasets`` Image dicts.
        batch_size: images per forward pass (halved on GPU out-of-memory).
        num_workers: readers decoding and resizing images ahead of the model (default: all cores, at most 32,
            as processes, on a GPU; 4 threads on the CPU).
        progress: show a progress bar (``None``: only for long runs on a terminal).

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    keys = [image_key(img, i) for i, img in enumerate(images)]
    uniques, inverse = unique_indices(keys)
    if not uniques:
        return torch.zeros(0, backbone.embed_dim)
    workers = num_workers or _default_workers(backbone.device)
    pin = backbone.device.type == "cuda"
    read = (
        _process_batches
        if _use_processes(backbone.device, len(uniques), batch_size, workers)
        else _thread_batches
    )
    forward_size = _BatchSize(batch_size)
    pieces: list[torch.Tensor] = []
    with _progress(len(uniques), "images", progress) as bar:
        for pixels in read(images, uniques, backbone.image_size, batch_size, workers, pin):
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


def tokenize_unique(
    backbone: Backbone, texts: Sequence[str], prefix: str | None
) -> tuple[list[tuple[int, ...]], list[int]]:
    """Token ids of each distinct caption (after prefix and cleaning), and each input's position among them.

    Warns once with the count of captions cut to the context length.
    """
    joined = [with_prefix(t, prefix) for t in texts]
    distinct_str, str_inverse = unique_indices(joined)
    ids, n_cut = tokenize_captions(
        backbone.tokenizer, [joined[i] for i in distinct_str], backbone.context_length
    )
    if n_cut:
        warnings.warn(
            f"{n_cut} caption(s) longer than {backbone.context_length} tokens were truncated "
            "(end-of-text kept, as clip.tokenize(truncate=True) does)",
            stacklevel=3,
        )
    # Different strings can share token ids (case, whitespace): encode each id sequence once.
    id_keys = [tuple(x) for x in ids]
    distinct_ids, id_inverse = unique_indices(id_keys)
    return [id_keys[i] for i in distinct_ids], [id_inverse[j] for j in str_inverse]


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids padded to the longest in the batch, and the attention mask: (B, L) long each."""
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    longest = int(lengths.max())
    input_ids = np.full((len(ids), longest), pad_id, dtype=np.int64)
    for row, x in enumerate(ids):
        input_ids[row, : len(x)] = x
    mask = (np.arange(longest)[None, :] < lengths[:, None]).astype(np.int64)
    return torch.from_numpy(input_ids), torch.from_numpy(mask)


@torch.inference_mode()
def _text_forward(backbone: Backbone, ids: list[tuple[int, ...]], want_tokens: bool):
    """Pooled (B, D) embeddings left on the device; with ``want_tokens`` also per-token (L_i, D) on the CPU."""
    pad = backbone.tokenizer.pad_token_id
    pad = backbone.tokenizer.eos_token_id if pad is None else pad
    input_ids, mask = pad_batch(ids, pad)
    input_ids = input_ids.to(backbone.device, non_blocking=True)
    mask = mask.to(backbone.device, non_blocking=True)
    out = backbone.model.get_text_features(input_ids=input_ids, attention_mask=mask)
    pooled = F.normalize(out.pooler_output.float(), dim=-1)
    if not want_tokens:
        return pooled
    tokens = backbone.model.text_projection(out.last_hidden_state)
    tokens = F.normalize(tokens.float(), dim=-1).cpu()
    return pooled, [tokens[row, : len(x)] for row, x in enumerate(ids)]


def _encode_ids(
    backbone: Backbone, ids: list[tuple[int, ...]], batch_size: int, progress: bool | None, want_tokens: bool
):
    """Encode token-id sequences in length-sorted batches (stable order); returns (pooled (N, D), tokens)."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    tokens: list = [None] * len(ids)
    pieces: list[torch.Tensor] = []
    with _progress(len(ids), "captions", progress) as bar:

        def run(chunk: list[int]):
            return _text_forward(backbone, [ids[i] for i in chunk], want_tokens)

        for chunk, result in run_with_backoff(run, order, batch_size, backbone.device, "captions"):
            emb, toks = result if want_tokens else (result, None)
            pieces.append(emb)
            if want_tokens:
                for i, t in zip(chunk, toks, strict=True):
                    tokens[i] = t
            bar.update(len(chunk))
    pooled = torch.empty(len(ids), backbone.embed_dim)
    # One copy to the host at the end: no per-batch synchronisation stalls the GPU queue.
    pooled[torch.tensor(order, dtype=torch.long)] = torch.cat(pieces).cpu()
    return pooled, tokens


def encode_texts(
    backbone: Backbone,
    texts: Sequence[str],
    prefix: str | None = None,
    batch_size: int = BATCH_SIZE,
    progress: bool | None = None,
) -> torch.Tensor:
    """Embed captions (the prompt ``prefix`` joined in front); each distinct caption is encoded once.

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order.
    """
    if len(texts) == 0:
        return torch.zeros(0, backbone.embed_dim)
    ids, inverse = tokenize_unique(backbone, texts, prefix)
    pooled, _ = _encode_ids(backbone, ids, batch_size, progress, want_tokens=False)
    return pooled[inverse]


def encode_text_tokens(
    backbone: Backbone,
    texts: Sequence[str],
    prefix: str | None = None,
    batch_size: int = BATCH_SIZE,
    progress: bool | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], list[tuple[int, ...]]]:
    """Global and per-token caption embeddings (EMScore's fine-grained matching).

    Token embeddings are the text encoder's last hidden states (after its final layer norm) passed through
    the text projection and L2-normalised, from start-of-text to end-of-text inclusive.

    Returns:
        (pooled, tokens, ids): pooled (N, D) L2-normalised; tokens[i] (L_i, D); ids[i] the L_i token ids.
    """
    if len(texts) == 0:
        return torch.zeros(0, backbone.embed_dim), [], []
    ids, inverse = tokenize_unique(backbone, texts, prefix)
    pooled, tokens = _encode_ids(backbone, ids, batch_size, progress, want_tokens=True)
    return pooled[inverse], [tokens[j] for j in inverse], [ids[j] for j in inverse]
