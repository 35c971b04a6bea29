"""The benchmark's pipelines compute the same per-sample scores (the speed comparison is at equal scores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from authors_reference import authors_refclip_s
from PIL import Image

import capeval
from capeval.clip.backbones import load_backbone
from capeval_dev.perf import pipelines
from capeval_dev.perf.models import mix_shared_component
from capeval_dev.perf.workload import CANDIDATES_PER_IMAGE, make_image_caption_workload


@pytest.fixture(scope="module")
def positive_clip(tmp_path_factory):
    from transformers import CLIPModel

    from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config

    torch.manual_seed(0)
    model = CLIPModel(tiny_clip_config(image_size=48, patch_size=16)).eval()
    mix_shared_component(model, seed=0)
    return str(save_clip_folder(model, build_clip_tokenizer(), tmp_path_factory.mktemp("positive-clip")))


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    return make_image_caption_workload(tmp_path_factory.mktemp("workload"), n_images=3, seed=1)


def test_workload_has_the_flickr8k_shape(workload):
    assert len(workload.image_paths) == 3
    assert len(workload.candidates) == round(CANDIDATES_PER_IMAGE * 3)
    assert all(len(r) == 5 for r in workload.references)
    assert sorted(set(workload.candidate_image)) == [0, 1, 2]


def test_mixed_random_clip_gives_positive_varied_cosines(positive_clip, workload):
    out = capeval.CLIPScore(model=positive_clip)(workload.candidates, images=workload.candidate_images)
    scores = np.asarray(out["scores"])
    assert (scores > 0).all()
    assert scores.std() > 1e-3


def test_authors_structure_and_capeval_agree_per_sample(positive_clip, workload):
    ours = pipelines.capeval_refclip(capeval.RefCLIPScore(model=positive_clip), workload)
    theirs = pipelines.authors_structure(load_backbone(positive_clip), workload)
    assert np.abs(ours - theirs).max() <= 1e-5


def test_both_pipelines_equal_the_independent_restatement_of_the_authors_code(positive_clip, workload):
    # tests/authors_reference.py restates jmhessel/clipscore and OpenAI's clip.py from raw CLIPModel calls (the
    # authors' tokenizer and prompt, PIL bicubic resizing), so capeval's pre-processing is checked, not reused.
    from transformers import CLIPModel

    raw = CLIPModel.from_pretrained(positive_clip).eval()
    images = [Image.open(path) for path in workload.candidate_images]
    reference = authors_refclip_s(raw, images, workload.candidates, workload.candidate_references)
    ours = pipelines.capeval_refclip(capeval.RefCLIPScore(model=positive_clip), workload)
    structure = pipelines.authors_structure(load_backbone(positive_clip), workload)
    assert np.ptp(reference) > 1e-3  # distinct values, not clipped zeros
    assert np.abs(ours - reference).max() <= 1e-5
    assert np.abs(structure - reference).max() <= 1e-5


def test_torchmetrics_clip_score_agrees_without_the_prompt(positive_clip, workload):
    ours = np.asarray(
        capeval.CLIPScore(model=positive_clip, prefix="")(
            workload.candidates, images=workload.candidate_images
        )["scores"]
    )
    theirs = pipelines.torchmetrics_clip(load_backbone(positive_clip), workload) * 2.5 / 100
    # transformers' image processor resizes with its own rounding, so pixels differ slightly from OpenAI's
    assert np.abs(ours - theirs).max() <= 5e-3


def test_bare_forward_runs_on_the_distinct_inputs(positive_clip, workload):
    bb = load_backbone(positive_clip)
    pixels, batches = pipelines.prepare_bare_inputs(bb, workload, batch_size=8)
    assert len(pixels) == 3
    n_texts = len(set(workload.candidates) | {r for refs in workload.references for r in refs})
    assert sum(len(ids) for ids, _ in batches) == n_texts
    widths = [ids.shape[1] for ids, _ in batches]
    assert widths == sorted(widths) and max(widths) < 77
    pipelines.bare_forward(bb, pixels, batches)
