"""An independent re-statement of the CLIPScore authors' pipeline, from raw CLIPModel calls.

Written from jmhessel/clipscore's clipscore.py and OpenAI's clip.py, without any capeval code: the authors'
tokenizer (loaded by path), every caption padded to 77 with zeros, the torchvision-style transform done with
PIL + numpy, sklearn-style row normalisation, w * clip(cos, 0) and the unclipped harmonic mean.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from capeval_dev.testing.openai_reference import openai_tokenize, torchvision_resize_center_crop

MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def authors_pixels(img: Image.Image, n_px: int) -> torch.Tensor:
    """Resize(n_px, BICUBIC) -> CenterCrop(n_px) -> convert("RGB") -> ToTensor -> Normalize, as torchvision does."""
    arr = np.array(torchvision_resize_center_crop(img, n_px).convert("RGB"))
    x = arr.astype(np.float32) / 255.0
    x = (x - MEAN) / STD
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))


def authors_tokens(texts: list[str], prefix: str = "A photo depicts") -> torch.Tensor:
    """clip.tokenize(prefix + " " + text, truncate=True): (N, 77) ids, zero-padded."""
    if prefix and not prefix.endswith(" "):
        prefix += " "
    ids = openai_tokenize([prefix + t for t in texts])
    out = torch.zeros(len(ids), 77, dtype=torch.long)
    for i, row in enumerate(ids):
        out[i, : len(row)] = torch.tensor(row)
    return out


def _normalize(x: torch.Tensor) -> np.ndarray:
    x = x.double().numpy()
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return x / norms


@torch.no_grad()
def authors_image_features(model, images: list[Image.Image]) -> np.ndarray:
    n_px = model.config.vision_config.image_size
    pix = torch.stack([authors_pixels(img, n_px) for img in images])
    return _normalize(model.get_image_features(pixel_values=pix).pooler_output)


@torch.no_grad()
def authors_text_features(model, texts: list[str], prefix: str = "A photo depicts") -> np.ndarray:
    return _normalize(model.get_text_features(input_ids=authors_tokens(texts, prefix)).pooler_output)


def authors_clip_s(model, images, candidates, w=2.5, prefix="A photo depicts") -> np.ndarray:
    img = authors_image_features(model, images)
    txt = authors_text_features(model, candidates, prefix)
    return w * np.clip(np.sum(img * txt, axis=1), 0, None)


def authors_refclip_s(model, images, candidates, references, w=2.5, prefix="A photo depicts") -> np.ndarray:
    per = authors_clip_s(model, images, candidates, w, prefix)
    cand = authors_text_features(model, candidates, prefix)
    best = np.array(
        [np.max(authors_text_features(model, refs, prefix) @ cand[i]) for i, refs in enumerate(references)]
    )
    return 2 * per * best / (per + best)
