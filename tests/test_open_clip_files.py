"""OpenCLIP weights files as a base model=: open_clip's state-dict layout with its architecture
name and pretrained tag, or with open_clip's own open_clip_config.json beside it.

Independent references: the CLIP authors' clip/model.py ``build_model`` on the same state dict (open_clip's ViT
names are OpenAI's; QuickGELU, 64-wide heads; for GELU architectures its QuickGELU is swapped for torch's exact
GELU, which open_clip uses), fed open_clip's own inputs: its evaluation transform restated as the PIL calls it makes
(``capeval_dev.testing.open_clip_reference.open_clip_pixels``) and token ids from its own ``SimpleTokenizer`` (open_clip
3.3.0's ``tokenizer.py``, loaded by path); and the same weights saved as a transformers folder."""

from __future__ import annotations

import functools
import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import capeval
from capeval.clip.backbones import load_backbone
from capeval.clip.image_constants import OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD
from capeval.diagnostics.categories import TruncationWarning
from capeval.shapes import example_items
from capeval.shapes.tiny_clip import build_clip_tokenizer, save_clip_folder, tiny_clip_config
from capeval_dev.testing.open_clip_layout import open_clip_state_dict, write_open_clip_file

PREFIX = "A photo depicts"
OPENAI_PRE = {"mean": list(OPENAI_IMAGE_MEAN), "std": list(OPENAI_IMAGE_STD)}


@pytest.fixture(scope="module")
def world():
    items = list(example_items(5).values())
    return (
        [it["image"] for it in items],
        [it["candidate"] for it in items],
        [it["references"] for it in items],
    )


@functools.cache
def tiny_model(act: str = "quick_gelu", seed: int = 0):
    """A tiny CLIPModel whose heads are 64 wide (as the authors' build_model derives them), fp16-exact weights;
    built once per process and arguments: the tests read it and never change it."""
    from transformers import CLIPModel

    config = tiny_clip_config(
        hidden_size=128, heads=2, layers=2, image_size=32, patch_size=8, projection_dim=32
    )
    config.text_config.hidden_act = config.vision_config.hidden_act = act
    torch.manual_seed(seed)
    # The authors' build_model casts its weights to fp16 (convert_weights): values it can hold exactly keep the
    # two models on the same numbers.
    return CLIPModel(config).eval().half().float()


@functools.cache
def tokenizer():
    """The CLIP tokenizer written beside the weights, built once per process (only read)."""
    return build_clip_tokenizer()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """``tiny_model()`` written once as ``open_clip_pytorch_model.bin`` with its sidecar (OpenAI's mean and std) and
    the tokenizer's files; a test takes a copy of its own (``copy_of``)."""
    folder = tmp_path_factory.mktemp("open-clip-written") / "oc"
    return write_open_clip_file(tiny_model(), folder, preprocess_cfg=OPENAI_PRE, tokenizer=tokenizer())


def copy_of(written, tmp_path, sidecar: bool = True):
    """A copy of the ``written`` folder under ``tmp_path / "oc"`` (without ``open_clip_config.json`` unless
    ``sidecar``); the copy's weights file."""
    folder = shutil.copytree(written.parent, tmp_path / "oc")
    if not sidecar:
        (folder / "open_clip_config.json").unlink()
    return folder / written.name


def open_clip_tensor(images, size: int, resize_mode: str, mean=None, std=None) -> torch.Tensor:
    """open_clip's evaluation transform: its PIL steps, then ToTensor (/255) and Normalize, in float32."""
    from capeval_dev.testing.open_clip_reference import open_clip_pixels

    pixels = np.stack([open_clip_pixels(img, size, resize_mode) for img in images]).astype(np.float32) / 255
    m = np.asarray(mean or OPENAI_IMAGE_MEAN, dtype=np.float32)
    s = np.asarray(std or OPENAI_IMAGE_STD, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(((pixels - m) / s).transpose(0, 3, 1, 2)))


def reference_embeddings(
    state_dict, captions, images, act: str, monkeypatch, squash: bool = False, mean=None, std=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """L2-normalised image and caption embeddings of the authors' model built on the open_clip state dict (see
    the module docstring)."""
    from capeval_dev.testing.open_clip_reference import open_clip_tokenize
    from capeval_dev.testing.openai_reference import model_module

    module = model_module()
    if act == "gelu":
        monkeypatch.setattr(module, "QuickGELU", torch.nn.GELU)
    ref = module.build_model(dict(state_dict)).float().eval()  # it deletes keys and copies the values
    size = ref.visual.input_resolution
    pixels = open_clip_tensor(images, size, "squash" if squash else "shortest", mean, std)
    ids = open_clip_tokenize([f"{PREFIX} {c}" for c in captions])
    tokens = torch.zeros(len(ids), 77, dtype=torch.long)
    for row, x in enumerate(ids):
        tokens[row, : len(x)] = torch.tensor(x)
    with torch.no_grad():
        return F.normalize(ref.encode_image(pixels), dim=-1), F.normalize(ref.encode_text(tokens), dim=-1)


def reference_clip_s(state_dict, captions, images, act: str, monkeypatch, **preprocessing) -> list[float]:
    """CLIP-S from the authors' model built on the open_clip state dict."""
    image, text = reference_embeddings(state_dict, captions, images, act, monkeypatch, **preprocessing)
    return (2.5 * (image * text).sum(dim=-1).clamp(min=0)).tolist()


@pytest.mark.parametrize(
    ("act", "filename"),
    [("quick_gelu", "open_clip_pytorch_model.bin"), ("gelu", "open_clip_model.safetensors")],
)
def test_sidecar_file_scores_equal_the_authors_model(tmp_path, world, act, filename, monkeypatch):
    images, captions, _ = world
    model = tiny_model(act)
    path = write_open_clip_file(model, tmp_path / "oc", filename, OPENAI_PRE, tokenizer=tokenizer())
    out = capeval.CLIPScore(model=str(path))(captions, images=images)
    reference = reference_clip_s(open_clip_state_dict(model), captions, images, act, monkeypatch)
    assert out["scores"] == pytest.approx(reference, abs=1e-5)
    assert out["signature"].split("|")[1].startswith("model=open_clip:oc@sha256:")


def test_every_metric_equals_the_same_weights_as_a_transformers_folder(tmp_path, world, written):
    images, captions, references = world
    path = copy_of(written, tmp_path)
    folder = save_clip_folder(tiny_model(), tokenizer(), tmp_path / "hf")
    capeval.clip.backbones.write_preprocessor_config(folder, 32, OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD)
    for metric, args in (
        (capeval.CLIPScore, (captions,)),
        (capeval.RefCLIPScore, (captions, references)),
    ):
        a = metric(model=str(path))(*args, images=images)
        b = metric(model=str(folder))(*args, images=images)
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-6)
    em_a = capeval.EMScore(model=str(path))(captions, references)
    em_b = capeval.EMScore(model=str(folder))(captions, references)
    assert em_a["scores"] == pytest.approx(em_b["scores"], abs=1e-6)


def test_squash_and_inception_preprocessing_follow_the_config(tmp_path, world, monkeypatch):
    images, captions, _ = world
    model = tiny_model()
    pre = {
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
        "resize_mode": "squash",
        "interpolation": "bicubic",
    }
    path = write_open_clip_file(model, tmp_path / "oc", preprocess_cfg=pre, tokenizer=tokenizer())
    out = capeval.CLIPScore(model=str(path))(captions, images=images)
    reference = reference_clip_s(
        open_clip_state_dict(model), captions, images, "quick_gelu", monkeypatch, squash=True,
        mean=[0.5] * 3, std=[0.5] * 3,
    )  # fmt: skip
    assert out["scores"] == pytest.approx(reference, abs=1e-5)
    assert "image_mean=0.5,0.5,0.5" in out["signature"]
    assert "|image_resize=exact:32x32,rgb:after_resize|" in out["signature"]


def test_the_sidecar_is_part_of_the_revision(tmp_path, written):
    path = copy_of(written, tmp_path)
    first = load_backbone(str(path)).name
    config = json.loads((tmp_path / "oc" / "open_clip_config.json").read_text())
    config["model_cfg"]["quick_gelu"] = False
    (tmp_path / "oc" / "open_clip_config.json").write_text(json.dumps(config))
    second = load_backbone(str(path))
    assert second.name != first
    assert second.model.config.text_config.hidden_act == "gelu"


# --- open_clip's transform order and tokenizer, whatever the tag ---


def mode_images() -> dict[str, Image.Image]:
    """One 61x47 picture in each mode an image arrives in; in the transparent ones, colours under alpha 0 (the top
    20 rows) that compositing onto white would hide."""
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (47, 61, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (47, 61, 1), dtype=np.uint8)
    alpha[:20] = 0
    rgba = Image.fromarray(np.concatenate([rgb, alpha], axis=-1), "RGBA")
    palette = Image.fromarray(rgb).quantize(64)
    transparent_index = palette.copy()
    transparent_index.info["transparency"] = 3
    return {
        "RGBA": rgba,
        "LA": rgba.convert("LA"),
        "PA": rgba.convert("PA"),
        "P": palette,
        "P with a transparent index": transparent_index,
        "1": rgba.convert("1"),
        "L": rgba.convert("L"),
        "I;16": rgba.convert("L").convert("I;16"),
        "RGB": Image.fromarray(rgb),
    }


SPECIAL_TEXT_CAPTIONS = [
    "a cat <|endoftext|> on a mat",
    "a cat <end_of_text> on a mat",
    "A <START_OF_TEXT> red circle",
    "x..<|endoftext|>y and <|startoftext|>",
    "&lt;end_of_text&gt; on the left",
    "a plain caption",
    "a blue square " + "<end_of_text> " * 80,
    "a green triangle",
    "“<end_of_text>” quoted",
]


@pytest.fixture(scope="module")
def open_clip_files(tmp_path_factory):
    """The tiny model as OpenCLIP files with a sidecar, one per resize mode, and its open_clip state dict."""
    model = tiny_model()
    root = tmp_path_factory.mktemp("open-clip-modes")
    paths = {
        mode: write_open_clip_file(
            model,
            root / mode,
            preprocess_cfg={**OPENAI_PRE, "resize_mode": mode},
            tokenizer=tokenizer(),
        )
        for mode in ("shortest", "squash")
    }
    return paths, open_clip_state_dict(model)


@pytest.mark.parametrize("resize_mode", ["shortest", "squash"])
def test_every_image_mode_gets_the_pixels_of_open_clips_transform(open_clip_files, resize_mode):
    from capeval.clip.images import preprocess_image
    from capeval_dev.testing.open_clip_reference import open_clip_pixels

    backbone = load_backbone(str(open_clip_files[0][resize_mode]))
    for name, img in mode_images().items():
        ours = preprocess_image(img, 0, backbone.image_size)
        assert np.array_equal(ours, open_clip_pixels(img, 32, resize_mode)), name


def test_squash_drops_alpha_where_transformers_families_composite_it_onto_white(open_clip_files):
    from capeval.clip.image_geometry import ProcessorGeometry
    from capeval.clip.images import preprocess_image
    from capeval_dev.testing.open_clip_reference import open_clip_pixels

    squash = load_backbone(str(open_clip_files[0]["squash"])).image_size
    family = ProcessorGeometry(32, ("exact", 32, 32), None, 3)  # a SigLIP-style processor: RGB first
    clear_black = Image.new("RGBA", (61, 47), (0, 0, 0, 0))
    assert preprocess_image(clear_black, 0, squash).max() == 0  # open_clip: convert("RGB") keeps the colours
    assert preprocess_image(clear_black, 0, family).min() == 255  # transformers: composited onto white
    # The order the squash tags had before: transparent and palette images many levels off open_clip's pixels.
    gaps = {
        name: int(np.abs(family.apply(img).astype(int) - open_clip_pixels(img, 32, "squash")).max())
        for name, img in mode_images().items()
    }
    assert min(gaps["RGBA"], gaps["P"], gaps["P with a transparent index"], gaps["1"]) > 100
    assert gaps["RGB"] == gaps["L"] == 0


def test_rgb_after_resize_is_only_open_clips_squash_and_part_of_the_geometrys_identity():
    import pickle

    from capeval.clip.image_geometry import ProcessorGeometry

    squash = ProcessorGeometry(32, ("exact", 32, 32), None, 3, rgb_after_resize=True)
    family = ProcessorGeometry(32, ("exact", 32, 32), None, 3)
    assert squash != family and len({squash, family}) == 2  # never share prepared pixels in one corpus run
    assert pickle.loads(pickle.dumps(squash)) == squash  # worker processes keep the order
    assert (squash.describe(), family.describe()) == ("exact:32x32,rgb:after_resize", "exact:32x32")
    with pytest.raises(ValueError, match="rgb_after_resize is open_clip's 'squash' order"):
        ProcessorGeometry(32, ("shortest_edge", 32), (32, 32), 3, rgb_after_resize=True)
    with pytest.raises(ValueError, match="an exact resize without a crop"):
        ProcessorGeometry(32, ("exact", 40, 40), (32, 32), 3, rgb_after_resize=True)


@pytest.mark.parametrize("resize_mode", ["shortest", "squash"])
def test_embeddings_of_odd_images_and_special_token_captions_equal_open_clips_inputs_on_the_authors_model(
    open_clip_files, resize_mode
):
    from capeval.clip.image_encoding import encode_images
    from capeval.clip.text_encoding import encode_texts
    from capeval_dev.testing.open_clip_reference import open_clip_tokenize
    from capeval_dev.testing.openai_reference import model_module

    paths, state_dict = open_clip_files
    backbone = load_backbone(str(paths[resize_mode]))
    images = list(mode_images().values())
    ref = model_module().build_model({k: v.clone() for k, v in state_dict.items()}).float().eval()
    ids = open_clip_tokenize([f"{PREFIX} {c}" for c in SPECIAL_TEXT_CAPTIONS])
    tokens = torch.zeros(len(ids), 77, dtype=torch.long)
    for row, x in enumerate(ids):
        tokens[row, : len(x)] = torch.tensor(x)
    with torch.no_grad():
        want_images = F.normalize(ref.encode_image(open_clip_tensor(images, 32, resize_mode)), dim=-1)
        want_texts = F.normalize(ref.encode_text(tokens), dim=-1)
    got_images = encode_images(backbone, images)
    with pytest.warns(TruncationWarning, match="1 caption"):  # the 80 <end_of_text> are 80 ids
        got_texts = encode_texts(backbone, SPECIAL_TEXT_CAPTIONS, prefix=PREFIX)
    assert (got_images - want_images).abs().max().item() < 1e-5
    assert (got_texts - want_texts).abs().max().item() < 1e-5


def test_special_token_text_is_read_as_open_clip_reads_it_only_for_open_clip_files(tmp_path, open_clip_files):
    from capeval.clip.families import tokenize_texts
    from capeval.clip.text_encoding import encode_texts
    from capeval_dev.testing.open_clip_reference import open_clip_tokenize
    from capeval_dev.testing.openai_reference import openai_tokenize

    file_backbone = load_backbone(str(open_clip_files[0]["shortest"]))
    folder = save_clip_folder(tiny_model(), tokenizer(), tmp_path / "hf")
    capeval.clip.backbones.write_preprocessor_config(folder, 32, OPENAI_IMAGE_MEAN, OPENAI_IMAGE_STD)
    folder_backbone = load_backbone(str(folder))
    # Not the over-long caption. "x..<|endoftext|>y" is punctuation and letters in both readings (OpenAI's pattern
    # takes "..<|" first), though transformers' CLIP tokenizer alone would match the special token there.
    captions = [c for c in SPECIAL_TEXT_CAPTIONS if not c.startswith("a blue square")]
    assert tokenize_texts(file_backbone, captions)[0] == open_clip_tokenize(captions)
    assert tokenize_texts(folder_backbone, captions)[0] == openai_tokenize(captions)
    a = encode_texts(file_backbone, captions, prefix=PREFIX)
    b = encode_texts(folder_backbone, captions, prefix=PREFIX)
    gaps = (a - b).abs().amax(dim=1)
    plain = [captions.index("a plain caption"), captions.index("a green triangle")]
    assert gaps[plain].max().item() < 1e-6 and gaps.max().item() > 1e-2
    # Stored scores of the two readings are keyed apart: the file's signature names it as an OpenCLIP file, and,
    # as every CLIP's, the tokenisation revision that reads a word-final capital sigma as open_clip does.
    signature = capeval.CLIPScore(model=str(open_clip_files[0]["shortest"])).signature
    assert "|model=open_clip:" in signature and "|tokenization=2|" in signature


# --- One file named under two architectures or tags ---


def _tiny_tables(monkeypatch):
    """Architectures and tags of the tiny test model in open_clip's tables: with and without QuickGELU, and a
    tag that squashes instead of cropping."""
    from dataclasses import replace

    from capeval.clip.open_clip_tables import ARCHITECTURES, PRETRAINED, OpenClipArchitecture, PretrainedTag

    tiny = OpenClipArchitecture(
        embed_dim=32, image_size=32, patch_size=8, vision_width=128, vision_layers=2, vision_head_width=64,
        text_width=128, text_heads=2, text_layers=2,
    )  # fmt: skip
    monkeypatch.setitem(ARCHITECTURES, "Tiny-32", tiny)
    monkeypatch.setitem(ARCHITECTURES, "Tiny-32-quickgelu", replace(tiny, quick_gelu=True))
    monkeypatch.setitem(PRETRAINED, ("Tiny-32", "openai"), PretrainedTag(quick_gelu=True))
    monkeypatch.setitem(PRETRAINED, ("Tiny-32", "laion"), PretrainedTag())
    monkeypatch.setitem(PRETRAINED, ("Tiny-32", "squashed"), PretrainedTag(resize_mode="squash"))


def test_one_file_named_under_two_architectures_is_two_models_with_two_signatures(
    tmp_path, world, monkeypatch
):
    from capeval.clip.backbones import clear_cache

    _tiny_tables(monkeypatch)
    images, captions, _ = world
    path = write_open_clip_file(tiny_model("gelu"), tmp_path / "oc", tokenizer=tokenizer())
    quick, plain = f"open_clip:Tiny-32-quickgelu/openai:{path}", f"open_clip:Tiny-32/laion:{path}"
    a = capeval.CLIPScore(model=quick)(captions, images=images)
    b = capeval.CLIPScore(model=plain)(captions, images=images)
    assert load_backbone(quick).model.config.text_config.hidden_act == "quick_gelu"
    assert load_backbone(plain).model.config.text_config.hidden_act == "gelu"
    assert a["signature"].split("|")[1].startswith("model=open_clip:Tiny-32-quickgelu/openai@sha256:")
    assert b["signature"].split("|")[1].startswith("model=open_clip:Tiny-32/laion@sha256:")
    assert max(abs(x - y) for x, y in zip(a["scores"], b["scores"], strict=True)) > 1e-4
    clear_cache()
    assert capeval.CLIPScore(model=plain)(captions, images=images) == b  # what a fresh process would give


def test_one_file_named_under_two_tags_gets_each_tags_preprocessing(tmp_path, world, monkeypatch):
    _tiny_tables(monkeypatch)
    images, captions, _ = world
    path = write_open_clip_file(tiny_model("gelu"), tmp_path / "oc", tokenizer=tokenizer())
    crop = capeval.CLIPScore(model=f"open_clip:Tiny-32/laion:{path}")(captions, images=images)
    squash = capeval.CLIPScore(model=f"open_clip:Tiny-32/squashed:{path}")(captions, images=images)
    assert "|image_resize=exact:32x32,rgb:after_resize|" in squash["signature"]
    assert "image_resize" not in crop["signature"]
    assert squash["scores"] != crop["scores"]


def test_tokenizer_files_beside_the_weights_are_part_of_the_revision(tmp_path, written):
    path = copy_of(written, tmp_path)
    first = load_backbone(str(path))
    tokenizer_config = tmp_path / "oc" / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    settings["model_max_length"] = 16
    tokenizer_config.write_text(json.dumps(settings))
    second = load_backbone(str(path))
    assert second is not first and second.name != first.name


def test_named_architecture_must_fit_the_file(tmp_path, written):
    path = copy_of(written, tmp_path, sidecar=False)
    with pytest.raises(
        ValueError, match=r"not ViT-B-32/laion2b_s34b_b79k's ViT-B/32 .*differences .*vision_width 128 vs 768"
    ):
        load_backbone(f"open_clip:ViT-B-32/laion2b_s34b_b79k:{path}")


def test_names_tags_and_activations_are_checked(tmp_path, written):
    path = copy_of(written, tmp_path, sidecar=False)
    with pytest.raises(ValueError, match="unknown OpenCLIP architecture 'ViT-X-99'.*ViT-B-32, "):
        load_backbone(f"open_clip:ViT-X-99/openai:{path}")
    with pytest.raises(ValueError, match="no pretrained tag 'laion5b' for ViT-B-32 .*laion2b_s34b_b79k"):
        load_backbone(f"open_clip:ViT-B-32/laion5b:{path}")
    with pytest.raises(
        ValueError, match="trained with QuickGELU.*name it open_clip:ViT-B-32-quickgelu/openai"
    ):
        load_backbone(f"open_clip:ViT-B-32/openai:{path}")
    with pytest.raises(ValueError, match="tags of ViT-L-14 differ.*laion2b_s32b_b82k"):
        load_backbone(f"open_clip:ViT-L-14:{path}")
    with pytest.raises(ValueError, match="'open_clip:ARCH/TAG:/path/to/weights'"):
        load_backbone("open_clip:ViT-B-32")
    with pytest.raises(FileNotFoundError, match="no weights file"):
        load_backbone(f"open_clip:ViT-B-32/openai:{tmp_path / 'absent.bin'}")


def test_a_bare_file_needs_its_config_and_a_config_must_fit_clipmodel(tmp_path, written):
    path = copy_of(written, tmp_path, sidecar=False)
    with pytest.raises(ValueError, match="without open_clip's open_clip_config.json beside it"):
        load_backbone(str(path))
    from capeval.clip.backbones import model_unavailable

    assert "open_clip_config.json" in model_unavailable(str(path))
    config = {
        "model_cfg": {"embed_dim": 32, "vision_cfg": {"layers": 2, "attentional_pool": True}, "text_cfg": {}}
    }
    (tmp_path / "oc" / "open_clip_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"model_cfg sets \['vision_cfg.attentional_pool'\]"):
        load_backbone(str(path))
    config["model_cfg"]["vision_cfg"] = {"layers": [3, 4, 6, 3], "width": 64}
    (tmp_path / "oc" / "open_clip_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="a ResNet tower is not a ViT"):
        load_backbone(str(path))


def _sidecar_file(written, tmp_path, edit=None, preprocess_cfg=None):
    """A tiny OpenCLIP file with its sidecar, ``edit(model_cfg)`` applied and ``preprocess_cfg`` replaced."""
    path = copy_of(written, tmp_path)
    sidecar = tmp_path / "oc" / "open_clip_config.json"
    config = json.loads(sidecar.read_text())
    if edit is not None:
        edit(config["model_cfg"])
    if preprocess_cfg is not None:
        config["preprocess_cfg"] = preprocess_cfg
    sidecar.write_text(json.dumps(config))
    return path, sidecar


# --- Sidecars with impossible shapes ---


def _set(part: str, key: str, value):
    return lambda cfg: cfg[part].__setitem__(key, value)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_set("text_cfg", "heads", 0), r"model_cfg\.text_cfg\.heads must be a positive integer, got 0"),
        (_set("text_cfg", "heads", -2), r"model_cfg\.text_cfg\.heads must be a positive integer, got -2"),
        (_set("text_cfg", "heads", 3), r"model_cfg\.text_cfg\.width 128 is not divisible by heads 3"),
        (_set("vision_cfg", "head_width", 0), r"model_cfg\.vision_cfg\.head_width must be a positive integer, got 0"),
        (_set("vision_cfg", "head_width", -64), r"model_cfg\.vision_cfg\.head_width must be a positive integer"),
        (_set("vision_cfg", "head_width", 5), r"model_cfg\.vision_cfg\.width 128 is not divisible by its 25 heads"),
        (_set("vision_cfg", "head_width", 256), r"model_cfg\.vision_cfg\.head_width 256 is wider than width 128"),
        (_set("vision_cfg", "layers", 0), r"model_cfg\.vision_cfg\.layers must be a positive integer, got 0"),
        (_set("text_cfg", "width", 128.5), r"model_cfg\.text_cfg\.width must be a positive integer, got 128\.5"),
        (lambda cfg: cfg.__setitem__("embed_dim", True), r"model_cfg\.embed_dim must be a positive integer"),
    ],
    ids=["zero text heads", "negative text heads", "text heads not dividing the width", "zero head width",
         "negative head width", "vision heads not dividing the width", "head wider than the tower",
         "zero layers", "fractional width", "boolean embed_dim"],
)  # fmt: skip
def test_a_sidecar_with_impossible_heads_or_sizes_is_refused_naming_the_file_and_the_field(
    tmp_path, written, edit, match
):
    path, sidecar = _sidecar_file(written, tmp_path, edit)
    with pytest.raises(ValueError, match=match) as err:
        capeval.CLIPScore(model=str(path))
    assert str(sidecar) in str(err.value)


# --- Sidecar normalisation outside what pixels allow ---


@pytest.mark.parametrize(
    ("pre", "field"),
    [
        ({"mean": [float("nan")] * 3, "std": [0.5] * 3}, "mean"),
        ({"mean": [0.5] * 3, "std": [float("inf")] * 3}, "std"),
        ({"mean": [1e30] * 3, "std": [0.5] * 3}, "mean"),
        ({"mean": [0.5] * 3, "std": [1e30] * 3}, "std"),
        ({"mean": [0.5] * 3, "std": [0.5, 0.0, 0.5]}, "std"),
        ({"mean": [0.5] * 3, "std": [-0.5] * 3}, "std"),
        ({"mean": [0.5] * 3, "std": [1e-30] * 3}, "std"),
    ],
    ids=["nan mean", "inf std", "huge mean", "huge std", "zero std", "negative std", "tiny std"],
)
def test_a_sidecar_mean_or_std_that_is_not_finite_or_absurd_is_refused_as_a_preprocessor_file_is(
    tmp_path, written, pre, field
):
    path, sidecar = _sidecar_file(written, tmp_path, preprocess_cfg=pre)
    bounds = r"\[-10, 10\]" if field == "mean" else r"\[0\.001, 10\]"
    with pytest.raises(
        ValueError, match=rf"preprocess_cfg\.{field} must be three finite numbers in {bounds}, got"
    ):
        capeval.CLIPScore(model=str(path))
    with pytest.raises(ValueError, match=str(sidecar)):
        capeval.CLIPScore(model=str(path))


# --- Weights files that are not plain state dicts ---


def test_a_weights_file_missing_or_adding_tensors_is_refused_naming_the_file_and_the_tensors(
    tmp_path, written
):
    model = tiny_model()
    path, _ = _sidecar_file(written, tmp_path)
    full = open_clip_state_dict(model)
    cases = [
        ({k: v for k, v in full.items() if k != "ln_final.weight"}, r"lacks tensors \['ln_final\.weight'\]"),
        (
            {k: v for k, v in full.items() if k != "transformer.resblocks.1.ln_2.bias"},
            r"lacks 1 tensor\(s\) of its own architecture: \['transformer\.resblocks\.1\.ln_2\.bias'\]",
        ),
        (
            {k: v for k, v in full.items() if k != "visual.transformer.resblocks.0.mlp.c_fc.weight"},
            r"lacks tensors \['visual\.transformer\.resblocks\.0\.mlp\.c_fc\.weight'\]",
        ),
        ({**full, "visual.ls_1.gamma": torch.ones(128)}, r"has 1 unexpected tensor\(s\).*\['visual\.ls_1\.gamma'\]"),
    ]  # fmt: skip
    for sd, match in cases:
        torch.save(sd, path)
        with pytest.raises(ValueError, match=rf"weights file {path} {match}"):
            capeval.CLIPScore(model=str(path))


def test_a_weights_file_with_pickled_objects_beyond_tensors_is_refused_not_called_corrupt(tmp_path, written):
    model = tiny_model()
    path, _ = _sidecar_file(written, tmp_path)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    for payload in (
        {"state_dict": open_clip_state_dict(model), "optimizer": optimiser},
        torch.nn.Linear(2, 2),
    ):
        torch.save(payload, path)
        with pytest.raises(
            ValueError, match=rf"{path} holds pickled Python objects beyond tensors \(.*torch\.(optim|nn)\."
        ) as err:
            capeval.CLIPScore(model=str(path))
        message = str(err.value)
        assert (
            "refused (weights_only)" in message and "open_clip saves its weights as a state dict" in message
        )
        assert "truncated" not in message and "PAC-S" not in message


def test_missing_tokenizer_is_refused_naming_the_files(tmp_path, monkeypatch):
    import capeval.clip.openai_weights as ow

    monkeypatch.setattr(ow, "TOKENIZER_SOURCE", "capeval-tests/absent-tokenizer")
    path = write_open_clip_file(tiny_model(), tmp_path / "oc", preprocess_cfg=OPENAI_PRE)
    with pytest.raises(
        ValueError, match="no tokenizer: put OpenAI's CLIP tokenizer files .*vocab.json and merges.txt"
    ):
        load_backbone(str(path))


def test_evaluate_module_takes_the_spec(tmp_path, world, repo_root, written):
    import evaluate

    images, captions, _ = world
    path = copy_of(written, tmp_path)
    expected = capeval.CLIPScore(model=str(path))(captions, images=images)
    module = evaluate.load(str(repo_root / "metrics" / "clipscore"), model=str(path))
    out = module.compute(predictions=captions, images=images)
    assert out["scores"] == pytest.approx(expected["scores"], abs=1e-6)
    assert out["signature"] == expected["signature"]


@pytest.mark.slow
def test_a_real_architecture_by_name_and_tag(tmp_path, world, monkeypatch):
    # ViT-B-32 at its real size (random weights, fp16 on disk), named as open_clip names it: GELU, OpenAI's
    # constants (laion2b_s34b_b79k), shorter side to 224 and a centre crop.
    from safetensors.torch import load_file
    from transformers import CLIPModel

    from capeval.clip.image_encoding import encode_images
    from capeval.clip.text_encoding import encode_texts
    from capeval.shapes.tiny_clip import vit_b32_config

    images, captions, _ = world
    config = vit_b32_config()
    config.text_config.hidden_act = config.vision_config.hidden_act = "gelu"
    torch.manual_seed(1)
    model = CLIPModel(config).eval().half()  # fp16 on disk, as the authors' build_model holds it
    path = write_open_clip_file(model, tmp_path / "b32", "open_clip_model.safetensors", tokenizer=tokenizer())
    spec = f"open_clip:ViT-B-32/laion2b_s34b_b79k:{path}"
    backbone = load_backbone(spec)
    assert backbone.origin == "open_clip:ViT-B-32/laion2b_s34b_b79k"
    # Embeddings, not CLIP-S: the random model's cosines are negative, and their clipped scores all 0.
    got_images = encode_images(backbone, images[:2])
    got_texts = encode_texts(backbone, captions[:2], prefix=PREFIX)
    # The authors' model on the tensors the file holds, as open_clip reads them back.
    want_images, want_texts = reference_embeddings(
        load_file(str(path)), captions[:2], images[:2], "gelu", monkeypatch
    )
    assert (got_images - want_images).abs().max().item() < 1e-5
    assert (got_texts - want_texts).abs().max().item() < 1e-5
    signature = capeval.CLIPScore(model=spec).signature
    assert signature.split("|")[1].startswith("model=open_clip:ViT-B-32/laion2b_s34b_b79k@sha256:")


def test_the_tag_table_agrees_with_the_origin_table():
    # Two readings of open_clip's pretrained.py: the origins of Hub conversions (image_constants) and the tags here.
    from capeval.clip.image_constants import OPEN_CLIP_PRETRAINED
    from capeval.clip.open_clip_tables import ARCHITECTURES, PRETRAINED, tags_of

    for (arch, tag), (mean, std) in OPEN_CLIP_PRETRAINED.items():
        assert (PRETRAINED[(arch, tag)].mean, PRETRAINED[(arch, tag)].std) == (mean, std), (arch, tag)
    assert tags_of("ViT-B-32-quickgelu") == tags_of("ViT-B-32")
    assert ARCHITECTURES["ViT-H-14"].vision_heads == 16  # width 1280, head_width 80 (not 1280 // 64 = 20)
    assert PRETRAINED[("ViT-H-14", "dfn5b")].resize_mode == "squash"
    assert {arch for arch, _ in PRETRAINED} <= set(ARCHITECTURES)
