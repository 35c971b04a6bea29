"""One seam between metrics and engines: encode, then score from the embeddings.

The image-text metrics expose their encoding half (``image_embeddings``, ``text_embeddings``,
``caption_and_reference_embeddings``, EMScore's ``frame_embeddings``), their input checks (``checked_inputs``)
and their scoring half (``score_embeddings``, EMScore's ``score_frames``). A call is exactly the two halves in
turn, so an engine that encodes by its own means (a cache, several processes, one encoding shared by several
metrics) gets the metric's own numbers; and no engine copies a scorer or replaces its methods.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from capeval.corpus.distributed import SingleProcess, score_sharded

PACKAGE = Path(capeval.__file__).resolve().parent
CAPTIONS = ["a dark square", "a light square", "a dark square"]
REFERENCES = [["a black picture", "a dark square"], ["a white picture"], ["a grey picture"]]


@pytest.fixture(scope="module")
def images():
    return [Image.fromarray(np.full((24, 24, 3), level, dtype=np.uint8)) for level in (20, 230, 20)]


@pytest.fixture(scope="module")
def scorers(tiny_clip_dir):
    model = {"model": str(tiny_clip_dir), "device": "cpu"}
    return {
        "clipscore": capeval.CLIPScore(**model),
        "refclipscore": capeval.RefCLIPScore(**model),
        "pacscore": capeval.PACScore(checkpoint=str(tiny_clip_dir), device="cpu"),
    }


# --- A call is the encoding half, then the scoring half ---


@pytest.mark.parametrize(("name", "references"), [("clipscore", None), ("refclipscore", REFERENCES),
                                                  ("pacscore", None), ("pacscore", REFERENCES)])  # fmt: skip
def test_scoring_the_embeddings_equals_the_call_item_by_item(scorers, images, name, references):
    scorer = scorers[name]
    predictions, references = scorer.checked_inputs(CAPTIONS, references)
    image_emb = scorer.image_embeddings(images, None, len(images))
    text_emb, reference_emb = scorer.caption_and_reference_embeddings(predictions, references)
    halves = scorer.score_embeddings(image_emb, text_emb, reference_emb)
    call = (
        scorer(CAPTIONS, references=references, images=images)
        if references
        else scorer(CAPTIONS, images=images)
    )
    assert halves == call


def test_reference_embeddings_come_per_prediction_from_one_text_pass(scorers):
    scorer = scorers["refclipscore"]
    seen = []

    def encode(texts):
        seen.append(list(texts))
        return scorer.text_embeddings(texts)

    text_emb, reference_emb = scorer.caption_and_reference_embeddings(CAPTIONS, REFERENCES, encode)
    assert len(seen) == 1 and seen[0] == CAPTIONS + [r for refs in REFERENCES for r in refs]
    assert text_emb.shape[0] == 3 and [len(r) for r in reference_emb] == [2, 1, 1]
    torch.testing.assert_close(
        reference_emb[0][1], text_emb[0]
    )  # "a dark square" is caption 0 and a reference


def test_scoring_a_reference_metric_without_reference_embeddings_is_refused(scorers, images):
    scorer = scorers["refclipscore"]
    image_emb = scorer.image_embeddings(images, None, 3)
    with pytest.raises(
        ValueError, match="refclipscore needs the reference embeddings of each of the 3 captions"
    ):
        scorer.score_embeddings(image_emb, scorer.text_embeddings(CAPTIONS))


def test_the_checks_are_the_metrics_own(scorers):
    with pytest.raises(ValueError, match="refclipscore needs references"):
        scorers["refclipscore"].checked_inputs(CAPTIONS)
    with pytest.raises(ValueError, match="no predictions to score"):
        scorers["clipscore"].checked_inputs([])
    assert scorers["pacscore"].checked_inputs(CAPTIONS) == (CAPTIONS, None)


def test_emscore_scores_given_frames_as_it_scores_decoded_videos(tiny_clip_dir, tmp_path):
    from capeval.clip.video import write_video

    frames = [np.full((24, 24, 3), 40 * i, dtype=np.uint8) for i in range(4)]
    video = str(write_video(tmp_path / "v.mp4", frames, fps=2))
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu", num_frames=3)
    predictions, references = scorer.checked_inputs(["a dark clip"], [["a dark video"]])
    embedded = scorer.frame_embeddings([video], None, 1)
    halves = scorer.score_frames(predictions, references, embedded, decoded=True)
    assert halves == scorer(["a dark clip"], references=[["a dark video"]], videos=[video])


# --- Engines encode by their own means and call the scoring half ---


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore"])
def test_the_sharded_engine_in_one_process_equals_the_call(scorers, images, name):
    scorer = scorers[name]
    refs = REFERENCES if name != "clipscore" else None
    call = scorer(CAPTIONS, references=refs, images=images) if refs else scorer(CAPTIONS, images=images)
    assert score_sharded(scorer, CAPTIONS, SingleProcess(), references=refs, images=images) == call


def test_no_engine_copies_a_scorer_or_replaces_its_methods():
    # The seam above is how engines reach the maths: an attribute assignment to an encoding method, or a
    # copy.copy of a scorer, would be a second path whose numbers can drift.
    methods = {"image_embeddings", "text_embeddings", "frame_embeddings", "score_embeddings", "score_frames"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in methods:
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "copy.copy":
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} copy.copy")
    assert offenders == []
