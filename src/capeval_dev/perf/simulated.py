"""A stand-in accelerator: checks that the encoding pipelines overlap their stages on any machine.

On a GPU the host hands a batch over and is free while the device computes. Here a forward pass sleeps for a
fixed time per row (releasing the GIL, using no core) on a backbone placed on PyTorch's ``meta`` device, where
transfers and the pixel normalisation cost the host nothing, as they do on a GPU. Reading, decoding and
tokenising are the real code on the real cores. Setting the stand-in's speed equal to the reader's measured
speed is the hardest case: stages that run one after the other reach half of the slower limit, stages that
overlap reach nearly all of it.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling

from capeval.clip.backbones import Backbone


class SleepingCLIP(torch.nn.Module):
    """Answers ``get_image_features`` / ``get_text_features`` after ``rows / rate`` seconds, host idle.

    Args:
        config: the real model's config (``projection_dim`` sizes the outputs).
        images_per_s: simulated image-tower throughput.
        captions_per_s: simulated text-tower throughput.
    """

    def __init__(self, config, images_per_s: float, captions_per_s: float) -> None:
        super().__init__()
        if images_per_s <= 0 or captions_per_s <= 0:
            raise ValueError(f"rates must be > 0, got {images_per_s} images/s, {captions_per_s} captions/s")
        self.config = config
        self.images_per_s, self.captions_per_s = images_per_s, captions_per_s

    def _answer(self, rows: int, rate: float) -> BaseModelOutputWithPooling:
        time.sleep(rows / rate)
        return BaseModelOutputWithPooling(pooler_output=torch.ones(rows, self.config.projection_dim))

    def get_image_features(self, pixel_values: torch.Tensor, **_) -> BaseModelOutputWithPooling:
        return self._answer(pixel_values.shape[0], self.images_per_s)

    def get_text_features(self, input_ids: torch.Tensor, **_) -> BaseModelOutputWithPooling:
        return self._answer(input_ids.shape[0], self.captions_per_s)


def simulated_backbone(backbone: Backbone, images_per_s: float, captions_per_s: float) -> Backbone:
    """``backbone`` with its model replaced by a ``SleepingCLIP`` on the ``meta`` device (tokenizer kept)."""
    model = SleepingCLIP(backbone.model.config, images_per_s, captions_per_s)
    return dataclasses.replace(backbone, model=model, device=torch.device("meta"), lock=threading.Lock())
