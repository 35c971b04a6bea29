"""PAC-S / RefPAC-S: the authors' recipe on the authors' model, the module, converted folders and the script."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from authors_reference import authors_pixels, authors_tokens
from PIL import Image
from test_checkpoints import IMAGE, build_reference, save_pacs, target_config

import capeval
from capeval.clip.backbones import clear_cache
from capeval.clip.checkpoints.convert import convert_pacscore_checkpoint
from capeval.clip.checkpoints.layout import CheckpointWarning
from capeval.pacscore import PACScore
from capeval.shapes.tiny_clip import build_tiny_clip

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = ["a red square", "two dogs playing in the snow", "a bowl of soup on a table"]
REFERENCES = [["a red box", "a square"], ["dogs in snow"], ["soup", "a bowl on a table", "dinner"]]


@pytest.fixture(scope="module")
def reference():
    return build_reference(seed=11)


@pytest.fixture(scope="module")
def pacs_file(reference, tmp_path_factory) -> Path:
    return save_pacs(reference, tmp_path_factory.mktemp("pacs") / "clip_tiny.pth")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("target"), seed=5, config=target_config())


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        for h, w in [(40, 50), (32, 32), (70, 36)]
    ]


@pytest.fixture(autouse=True)
def _quiet_and_fresh():
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)  # random test encoders differ from the target's
        yield
    clear_cache()


def authors_pacs(ref, images, candidates, references=None, w=2.0):
    """evaluation/pac_score/pac_score.py restated on clip/model.py: PAC-S and RefPAC-S per candidate."""

    def unit(x):
        x = x.double().numpy()
        return x / np.sqrt(np.sum(x**2, axis=1, keepdims=True))

    with torch.no_grad():
        img = unit(ref.encode_image(torch.stack([authors_pixels(im, IMAGE) for im in images])))
        cand = unit(ref.encode_text(authors_tokens(candidates)))
        per = w * np.clip(np.sum(img * cand, axis=1), 0, None)
        if references is None:
            return per, None
        best = np.array(
            [np.max(unit(ref.encode_text(authors_tokens(r))) @ cand[i]) for i, r in enumerate(references)]
        )
    return per, 2 * per * best / (per + best)


def test_pacscore_without_checkpoint_says_where_to_get_the_weights():
    with pytest.raises(
        ValueError, match=r"drive.google.com.*aimagelab/pacscore.*convert_pacscore.py.*'org/name'"
    ):
        PACScore()


def test_pacscore_and_refpacscore_equal_the_authors_recipe_on_their_model(
    reference, pacs_file, target_dir, images
):
    # fp32 on the CPU: the exactness claim (on GPU, TF32 convolutions alone move the 4th digit)
    scorer = PACScore(checkpoint=str(pacs_file), model=str(target_dir), device="cpu")
    out = scorer(CANDIDATES, REFERENCES, images=images)
    per, ref = authors_pacs(reference, images, CANDIDATES, REFERENCES)
    assert out["scores"] == pytest.approx(per, abs=1e-5)
    assert out["refpacscore_scores"] == pytest.approx(ref, abs=1e-5)
    assert out["pacscore"] == pytest.approx(per.mean(), abs=1e-5)
    assert out["refpacscore"] == pytest.approx(ref.mean(), abs=1e-5)
    assert set(out) == {"pacscore", "scores", "refpacscore", "refpacscore_scores", "signature"}


def test_pac_s_is_an_image_text_scorer_composed_not_derived_from_refclip_s(pacs_file, target_dir):
    from capeval import RefCLIPScore
    from capeval.clip.image_text_scorer import ImageTextScorer

    scorer = PACScore(checkpoint=str(pacs_file), model=str(target_dir), device="cpu")
    assert isinstance(scorer, ImageTextScorer)
    assert not isinstance(scorer, RefCLIPScore)


def test_without_references_only_pac_s_is_returned(pacs_file, target_dir, images):
    scorer = PACScore(checkpoint=str(pacs_file), model=str(target_dir))
    out = scorer(CANDIDATES, images=images)
    assert set(out) == {"pacscore", "scores", "signature"}
    assert out["scores"] == scorer(CANDIDATES, REFERENCES, images=images)["scores"]


def test_signature_names_the_checkpoint_sha256_and_w_2(pacs_file, target_dir):
    digest = hashlib.sha256(pacs_file.read_bytes()).hexdigest()[:12]
    signature = PACScore(checkpoint=str(pacs_file), model=str(target_dir)).signature
    assert signature.startswith("pacscore|model=")
    assert (
        f"|checkpoint=clip_tiny@sha256:{digest}|tokenization=2|prefix=A photo depicts|w=2.0|dtype=float32|"
        in signature
    )


def test_pac_s_is_not_silently_clip_s_of_the_base_model(pacs_file, target_dir, images):
    pacs = PACScore(checkpoint=str(pacs_file), model=str(target_dir))(CANDIDATES, images=images)["scores"]
    base = capeval.CLIPScore(model=str(target_dir), w=2.0)(CANDIDATES, images=images)["scores"]
    assert not np.allclose(pacs, base, atol=1e-4)


def test_unknown_architecture_without_model_asks_for_one(pacs_file):
    with pytest.raises(
        ValueError, match=r"custom ViT .* no published PAC-S checkpoint has that shape.*pass model="
    ):
        PACScore(checkpoint=str(pacs_file))


def test_converted_folder_scores_exactly_like_the_pth(pacs_file, target_dir, images, tmp_path):
    folder = convert_pacscore_checkpoint(pacs_file, tmp_path / "converted", model=str(target_dir))
    provenance = json.loads((folder / "pacscore.json").read_text())
    assert provenance["source_sha256"] == hashlib.sha256(pacs_file.read_bytes()).hexdigest()
    assert provenance["source"] == "clip_tiny.pth"
    from_pth = PACScore(checkpoint=str(pacs_file), model=str(target_dir))(
        CANDIDATES, REFERENCES, images=images
    )
    converted = PACScore(checkpoint=str(folder))
    from_folder = converted(CANDIDATES, REFERENCES, images=images)
    assert from_folder["scores"] == from_pth["scores"]
    assert from_folder["refpacscore_scores"] == from_pth["refpacscore_scores"]
    assert "|checkpoint=converted@sha256:" in converted.signature


def test_hub_repo_checkpoint_loads_the_converted_model(pacs_file, target_dir, images, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    folder = convert_pacscore_checkpoint(pacs_file, tmp_path / "snapshot", model=str(target_dir))

    def hf_hub_download(repo_id, filename, **kwargs):
        if repo_id != "someone/pacs-tiny" or not (folder / filename).is_file():
            raise EntryNotFoundError(filename)
        return str(folder / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    scorer = PACScore(checkpoint="someone/pacs-tiny")
    want = PACScore(checkpoint=str(pacs_file), model=str(target_dir))(CANDIDATES, images=images)["scores"]
    assert scorer(CANDIDATES, images=images)["scores"] == want
    assert "|model=someone/pacs-tiny@sha256:" in scorer.signature


# ---------------------------------------------------------------------------------------------- module


def test_module_equals_the_plain_api_with_and_without_references(pacs_file, target_dir, images, monkeypatch):
    monkeypatch.chdir(REPO)
    module = capeval.load("pacscore")
    options = dict(images=images, checkpoint=str(pacs_file), model=str(target_dir))
    scorer = PACScore(checkpoint=str(pacs_file), model=str(target_dir))
    assert module.compute(predictions=CANDIDATES, **options) == scorer(CANDIDATES, images=images)
    assert module.compute(predictions=CANDIDATES, references=REFERENCES, **options) == scorer(
        CANDIDATES, REFERENCES, images=images
    )


def test_module_add_batch_with_and_without_references(pacs_file, target_dir, images):
    metric = capeval.load("pacscore", checkpoint=str(pacs_file), model=str(target_dir))
    metric.add_batch(predictions=CANDIDATES[:2], images=images[:2])
    metric.add(prediction=CANDIDATES[2], images=images[2])
    assert set(metric.compute()) == {"pacscore", "scores", "signature"}
    metric.add_batch(predictions=CANDIDATES[:2], references=REFERENCES[:2], images=images[:2])
    metric.add(prediction=CANDIDATES[2], reference=REFERENCES[2], images=images[2])
    assert set(metric.compute()) == {
        "pacscore",
        "scores",
        "refpacscore",
        "refpacscore_scores",
        "signature",
    }


def test_module_errors_name_the_problem(pacs_file, target_dir, images):
    metric = capeval.load("pacscore")
    with pytest.raises(ValueError, match="PAC-S needs its fine-tuned weights"):
        metric.compute(predictions=CANDIDATES, images=images)
    with pytest.raises(ValueError, match="references 1 is an empty list"):
        metric.compute(
            predictions=CANDIDATES,
            references=[["a"], [], ["b"]],
            images=images,
            checkpoint=str(pacs_file),
            model=str(target_dir),
        )


# ---------------------------------------------------------------------------------------------- script


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_convert_script_writes_a_folder_and_pushes_it(pacs_file, target_dir, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    uploads = []

    class FakeApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, **kwargs):
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, repo_id, folder_path, **kwargs):
            uploads.append((repo_id, sorted(p.name for p in Path(folder_path).iterdir())))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    out = tmp_path / "pacs-tiny"
    argv = [str(pacs_file), str(out), "--model", str(target_dir), "--push-to", "someone/pacs-tiny"]
    assert _script("convert_pacscore").main(argv) == 0
    assert "someone/pacs-tiny" in capsys.readouterr().out
    files = uploads[0][1]
    assert uploads[0][0] == "someone/pacs-tiny"
    for name in (
        "config.json",
        "model.safetensors",
        "pacscore.json",
        "README.md",
        "preprocessor_config.json",
    ):
        assert name in files
    assert not any(name.endswith((".pth", ".bin", ".pkl")) for name in files)
