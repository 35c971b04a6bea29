"""Captions longer than 77 tokens on a CLIP with more text positions (Long-CLIP's transformers conversions
have 248): every token is read, and the truncation limit and its warning follow the model's own positions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import capeval
from capeval.clip.backbones import load_backbone
from capeval.clip.text_encoding import encode_text_tokens
from capeval.diagnostics.categories import TruncationWarning
from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config

LONG_POSITIONS = 248  # Long-CLIP's text positions (config.text_config.max_position_embeddings)
WORDS = "a red circle sits on the left of a blue square while a green triangle waits above them".split()


def _caption(n_words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n_words))


def _clip_folder(tmp_path, positions: int):
    from transformers import CLIPModel

    config = tiny_clip_config()
    config.text_config.max_position_embeddings = positions
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    tokenizer = build_clip_tokenizer()
    tokenizer.model_max_length = positions
    return save_clip_folder(model, tokenizer, tmp_path / f"clip{positions}"), model, tokenizer


def _raw_clip_s(model, tokenizer, image_emb: torch.Tensor, text: str, limit: int) -> float:
    """CLIP-S from the raw model call on the first ``limit`` ids (end-of-text kept last)."""
    ids = tokenizer(text)["input_ids"]
    if len(ids) > limit:
        ids = ids[: limit - 1] + [ids[-1]]
    with torch.no_grad():
        out = model.get_text_features(input_ids=torch.tensor([ids]))
    feats = out if isinstance(out, torch.Tensor) else out.pooler_output
    feats = feats / feats.norm(dim=-1, keepdim=True)
    return 2.5 * max(float(feats[0] @ image_emb), 0.0)


def test_a_145_token_caption_is_scored_on_all_its_tokens_by_a_248_position_clip(tmp_path):
    folder, model, tokenizer = _clip_folder(tmp_path, LONG_POSITIONS)
    caption = _caption(140)
    n_ids = len(tokenizer("A photo depicts " + caption)["input_ids"])
    assert 77 < n_ids <= LONG_POSITIONS  # start + 3 prompt tokens + 140 words + end = 145
    image = torch.nn.functional.normalize(torch.randn(16, generator=torch.Generator().manual_seed(1)), dim=0)
    scorer = capeval.CLIPScore(model=str(folder), progress=False)
    got = scorer([caption], image_embeds=image[None])["scores"][0]
    full = _raw_clip_s(model, tokenizer, image, "A photo depicts " + caption, LONG_POSITIONS)
    cut = _raw_clip_s(model, tokenizer, image, "A photo depicts " + caption, 77)
    assert got == pytest.approx(full, abs=1e-5)
    assert abs(full - cut) > 1e-4  # the tokens past 77 change the score: they were read


def test_the_truncation_warning_counts_against_the_models_own_limit(tmp_path):
    long_folder, _, _ = _clip_folder(tmp_path, LONG_POSITIONS)
    short_folder, _, _ = _clip_folder(tmp_path, 77)
    image = torch.nn.functional.normalize(torch.ones(1, 16), dim=1)
    with pytest.warns(TruncationWarning, match=r"^1 caption\(s\) longer than 248 tokens were truncated"):
        capeval.CLIPScore(model=str(long_folder), progress=False)([_caption(300)], image_embeds=image)
    with pytest.warns(TruncationWarning, match=r"^1 caption\(s\) longer than 77 tokens were truncated"):
        capeval.CLIPScore(model=str(short_folder), progress=False)([_caption(140)], image_embeds=image)


def test_emscore_token_embeddings_cover_a_long_caption(tmp_path):
    folder, model, tokenizer = _clip_folder(tmp_path, LONG_POSITIONS)
    caption = _caption(140)
    backbone = load_backbone(str(folder))
    pooled, tokens, ids = encode_text_tokens(backbone, [caption], prefix=None, progress=False)
    expected = tokenizer(caption)["input_ids"]
    assert list(ids[0]) == expected and len(expected) == 142  # every token, start and end included
    assert tokens[0].shape == (142, 16)
    np.testing.assert_allclose(tokens[0].norm(dim=-1).numpy(), 1.0, atol=1e-5)
