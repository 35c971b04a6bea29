"""Images and captions to L2-normalised CLIP embeddings, each distinct input encoded once.

Images: read and resized on a small thread pool while the model runs on the previous batch.
Texts: de-duplicated by token ids, sorted by length and padded to the longest in each batch
(never to 77: CLIP's text encoder is causal, so padding after end-of-text cannot change the pooled
embedding, and short batches run several times faster). On GPU out-of-memory the batch size is
halved and the batch retried.
"""

from __future__ import annotations

import logging
import os
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


def run_with_backoff(
    run: Callable[[list[int]], torch.Tensor],
    order: Sequence[int],
    batch_size: int,
    device: torch.device,
    what: str,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Call ``run`` on consecutive chunks of ``order``, halving the chunk on out-of-memory.

    Yields:
        (chunk, output) pairs; the chunks cover ``order`` once, in order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    start = 0
    while start < len(order):
        chunk = list(order[start : start + batch_size])
        try:
            out = run(chunk)
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not _is_oom(err) or batch_size == 1:
                raise
            _free_device_memory(device)
            batch_size = max(1, batch_size // 2)
            warnings.warn(f"out of memory encoding {what}: batch size lowered to {batch_size}", stacklevel=2)
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


@torch.inference_mode()
def _image_forward(backbone: Backbone, pixels_uint8: torch.Tensor) -> torch.Tensor:
    dev = backbone.device
    x = pixels_uint8.pin_memory() if dev.type == "cuda" else pixels_uint8
    x = normalize_pixels(x.to(dev, non_blocking=True), backbone.image_mean, backbone.image_std)
    out = backbone.model.get_image_features(pixel_values=x.to(backbone.dtype))
    emb = out.pooler_output if hasattr(out, "pooler_output") else out
    return F.normalize(emb.float(), dim=-1).cpu()


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
        batch_size: images per forward pass.
        num_workers: threads reading and resizing images ahead of the model (default: CPU count, at most 8).
        progress: show a progress bar (``None``: only for long runs on a terminal).

    Returns:
        torch.Tensor: (N, D) float32 on the CPU, L2-normalised, in input order.
    """
    keys = [image_key(img, i) for i, img in enumerate(images)]
    uniques, inverse = unique_indices(keys)
    if not uniques:
        return torch.zeros(0, backbone.embed_dim)
    size = backbone.image_size
    workers = num_workers or _default_workers(backbone.device)
    out = torch.empty(len(uniques), backbone.embed_dim)

    with ThreadPoolExecutor(max_workers=workers) as pool, _progress(len(uniques), "images", progress) as bar:
        # Reading happens ahead: every unique image is submitted in order with a bounded window.
        window = max(batch_size * 2, workers * 2)
        futures: dict[int, object] = {}
        submitted = 0

        def pixels(chunk: list[int]) -> torch.Tensor:
            nonlocal submitted
            while submitted < len(uniques) and submitted < chunk[-1] + 1 + window:
                i = uniques[submitted]
                futures[submitted] = pool.submit(preprocess_image, images[i], i, size)
                submitted += 1
            arrays = [futures[j].result() for j in chunk]
            return torch.from_numpy(np.stack(arrays))

        positions = list(range(len(uniques)))

        def run(chunk: list[int]) -> torch.Tensor:
            return _image_forward(backbone, pixels(chunk))

        try:
            for chunk, emb in run_with_backoff(run, positions, batch_size, backbone.device, "images"):
                out[chunk[0] : chunk[-1] + 1] = emb
                for j in chunk:
                    futures.pop(j, None)
                bar.update(len(chunk))
        finally:
            for fut in futures.values():
                fut.cancel()
    return out[inverse]


def _pad_batch(ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for row, x in enumerate(ids):
        input_ids[row, : len(x)] = torch.tensor(x, dtype=torch.long)
        mask[row, : len(x)] = 1
    return input_ids, mask


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


@torch.inference_mode()
def _text_forward(backbone: Backbone, ids: list[tuple[int, ...]], want_tokens: bool):
    pad = backbone.tokenizer.pad_token_id
    pad = backbone.tokenizer.eos_token_id if pad is None else pad
    input_ids, mask = _pad_batch([list(x) for x in ids], pad)
    input_ids, mask = input_ids.to(backbone.device), mask.to(backbone.device)
    out = backbone.model.get_text_features(input_ids=input_ids, attention_mask=mask)
    pooled = F.normalize(out.pooler_output.float(), dim=-1).cpu()
    if not want_tokens:
        return pooled
    tokens = backbone.model.text_projection(out.last_hidden_state)
    tokens = F.normalize(tokens.float(), dim=-1).cpu()
    return pooled, [tokens[row, : len(x)] for row, x in enumerate(ids)]


def _encode_ids(
    backbone: Backbone, ids: list[tuple[int, ...]], batch_size: int, progress: bool | None, want_tokens: bool
):
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pooled = torch.empty(len(ids), backbone.embed_dim)
    tokens: list = [None] * len(ids)
    with _progress(len(ids), "captions", progress) as bar:

        def run(chunk: list[int]):
            return _text_forward(backbone, [ids[i] for i in chunk], want_tokens)

        for chunk, result in run_with_backoff(run, order, batch_size, backbone.device, "captions"):
            emb, toks = result if want_tokens else (result, None)
            pooled[chunk] = emb
            if want_tokens:
                for i, t in zip(chunk, toks, strict=True):
                    tokens[i] = t
            bar.update(len(chunk))
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
