"""Image mean/std: decided by the weights' origin (open_clip's table) or the model's preprocessor config, never assumed."""

from __future__ import annotations

import json
import shutil
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import torch
from authors_reference import MEAN, STD, authors_pixels, authors_text_features
from PIL import Image

import capeval
from capeval.clip.backbones import clear_cache, load_backbone
from capeval.clip.checkpoints.convert import save_model_folder
from capeval.clip.image_constants import (
    INCEPTION_IMAGE_MEAN,
    OPENAI_IMAGE_MEAN,
    OPENAI_IMAGE_STD,
    known_origin,
    open_clip_origin,
)

LAION_L14 = "laion/CLIP-ViT-L-14-laion2B-s32B-b82K"  # the PAC-S ViT-L/14 base
HALF = [0.5, 0.5, 0.5]

pytestmark = pytest.mark.usefixtures("fresh_backbones")  # no backbone loaded by another test is reused


def _copy(tiny_clip_dir: Path, folder: Path, mean=None, std=None, provenance: dict | None = None) -> Path:
    """The tiny CLIP with the given preprocessor constants (``None``: no preprocessor_config.json at all)."""
    shutil.copytree(tiny_clip_dir, folder)
    pre = folder / "preprocessor_config.json"
    if mean is None:
        pre.unlink()
    else:
        cfg = json.loads(pre.read_text())
        cfg.update(image_mean=mean, image_std=std)
        pre.write_text(json.dumps(cfg))
    if provenance is not None:
        (folder / "pacscore.json").write_text(json.dumps(provenance))
    return folder


def _image() -> Image.Image:
    return Image.fromarray(np.random.default_rng(3).integers(0, 256, (40, 52, 3), dtype=np.uint8))


def test_folder_without_constants_or_known_origin_is_refused_naming_the_folder_and_what_to_add(
    tiny_clip_dir, tmp_path
):
    folder = _copy(tiny_clip_dir, tmp_path / "bare")
    with pytest.raises(ValueError, match=r"no preprocessor_config.json in .* and no known origin") as err:
        load_backbone(str(folder), device="cpu")
    message = str(err.value)
    assert str(folder) in message
    assert "write_preprocessor_config" in message and '"origin"' in message and LAION_L14 in message
    # An origin that is named but not in the table does not decide either: it is named back.
    named = _copy(tiny_clip_dir, tmp_path / "named", provenance={"base_model": "someone/clip@abc1234"})
    with pytest.raises(ValueError, match=r"it names 'someone/clip@abc1234', not one capeval knows"):
        load_backbone(str(named), device="cpu")


def test_preprocessor_config_decides_for_an_unknown_origin_and_the_pixels_use_it(tiny_clip_dir, tmp_path):
    from transformers import CLIPModel

    folder = _copy(tiny_clip_dir, tmp_path / "half", HALF, HALF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: the file is the only source
        scorer = capeval.CLIPScore(model=str(folder), device="cpu")
    assert scorer.backbone.image_mean == scorer.backbone.image_std == (0.5, 0.5, 0.5)
    assert scorer.backbone.origin is None
    # Independent: the authors' OpenAI-normalised pixels turned back into [0, 1], then (x - 0.5) / 0.5.
    model = CLIPModel.from_pretrained(folder).eval()
    raw = (
        authors_pixels(_image(), 32) * torch.from_numpy(STD)[:, None, None]
        + torch.from_numpy(MEAN)[:, None, None]
    )
    with torch.no_grad():
        img = model.get_image_features(pixel_values=((raw - 0.5) / 0.5)[None]).pooler_output.double().numpy()
    img /= np.linalg.norm(img)
    txt = authors_text_features(model, ["a red square"])
    expected = 2.5 * max(float(img[0] @ txt[0]), 0.0)
    assert scorer(["a red square"], images=[_image()])["scores"][0] == pytest.approx(expected, abs=1e-5)


def test_a_known_origin_overrides_a_disagreeing_preprocessor_config_with_a_warning_naming_both(
    tiny_clip_dir, tmp_path
):
    # A conversion's preprocessor file saying OpenAI's constants for the LAION ViT-L/14, whose open_clip entry
    # (src/open_clip/pretrained.py, _VITL14 laion2b_s32b_b82k) says INCEPTION_MEAN/STD = 0.5.
    folder = _copy(
        tiny_clip_dir,
        tmp_path / "laion",
        list(OPENAI_IMAGE_MEAN),
        list(OPENAI_IMAGE_STD),
        {"base_model": LAION_L14},
    )
    with pytest.warns(UserWarning, match=rf"says image_mean=0.48145466,.*but {LAION_L14} was trained with "
                      r"image_mean=0.5,0.5,0.5, image_std=0.5,0.5,0.5 \(open_clip's pretrained table\)"):  # fmt: skip
        backbone = load_backbone(str(folder), device="cpu")
    assert backbone.image_mean == backbone.image_std == INCEPTION_IMAGE_MEAN
    assert backbone.origin == LAION_L14


def test_a_known_origin_decides_without_any_preprocessor_config(tiny_clip_dir, tmp_path):
    recorded = _copy(
        tiny_clip_dir, tmp_path / "recorded", provenance={"origin": "open_clip:ViT-L-14/laion2b_s32b_b82k"}
    )
    # A Hub cache snapshot names its repo in its path (huggingface_hub: models--org--name/snapshots/<commit>).
    snapshot = tmp_path / "hub" / "models--laion--CLIP-ViT-L-14-laion2B-s32B-b82K" / "snapshots" / "0123abc"
    snapshot.parent.mkdir(parents=True)
    _copy(tiny_clip_dir, snapshot)
    openai = _copy(
        tiny_clip_dir, tmp_path / "openai", provenance={"base_model": "openai/clip-vit-base-patch32@3d74acf"}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        half_a = load_backbone(str(recorded), device="cpu")
        half_b = load_backbone(str(snapshot), device="cpu")
        plain = load_backbone(str(openai), device="cpu")
    assert half_a.image_mean == half_b.image_mean == (0.5, 0.5, 0.5)
    assert (half_a.origin, half_b.origin) == ("open_clip:ViT-L-14/laion2b_s32b_b82k", LAION_L14)
    assert (plain.image_mean, plain.image_std, plain.origin) == (
        OPENAI_IMAGE_MEAN,
        OPENAI_IMAGE_STD,
        "openai/clip-vit-base-patch32",
    )


def test_openai_normalised_signatures_name_no_image_constants_and_others_name_theirs(tiny_clip_dir, tmp_path):
    versions = (
        f"capeval={capeval.__version__}|transformers={version('transformers')}|torch={version('torch')}"
    )
    tokens = "tokenization=2"
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    assert scorer.signature == (
        f"clipscore|model={scorer.backbone.name}|{tokens}|prefix=A photo depicts|w=2.5|dtype=float32|{versions}"
    )
    ref = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu")
    assert ref.signature == (
        f"refclipscore|model={ref.backbone.name}|{tokens}|prefix=A photo depicts|w=2.5|dtype=float32"
        f"|clip_reference_cosine=False|{versions}"
    )
    half = capeval.CLIPScore(model=str(_copy(tiny_clip_dir, tmp_path / "half", HALF, HALF)), device="cpu")
    assert half.signature == (
        f"clipscore|model={half.backbone.name}|image_mean=0.5,0.5,0.5|image_std=0.5,0.5,0.5"
        f"|{tokens}|prefix=A photo depicts|w=2.5|dtype=float32|{versions}"
    )


def test_a_converted_folder_records_its_origin_and_the_origins_constants(tiny_clip_dir, tmp_path):
    source = _copy(
        tiny_clip_dir,
        tmp_path / "laion",
        list(OPENAI_IMAGE_MEAN),
        list(OPENAI_IMAGE_STD),
        {"base_model": LAION_L14},
    )
    with pytest.warns(UserWarning, match="using the latter"):
        backbone = load_backbone(str(source), device="cpu")
    out = save_model_folder(backbone.model, backbone, tmp_path / "converted", {"source": "test"})
    written = json.loads((out / "preprocessor_config.json").read_text())
    assert written["image_mean"] == written["image_std"] == HALF
    assert json.loads((out / "pacscore.json").read_text()) == {"origin": LAION_L14, "source": "test"}
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # file and table now agree
        again = load_backbone(str(out), device="cpu")
    assert (again.image_mean, again.origin) == ((0.5, 0.5, 0.5), LAION_L14)
    pacs = capeval.PACScore(checkpoint=str(out), device="cpu")
    assert "|image_mean=0.5,0.5,0.5|image_std=0.5,0.5,0.5|tokenization=" in pacs.signature


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda cfg: cfg.pop("image_std"), r"preprocessor_config.json has no image_std"),
        (
            lambda cfg: cfg.update(image_std=[0.5, 0.0, 0.5]),
            r"image_std must be three finite numbers in \[0\.001, 10\], got \[0\.5, 0\.0, 0\.5\]",
        ),
        (
            lambda cfg: cfg.update(image_mean=[0.5, 0.5]),
            r"image_mean must be three finite numbers in \[-10, 10\], got \[0.5, 0.5\]",
        ),
        (
            lambda cfg: cfg.update(image_mean=[1e30] * 3),
            r"image_mean must be three finite numbers in \[-10, 10\]",
        ),
        (
            lambda cfg: cfg.update(image_std=[1e30] * 3),
            r"image_std must be three finite numbers in \[0\.001, 10\]",
        ),
    ],
)
def test_unusable_constants_are_refused_naming_the_file_and_the_key(tiny_clip_dir, tmp_path, edit, match):
    folder = _copy(tiny_clip_dir, tmp_path / "bad", HALF, HALF)
    cfg = json.loads((folder / "preprocessor_config.json").read_text())
    edit(cfg)
    (folder / "preprocessor_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=match) as err:
        load_backbone(str(folder), device="cpu")
    assert str(folder) in str(err.value)


def test_unreadable_json_is_refused_and_do_normalize_false_means_mean_0_std_1(tiny_clip_dir, tmp_path):
    broken = _copy(tiny_clip_dir, tmp_path / "broken", HALF, HALF)
    (broken / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"preprocessor_config.json is not readable JSON"):
        load_backbone(str(broken), device="cpu")
    raw = _copy(tiny_clip_dir, tmp_path / "raw", HALF, HALF)
    cfg = json.loads((raw / "preprocessor_config.json").read_text())
    cfg["do_normalize"] = False  # transformers' CLIPImageProcessor then feeds pixels in [0, 1] as they are
    (raw / "preprocessor_config.json").write_text(json.dumps(cfg))
    backbone = load_backbone(str(raw), device="cpu")
    assert (backbone.image_mean, backbone.image_std) == ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))


def test_the_origin_table_follows_open_clips_pretrained_configuration():
    # open_clip src/open_clip/pretrained.py: _pcfg defaults to OPENAI_DATASET_MEAN/STD; only _VITL14's
    # laion2b_s32b_b82k among these sets mean=INCEPTION_MEAN, std=INCEPTION_STD (constants.py: 0.5 each).
    half = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    openai = (OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD)
    assert known_origin(LAION_L14)[1:] == half
    assert known_origin(LAION_L14.lower() + "@0123abc") == (
        LAION_L14,
        *half,
    )  # Hub ids: any case, any revision
    assert known_origin(open_clip_origin("ViT-L-14", "laion2b_s32b_b82k"))[1:] == half
    assert known_origin("openai/clip-vit-large-patch14")[1:] == openai
    assert known_origin("laion/CLIP-ViT-B-32-laion2B-s34B-b79K")[1:] == openai
    assert known_origin("open_clip:ViT-L-14/openai")[1:] == openai
    assert known_origin("open_clip:ViT-L-14/no-such-tag") is None
    assert known_origin("someone/clip") is None


def test_a_hub_model_is_known_by_its_id(tiny_clip_dir, tmp_path, monkeypatch):
    from huggingface_hub import constants

    # A Hub cache holding the LAION ViT-L/14 repo (tiny weights), its preprocessor file saying OpenAI's constants.
    commit = "0123456789" * 4
    repo = tmp_path / "hub" / "models--laion--CLIP-ViT-L-14-laion2B-s32B-b82K"
    (repo / "snapshots").mkdir(parents=True)
    _copy(tiny_clip_dir, repo / "snapshots" / commit, list(OPENAI_IMAGE_MEAN), list(OPENAI_IMAGE_STD))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.warns(UserWarning, match=rf"model '{LAION_L14}': .* but {LAION_L14} was trained with"):
        scorer = capeval.CLIPScore(model=LAION_L14, device="cpu")
    assert scorer.backbone.image_mean == (0.5, 0.5, 0.5) and scorer.backbone.origin == LAION_L14
    assert (
        f"clipscore|model={LAION_L14}@0123456|image_mean=0.5,0.5,0.5|image_std=0.5,0.5,0.5|"
        in scorer.signature
    )


# --- Normalisation outside what pixels allow, wherever it is stated ---


def test_an_image_processor_with_absurd_constants_is_refused_by_the_same_check_as_files():
    from transformers import CLIPImageProcessorPil

    from capeval.clip.backbones import load_backbone
    from capeval.shapes.tiny_clip import build_tiny_clip

    model, tokenizer = build_tiny_clip(seed=7)
    size = model.config.vision_config.image_size
    geometry = {"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size}}
    for key, value, bounds in (("image_std", 1e30, r"\[0\.001, 10\]"), ("image_mean", 1e30, r"\[-10, 10\]")):
        processor = CLIPImageProcessorPil(**geometry, **{key: [value] * 3})
        with pytest.raises(
            ValueError,
            match=rf"its image processor: {key} \(as applied to \[0, 1\] pixels\) must be three finite numbers in "
            rf"{bounds}",
        ):
            load_backbone((model, tokenizer, processor))


# --- A CLIP saved as transformers 5 saves it: image settings in processor_config.json ---


def _saved_two_ways(tmp_path: Path) -> tuple[Path, Path]:
    """One tiny CLIP (mean = std = 0.5) saved by transformers' own ``CLIPProcessor.save_pretrained`` then
    ``CLIPModel.save_pretrained`` (transformers 5: ``processor_config.json``, no ``preprocessor_config.json``), and
    the same weights saved the older way, with a ``preprocessor_config.json``."""
    from transformers import CLIPImageProcessor, CLIPModel, CLIPProcessor

    from capeval.clip.backbones import write_preprocessor_config
    from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config

    torch.manual_seed(11)
    model = CLIPModel(tiny_clip_config()).eval()
    size = model.config.vision_config.image_size
    images = CLIPImageProcessor(
        size={"shortest_edge": size},
        crop_size={"height": size, "width": size},
        image_mean=HALF,
        image_std=HALF,
    )
    new = tmp_path / "saved-by-transformers"
    CLIPProcessor(image_processor=images, tokenizer=build_clip_tokenizer()).save_pretrained(new)
    model.save_pretrained(new)
    old = save_clip_folder(model, build_clip_tokenizer(), tmp_path / "saved-the-older-way")
    write_preprocessor_config(old, size, HALF, HALF)
    return new, old


def _world():
    from capeval.shapes import example_items

    items = list(example_items(4).values())
    return [it["candidate"] for it in items], [it["image"] for it in items]


def test_a_clip_folder_saved_by_transformers_processor_and_model_scores_as_the_older_layout(tmp_path):
    new, old = _saved_two_ways(tmp_path)
    assert (new / "processor_config.json").is_file() and not (new / "preprocessor_config.json").exists()
    captions, images = _world()
    a = capeval.CLIPScore(model=str(new))(captions, images=images)
    b = capeval.CLIPScore(model=str(old))(captions, images=images)
    assert a["scores"] == pytest.approx(b["scores"], abs=1e-6)
    assert "|image_mean=0.5,0.5,0.5|image_std=0.5,0.5,0.5|" in a["signature"]


def test_a_hub_snapshot_saved_by_transformers_processor_and_model_reads_its_processor_config(
    tmp_path, monkeypatch
):
    from huggingface_hub import constants

    new, old = _saved_two_ways(tmp_path)
    commit = "0123456789" * 4
    repo = tmp_path / "hub" / "models--someone--tiny-clip"
    shutil.copytree(new, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    captions, images = _world()
    a = capeval.CLIPScore(model="someone/tiny-clip")(captions, images=images)
    b = capeval.CLIPScore(model=str(old))(captions, images=images)
    assert a["scores"] == pytest.approx(b["scores"], abs=1e-6)
    assert a["signature"].split("|")[1] == "model=someone/tiny-clip@0123456"


def test_a_pacs_folder_saved_by_transformers_processor_and_model_scores_as_the_older_layout(tmp_path):
    new, old = _saved_two_ways(tmp_path)
    captions, images = _world()
    a = capeval.PACScore(checkpoint=str(new))(captions, images=images)
    b = capeval.PACScore(checkpoint=str(old))(captions, images=images)
    assert a["scores"] == pytest.approx(b["scores"], abs=1e-6)
    # Converting it again (as scripts/convert_pacscore.py's save does) writes the settings the older way, unchanged.
    again = save_model_folder(load_backbone(str(new)).model, load_backbone(str(new)), tmp_path / "again", {})
    c = capeval.PACScore(checkpoint=str(again))(captions, images=images)
    assert c["scores"] == pytest.approx(b["scores"], abs=1e-6)
