"""The pipelines the CLIP benchmark compares, each returning per-candidate scores.

- ``capeval_refclip``: capeval's RefCLIPScore end to end (JPEG decoding included).
- ``authors_structure``: the structure of jmhessel/clipscore: one image forward per candidate (no de-duplication),
  every caption and reference padded to 77 tokens, image batches of 64, text batches of 256.
- ``torchmetrics_clip``: ``torchmetrics.multimodal.CLIPScore`` (CLIP-S only, 100 * cos, no prompt) through a small
  wrapper that makes it work with transformers 5 (its issue #3407: ``get_*_features`` return output objects).
- ``bare_forward``: only the model's forward passes, on pre-processed pixels of the distinct images and
  pre-tokenised distinct texts (length-sorted, padded to the longest in each batch): the limit.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from capeval.clip.backbones import Backbone
from capeval.clip.images import normalize_pixels, preprocess_image
from capeval.clip.text_encoding import pad_batch
from capeval.clip.tokenization import tokenize_captions, with_prefix

PREFIX = "A photo depicts"


def capeval_refclip(scorer, workload) -> np.ndarray:
    """capeval.RefCLIPScore on the workload; returns RefCLIP-S per candidate."""
    out = scorer(
        workload.candidates, references=workload.candidate_references, images=workload.candidate_images
    )
    return np.asarray(out["scores"])


def capeval_clip(scorer, workload) -> np.ndarray:
    """capeval.CLIPScore on the workload; returns CLIP-S per candidate."""
    return np.asarray(scorer(workload.candidates, images=workload.candidate_images)["scores"])


@torch.inference_mode()
def _authors_images(bb: Backbone, paths: list[str], batch_size: int = 64) -> np.ndarray:
    feats = []
    for start in range(0, len(paths), batch_size):
        chunk = paths[start : start + batch_size]
        pix = torch.from_numpy(np.stack([preprocess_image(p, i, bb.image_size) for i, p in enumerate(chunk)]))
        x = normalize_pixels(pix, bb.image_mean, bb.image_std).to(bb.device, bb.dtype)
        feats.append(bb.model.get_image_features(pixel_values=x).pooler_output.float().cpu().numpy())
    return np.vstack(feats)


@torch.inference_mode()
def _authors_texts(bb: Backbone, texts: list[str], batch_size: int = 256) -> np.ndarray:
    feats = []
    for start in range(0, len(texts), batch_size):
        chunk = [with_prefix(t, PREFIX) for t in texts[start : start + batch_size]]
        ids, _ = tokenize_captions(bb.tokenizer, chunk, bb.context_length, bb.family.special_text)
        tokens = torch.zeros(len(ids), bb.context_length, dtype=torch.long)  # clip.tokenize pads to 77 with 0
        for row, x in enumerate(ids):
            tokens[row, : len(x)] = torch.tensor(x)
        feats.append(
            bb.model.get_text_features(input_ids=tokens.to(bb.device)).pooler_output.float().cpu().numpy()
        )
    return np.vstack(feats)


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def authors_structure(bb: Backbone, workload, w: float = 2.5) -> np.ndarray:
    """RefCLIP-S computed with the authors' pipeline structure; returns per-candidate scores."""
    img = _normalize(_authors_images(bb, workload.candidate_images))
    cand = _normalize(_authors_texts(bb, workload.candidates))
    per = w * np.clip(np.sum(img * cand, axis=1), 0, None)
    flat, owner = [], []
    for i, refs in enumerate(workload.candidate_references):
        flat.extend(refs)
        owner.extend([i] * len(refs))
    refs = _normalize(_authors_texts(bb, flat))
    owner = np.asarray(owner)
    best = np.array([np.max(refs[owner == i] @ cand[i]) for i in range(len(cand))])
    return 2 * per * best / (per + best)


class _TensorFeatures(torch.nn.Module):
    """Makes transformers 5's CLIPModel usable by torchmetrics: ``get_*_features`` return tensors."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def get_image_features(self, pixel_values):
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output

    def get_text_features(self, input_ids, attention_mask=None):
        return self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output


def torchmetrics_processor(bb: Backbone):
    from transformers import CLIPProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    size = bb.image_size
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": size}, crop_size={"height": size, "width": size}, image_mean=list(bb.image_mean),
        image_std=list(bb.image_std),
    )  # fmt: skip
    return CLIPProcessor(image_processor=image_processor, tokenizer=bb.tokenizer)


def torchmetrics_clip(bb: Backbone, workload, batch_size: int = 64) -> np.ndarray:
    """torchmetrics' CLIPScore (100 * max(cos, 0), no prompt) fed in batches; returns per-candidate values."""
    from PIL import Image
    from torchmetrics.functional.multimodal.clip_score import _clip_score_update
    from torchmetrics.multimodal import CLIPScore

    wrapper, processor = _TensorFeatures(bb.model), torchmetrics_processor(bb)
    metric = CLIPScore(model_name_or_path=lambda: (wrapper, processor))
    per = []
    paths = workload.candidate_images
    with torch.inference_mode():
        for start in range(0, len(paths), batch_size):
            imgs = [
                torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1)
                for p in paths[start : start + batch_size]
            ]
            caps = workload.candidates[start : start + batch_size]
            score, _ = _clip_score_update(imgs, caps, metric.model, metric.processor)
            per.append(score.clamp(min=0).float().cpu().numpy())
    return np.concatenate(per)


def prepare_bare_inputs(
    bb: Backbone, workload, batch_size: int = 64
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Pre-processed pixels of the distinct images, and the distinct texts as length-sorted padded batches
    (token ids and attention mask), all prepared before timing starts."""
    pixels = torch.from_numpy(
        np.stack([preprocess_image(p, i, bb.image_size) for i, p in enumerate(workload.image_paths)])
    )
    texts = sorted(set(workload.candidates) | {r for refs in workload.references for r in refs})
    ids, _ = tokenize_captions(
        bb.tokenizer, [with_prefix(t, PREFIX) for t in texts], bb.context_length, bb.family.special_text
    )
    ids = sorted(ids, key=len)
    batches = [
        pad_batch(ids[s : s + batch_size], bb.tokenizer.pad_token_id) for s in range(0, len(ids), batch_size)
    ]
    return normalize_pixels(pixels, bb.image_mean, bb.image_std), batches


@torch.inference_mode()
def bare_forward(
    bb: Backbone,
    pixels: torch.Tensor,
    text_batches: list[tuple[torch.Tensor, torch.Tensor]],
    batch_size: int = 64,
) -> None:
    """Only the forward passes (plus normalisation), the lower bound on any pipeline's time."""
    for start in range(0, len(pixels), batch_size):
        x = pixels[start : start + batch_size].to(bb.device, bb.dtype)
        F.normalize(bb.model.get_image_features(pixel_values=x).pooler_output.float(), dim=-1)
    for tokens, mask in text_batches:
        out = bb.model.get_text_features(input_ids=tokens.to(bb.device), attention_mask=mask.to(bb.device))
        F.normalize(out.pooler_output.float(), dim=-1)
    if bb.device.type == "cuda":
        torch.cuda.synchronize(bb.device)
