"""The plain image-caption cosine (``capeval.scores.raw_cosine``): what LAION's and DataComp's thresholds apply to."""

from __future__ import annotations

import pytest
import torch

from capeval.scores import clip_s, raw_cosine


def test_raw_cosine_is_the_dot_product_of_unit_vectors_computed_by_hand():
    image = torch.tensor([[0.6, 0.8, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    text = torch.tensor([[1.0, 0.0, 0.0], [-0.6, 0.8, 0.0], [0.0, 0.0, 1.0]])
    # 0.6 * 1 + 0.8 * 0 = 0.6; 1 * -0.6 = -0.6; 1 * 1 = 1
    assert raw_cosine(image, text).tolist() == pytest.approx([0.6, -0.6, 1.0], abs=1e-7)


def test_raw_cosine_keeps_negative_cosines_that_clip_s_clips_at_zero():
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = torch.tensor([[-1.0, 0.0], [0.0, 1.0]])
    assert raw_cosine(image, text).tolist() == [-1.0, 1.0]
    assert clip_s(image, text, w=1.0).tolist() == [0.0, 1.0]


def test_clip_s_is_w_times_the_raw_cosine_clipped_at_zero_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    image = torch.nn.functional.normalize(torch.randn(64, 512, generator=gen), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(64, 512, generator=gen), dim=-1)
    cos = raw_cosine(image, text)
    assert (cos < 0).any() and (cos > 0).any()
    assert torch.equal(clip_s(image, text, w=2.5), 2.5 * cos.clamp(min=0))
    assert torch.equal(cos, (image * text).sum(dim=-1))


def test_raw_cosine_returns_float32_from_half_precision_embeddings():
    image = torch.tensor([[0.6, 0.8]], dtype=torch.float16)
    text = torch.tensor([[0.8, 0.6]], dtype=torch.bfloat16)
    out = raw_cosine(image, text)
    assert out.dtype == torch.float32
    assert out.shape == (1,)
    assert out.item() == pytest.approx(0.96, abs=2e-3)  # 0.6 * 0.8 + 0.8 * 0.6 in half precision


def test_raw_cosine_refuses_embeddings_of_different_shapes():
    with pytest.raises(ValueError, match=r"image embeddings \(2, 4\) and text embeddings \(3, 4\) differ"):
        raw_cosine(torch.zeros(2, 4), torch.zeros(3, 4))
