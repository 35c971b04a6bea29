"""Many metrics x many systems on the same images (``capeval.score_systems``): each system's scores equal the
metric called alone, the images are encoded once per run, the n-gram baselines report pycocoevalcap's own corpus
scores, and what cannot run is refused by name before any model loads."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from coco_files import REF_CLIP_S_SCORES, write_images

import capeval
import capeval.clipscore
from capeval.scoring.systems import score_systems

SYSTEMS = {
    "good": ["a red square", "a blue circle on the left", "two green triangles", "a yellow star at the top"],
    "bad": ["a cat", "a red square", "a house by the sea", "a yellow star"],
    "third": ["red", "a circle", "triangles that are green", "a star shining at the top of the picture"],
}
REFS = [
    ["a red square in the middle", "one red square"],
    ["a blue circle", "a circle that is blue on the left side"],
    ["two green triangles", "a pair of green triangles"],
    ["a yellow star at the top", "a star, yellow, near the top"],
]
java = pytest.mark.skipif(shutil.which("java") is None, reason="pycocoevalcap needs Java")


@pytest.fixture()
def images(tmp_path):
    return [str(p) for p in write_images(tmp_path, [f"im{i}.png" for i in range(4)])]


def test_each_system_scores_as_the_metric_alone_and_images_are_encoded_once(
    images, tiny_clip_dir, monkeypatch
):
    encoded = []
    real = capeval.clipscore.encode_images

    def counting(backbone, imgs, **kwargs):
        encoded.append(len(imgs))
        return real(backbone, imgs, **kwargs)

    monkeypatch.setattr(capeval.clipscore, "encode_images", counting)
    result = capeval.score_systems(
        SYSTEMS,
        images=images,
        references=REFS,
        metrics=["clipscore", "refclipscore"],
        model=str(tiny_clip_dir),
        ids=["a", "b", "c", "d"],
    )
    # Three systems x two image metrics of one backbone: one pass over the four images.
    assert encoded == [4]
    monkeypatch.setattr(capeval.clipscore, "encode_images", real)
    for name, captions in SYSTEMS.items():
        alone = capeval.RefCLIPScore(model=str(tiny_clip_dir))(captions, references=REFS, images=images)
        assert result.per_item[name]["refclipscore"] == pytest.approx(alone["scores"], abs=1e-6)
        assert result.per_item[name]["clipscore"] == pytest.approx(alone[REF_CLIP_S_SCORES], abs=1e-6)
        assert result.corpus[name]["refclipscore"] == pytest.approx(alone["refclipscore"], abs=1e-6)
    assert result.signatures["refclipscore"] == alone["signature"]
    assert result.signatures["clipscore"].startswith("clipscore|")
    assert result.per_instance("bad")["b"]["CLIPScore"] == result.per_item["bad"]["clipscore"][1]


def test_text_metrics_equal_their_own_calls_per_system(tiny_clip_dir):
    result = score_systems(SYSTEMS, references=REFS, metrics=["text"])  # the group: wembsim, wmd
    assert result.metrics == ["wembsim", "wmd"]  # the declarations' order
    for name, captions in SYSTEMS.items():
        wmd = capeval.WMD()(captions, references=REFS)
        assert result.per_item[name]["wmd"] == pytest.approx(wmd["scores"], abs=1e-9)
        assert result.corpus[name]["wmd"] == pytest.approx(float(np.mean(wmd["scores"])), abs=1e-9)
    assert result.signatures["wmd"] == wmd["signature"]


@java
def test_bleu_is_pycocoevalcaps_corpus_score_not_the_mean_and_cider_sees_one_system():
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    result = score_systems(SYSTEMS, references=REFS, metrics=["bleu4", "cider"])
    for name, captions in SYSTEMS.items():
        # What COCOEvalCap.evaluate does: PTB-tokenise both sides, then each scorer's compute_score.
        tok = PTBTokenizer()
        gts = tok.tokenize({i: [{"caption": r} for r in refs] for i, refs in enumerate(REFS)})
        res = tok.tokenize({i: [{"caption": c}] for i, c in enumerate(captions)})
        bleu, bleu_per = Bleu(4).compute_score(gts, res, verbose=0)
        cider, cider_per = Cider().compute_score(gts, res)
        assert result.corpus[name]["bleu4"] == pytest.approx(bleu[3], abs=1e-12)
        assert result.per_item[name]["bleu4"] == pytest.approx(bleu_per[3], abs=1e-12)
        # CIDEr's IDF comes from one system's call: three systems in one call would count each reference thrice.
        assert result.corpus[name]["cider"] == pytest.approx(cider, abs=1e-12)
        assert result.per_item[name]["cider"] == pytest.approx(list(cider_per), abs=1e-12)
    assert result.corpus["good"]["bleu4"] != pytest.approx(
        np.mean(result.per_item["good"]["bleu4"]), abs=1e-3
    )
    assert result.corpus_is_mean == {"bleu4": False, "cider": True}


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        (["pacscore"], r"cannot run pacscore: PAC-S needs the authors' weights"),
        (["bleu5"], r"unknown metric 'bleu5'"),
        (["clipscore", "wmd"], r"wmd need\(s\) references; none were given"),
    ],
)
def test_what_cannot_run_is_refused_by_name_before_any_model_loads(images, tmp_path, metrics, message):
    # The model folder does not exist: a refusal naming the metric proves nothing was loaded first.
    with pytest.raises(ValueError, match=message):
        score_systems(SYSTEMS, images=images, metrics=metrics, model=str(tmp_path / "no-model"))


def test_a_bad_caption_names_its_system_and_image(images, tmp_path):
    systems = {**SYSTEMS, "bad": ["a cat", "  ", "a house", "a star"]}
    with pytest.raises(ValueError, match=r"prediction 1 is an empty caption.*\(system 'bad', image id 'b'\)"):
        score_systems(systems, images=images, ids="abcd", model=str(tmp_path / "no-model"))


def test_systems_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match=r"system 'short' has 1 captions, 'good' has 4"):
        score_systems({"good": SYSTEMS["good"], "short": ["a"]}, references=REFS, metrics=["wmd"])


def test_a_caption_two_systems_share_scores_exactly_the_same_so_paired_ties_are_exact(images, tiny_clip_dir):
    # The candidates of every system go through one text-encoder call, where a repeated string is encoded once:
    # d_i = 0 exactly, as an exact permutation test needs (separate runs differ by float noise of batch shapes).
    systems = {"a": SYSTEMS["good"], "b": [SYSTEMS["good"][0], *SYSTEMS["bad"][1:]]}
    result = score_systems(
        systems,
        images=images,
        references=REFS,
        metrics=["clipscore", "refclipscore"],
        model=str(tiny_clip_dir),
    )
    for key in ("clipscore", "refclipscore"):
        assert result.per_item["a"][key][0] == result.per_item["b"][key][0]
        assert result.per_item["a"][key][1] != result.per_item["b"][key][1]


# --- The inputs, checked before any metric ---


def test_the_systems_are_checked_for_equal_lengths_ids_and_captions_first():
    from capeval.scoring.systems import _checked_inputs

    inputs = _checked_inputs({"a": ["x", "y"], "b": ["z", "w"]}, None, [["r"], ["s"]], ["i0", "i1"])
    assert inputs.names == ["a", "b"] and inputs.n == 2 and inputs.references == [["r"], ["s"]]
    with pytest.raises(ValueError, match="system 'b' has 1 captions, 'a' has 2"):
        _checked_inputs({"a": ["x", "y"], "b": ["z"]}, None, None, None)
    with pytest.raises(ValueError, match="got 3 ids for 2 captions"):
        _checked_inputs({"a": ["x", "y"]}, None, None, [1, 2, 3])
    with pytest.raises(ValueError, match="got 1 images for 2 captions"):
        _checked_inputs({"a": ["x", "y"]}, ["one.png"], None, None)
    with pytest.raises(ValueError, match="no systems to score"):
        _checked_inputs({}, None, None, None)
