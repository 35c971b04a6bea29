"""The stand-in accelerator of scripts/bench_pipeline.py: it keeps the host free and the pipelines run on it."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import capeval
from capeval.clip.image_encoding import encode_images
from capeval.clip.text_encoding import encode_texts
from capeval_dev.perf.simulated import SleepingCLIP, simulated_backbone


@pytest.fixture(scope="module")
def stand_in(tiny_clip_dir):
    return simulated_backbone(capeval.load_backbone(str(tiny_clip_dir), device="cpu"), 200.0, 2000.0)


def test_a_forward_pass_sleeps_rows_over_rate_seconds(stand_in, monkeypatch):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)  # a sleep holds no core: the host stays free
    out = stand_in.model.get_image_features(pixel_values=torch.zeros(20, 3, 8, 8, device="meta"))
    assert slept == [20 / 200.0]
    assert out.pooler_output.shape == (20, stand_in.embed_dim)
    stand_in.model.get_text_features(input_ids=torch.zeros(500, 7, dtype=torch.long, device="meta"))
    assert slept == [20 / 200.0, 500 / 2000.0]
    assert stand_in.device.type == "meta"


def test_the_encoders_run_on_the_stand_in_with_both_readers(stand_in):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (20, 24, 3), dtype=np.uint8) for _ in range(6)]
    for reader in ("threads", "processes"):
        emb = encode_images(stand_in, images, batch_size=2, num_workers=2, reader=reader)
        assert emb.shape == (6, stand_in.embed_dim)
        torch.testing.assert_close(emb.norm(dim=1), torch.ones(6))
    texts = [f"caption {i}" for i in range(1500)]  # two windows: the background tokenizer runs
    assert encode_texts(stand_in, texts, batch_size=256).shape == (1500, stand_in.embed_dim)


def test_rates_must_be_positive(stand_in):
    with pytest.raises(ValueError, match="rates must be > 0, got 0 images/s"):
        SleepingCLIP(stand_in.model.config, 0, 10)
