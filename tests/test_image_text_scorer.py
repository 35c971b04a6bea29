"""The seam between image-text metrics and the engines: CLIP-S and RefCLIP-S are ImageTextScorers (PAC-S:
tests/test_pacscore.py); metrics that do not score in the two halves are not."""

from __future__ import annotations

import pytest

import capeval
from capeval.clip.image_text_scorer import ImageTextScorer


@pytest.mark.parametrize("name", ["clipscore", "refclipscore"])
def test_the_clip_metrics_are_image_text_scorers(name, tiny_clip_dir):
    scorer = capeval.registry.build_scorer(name, model=str(tiny_clip_dir), device="cpu")
    assert isinstance(scorer, ImageTextScorer)


def test_emscore_which_scores_frames_is_not_one(tiny_clip_dir):
    assert not isinstance(capeval.EMScore(model=str(tiny_clip_dir), device="cpu"), ImageTextScorer)


def test_an_object_lacking_the_scoring_half_is_not_one():
    class EncodesOnly:
        name, backbone, prefix, batch_size, signature = "toy", None, "", 1, "toy"

        def checked_inputs(self, predictions, references=None):
            return list(predictions), None

        def image_embeddings(self, images, image_embeds, n):
            return image_embeds

        def caption_and_reference_embeddings(self, predictions, references, encode_texts=None):
            return None, None

    assert not isinstance(EncodesOnly(), ImageTextScorer)
