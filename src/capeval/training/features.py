"""Frozen-encoder features for PAC-S fine-tuning: what the trainable projections take as input.

PAC-S trains only CLIP's two final projections (the authors' model runs both encoders under
``torch.no_grad`` and applies the projection outside it). The encoders are therefore fixed functions of
their inputs: each image and caption is encoded once, to its pooled pre-projection feature (vision: the
layer-normed class token; text: the layer-normed end-of-text token), and training runs on those features.
Preprocessing and tokenisation are capeval's, i.e. exactly what scoring uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from capeval.clip.backbones import Backbone
from capeval.clip.images import normalize_pixels, preprocess_image
from capeval.clip.tokenization import tokenize_captions, with_prefix

CHUNK = 256  # dataset rows decoded at a time


@torch.inference_mode()
def image_features(backbone: Backbone, images: Sequence, batch_size: int = 64) -> torch.Tensor:
    """Pooled vision features before ``visual_projection``.

    Returns:
        torch.Tensor: (N, vision width) float32 on the CPU.
    """
    out = []
    for start in range(0, len(images), batch_size):
        chunk = [
            preprocess_image(img, start + i, backbone.image_size)
            for i, img in enumerate(images[start : start + batch_size])
        ]
        x = normalize_pixels(torch.from_numpy(np.stack(chunk)), backbone.image_mean, backbone.image_std)
        pooled = backbone.model.vision_model(pixel_values=x.to(backbone.device, backbone.dtype)).pooler_output
        out.append(pooled.float().cpu())
    return torch.cat(out) if out else torch.zeros(0, backbone.model.config.vision_config.hidden_size)


@torch.inference_mode()
def text_features(
    backbone: Backbone, texts: Sequence[str], prefix: str | None, batch_size: int = 256
) -> torch.Tensor:
    """Pooled text features before ``text_projection`` (the prompt joined as in scoring).

    Returns:
        torch.Tensor: (N, text width) float32 on the CPU.
    """
    ids, _ = tokenize_captions(
        backbone.tokenizer,
        [with_prefix(t, prefix) for t in texts],
        backbone.context_length,
        backbone.family.special_text,
    )
    pad = backbone.tokenizer.pad_token_id
    pad = backbone.tokenizer.eos_token_id if pad is None else pad
    out = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        longest = max(len(x) for x in chunk)
        input_ids = torch.full((len(chunk), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), longest), dtype=torch.long)
        for row, x in enumerate(chunk):
            input_ids[row, : len(x)] = torch.tensor(x)
            mask[row, : len(x)] = 1
        dev = backbone.device
        pooled = backbone.model.text_model(
            input_ids=input_ids.to(dev), attention_mask=mask.to(dev)
        ).pooler_output
        out.append(pooled.float().cpu())
    return torch.cat(out) if out else torch.zeros(0, backbone.model.config.text_config.hidden_size)


def tuple_features(
    backbone: Backbone,
    dataset,
    columns: tuple[str, str, str, str],
    prefix: str | None,
    batch_size: int = 64,
    progress=None,
) -> dict[str, torch.Tensor]:
    """Features of every (real image, real caption, generated image, generated caption) row of a dataset.

    Args:
        dataset: a ``datasets.Dataset`` (or anything with ``len`` and slicing to dicts of columns).
        columns: names of the four columns, in that order.
        progress: an optional tqdm-like bar advanced by rows.

    Returns:
        dict with ``image``, ``caption``, ``generated_image``, ``generated_caption``: (N, width) tensors.

    Raises:
        ValueError: a missing column, or a non-string caption (naming row and column).
    """
    names = getattr(dataset, "column_names", None)
    if names is not None:
        absent = [c for c in columns if c not in names]
        if absent:
            raise ValueError(
                f"dataset lacks column(s) {absent}; it has {names} (set the column names to use)"
            )
    keys = ("image", "caption", "generated_image", "generated_caption")
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
    for start in range(0, len(dataset), CHUNK):
        rows = dataset[start : start + CHUNK]
        for key, column in zip(keys, columns, strict=True):
            values = list(rows[column])
            if key.endswith("caption"):
                for i, v in enumerate(values):
                    if not isinstance(v, str) or not v.strip():
                        raise ValueError(
                            f"row {start + i}, column {column!r}: expected a caption, got {v!r:.60}"
                        )
                parts[key].append(text_features(backbone, values, prefix))
            else:
                parts[key].append(image_features(backbone, values, batch_size))
        if progress is not None:
            progress.update(len(rows[columns[0]]))
    return {k: torch.cat(v) for k, v in parts.items()}
