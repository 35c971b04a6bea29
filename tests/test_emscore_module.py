"""The emscore evaluate module: optional references, add/add_batch, and agreement with capeval.EMScore."""

from __future__ import annotations

import evaluate
import numpy as np
import pytest

import capeval
from capeval.emscore import EMScore

CANDS = ["a red square", "a green square", "a blue square"]
REFS = [["a red box"], ["green", "a green square"], ["a blue box"]]


@pytest.fixture(scope="module")
def module(repo_root):
    return evaluate.load(str(repo_root / "metrics" / "emscore"))


@pytest.fixture(scope="module")
def clips():
    frames = []
    for color in ((220, 40, 40), (40, 200, 60), (40, 60, 220)):
        clip = []
        for i in range(4):
            a = np.full((32, 32, 3), 240, np.uint8)
            a[8:20, 2 + 3 * i : 14 + 3 * i] = color
            clip.append(a)
        frames.append(clip)
    return frames


def test_module_without_references_scores_videos_only(module, tiny_clip_dir, clips):
    got = module.compute(predictions=CANDS, videos=clips, model=str(tiny_clip_dir), device="cpu")
    direct = EMScore(model=str(tiny_clip_dir), device="cpu")(CANDS, videos=clips)
    assert got["variant"] == "EMScore(X,V)"
    assert got["scores"] == pytest.approx(direct["scores"], abs=1e-6)
    assert got["signature"] == direct["signature"]


def test_module_with_references_only_and_with_both(module, tiny_clip_dir, clips):
    text = module.compute(predictions=CANDS, references=REFS, model=str(tiny_clip_dir), device="cpu")
    assert text["variant"] == "EMScore(X,X*)"
    both = module.compute(
        predictions=CANDS, references=REFS, videos=clips, model=str(tiny_clip_dir), device="cpu"
    )
    direct = EMScore(model=str(tiny_clip_dir), device="cpu")(CANDS, REFS, clips)
    assert both["variant"] == "EMScore(X,V,X*)"
    for name in direct["details"]:
        for key, values in direct["details"][name].items():
            assert both["details"][name][key] == pytest.approx(values, abs=1e-6)


def test_add_and_add_batch_work_with_and_without_references(module, tiny_clip_dir, clips):
    module.add_batch(predictions=CANDS[:2], videos=clips[:2])
    module.add(prediction=CANDS[2], videos=clips[2])
    videos_only = module.compute(model=str(tiny_clip_dir), device="cpu", num_frames=2)
    module.add_batch(predictions=CANDS[:2], references=REFS[:2])
    module.add(prediction=CANDS[2], reference=REFS[2])
    text = module.compute(model=str(tiny_clip_dir), device="cpu")
    direct = EMScore(model=str(tiny_clip_dir), device="cpu", num_frames=2)
    assert videos_only["scores"] == pytest.approx(direct(CANDS, videos=clips)["scores"], abs=1e-6)
    assert text["scores"] == pytest.approx(direct(CANDS, references=REFS)["scores"], abs=1e-6)


def test_module_options_reach_the_scorer(module, tiny_clip_dir, clips):
    base = module.compute(predictions=CANDS, references=REFS, model=str(tiny_clip_dir), device="cpu")
    flat = module.compute(
        predictions=CANDS, references=REFS, model=str(tiny_clip_dir), device="cpu", idf=False
    )
    assert "idf=false" in flat["signature"] and "idf=references" in base["signature"]
    assert flat["scores"] != pytest.approx(base["scores"])


def test_module_errors_name_the_problem(module, tiny_clip_dir):
    with pytest.raises(ValueError, match="needs videos="):
        module.compute(predictions=CANDS, model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(ValueError, match="references 1 is an empty list while"):
        module.compute(predictions=CANDS[:2], references=[["x"], []], model=str(tiny_clip_dir), device="cpu")


def test_packaged_loader_finds_the_module():
    assert capeval.module_path("emscore").name == "emscore"
    assert isinstance(capeval.load("emscore"), evaluate.Metric)
