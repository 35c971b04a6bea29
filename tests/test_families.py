"""Dual encoders beyond CLIPModel: each family scored as its own transformers processor and model calls score it.

Every family is a tiny random model built offline in the test (``capeval_dev.testing.tiny_families``) with the
family's tokenizer (WordPiece, SentencePiece or Unigram vocabularies made here) and processor files. The
reference is computed independently: ``AutoProcessor`` on the raw captions and images (SigLIP padded to
``max_length`` and given no attention mask, as it was trained), ``get_image_features``/``get_text_features``,
cosine, ``w * max(cos, 0)``.
"""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import capeval
from capeval.clip.backbones import load_backbone
from capeval.clip.families import FAMILIES, Family
from capeval.clip.image_geometry import ProcessorGeometry
from capeval.clip.text_encoding import encode_text_tokens
from capeval.clip.tokenization import PREFIX
from capeval.signature import parse_signature
from capeval_dev.testing.tiny_families import FAMILY_NAMES, build_tiny_family

W = 2.5  # Hessel et al. 2021, sec. 3
ENGLISH = [
    "a photo of a dog running on the beach",
    "two cats sitting on the grass",
    "a red square and a blue circle near a big triangle",
    "a man",
]
CHINESE = ["一只狗在草地上跑", "两个猫", "红色方形", "一只猫的照片"]


def _images() -> list[Image.Image]:
    """Non-square, tiny, grey and transparent images: every geometry and colour conversion step is exercised."""
    rng = np.random.default_rng(7)
    rgb = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(50, 71), (45, 33)]]
    grey = Image.fromarray(rng.integers(0, 256, (40, 40), dtype=np.uint8), mode="L")
    rgba = Image.fromarray(rng.integers(0, 256, (37, 52, 4), dtype=np.uint8), mode="RGBA")
    return rgb + [grey, rgba]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: build_tiny_family(name, root / name) for name in FAMILY_NAMES}


def _captions(name: str) -> list[str]:
    return CHINESE if name == "chinese_clip" else ENGLISH


def _reference_embeddings(folder, name: str, texts: list[str], images) -> tuple[torch.Tensor, torch.Tensor]:
    """(image, text) L2-normalised embeddings from the family's own processor and the raw feature calls."""
    from transformers import AutoModel, AutoProcessor
    from transformers.image_transforms import convert_to_rgb

    processor = AutoProcessor.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    # AlignProcessor pads to 64 by default; SigLIP must be padded to max_length (its docs); the others to the longest.
    padding = {"siglip": "max_length", "align": "max_length"}.get(name, True)
    if not processor.image_processor.do_convert_rgb:
        # EfficientNet's processor (ALIGN) does not convert: it fails on grey and RGBA images. capeval converts
        # every image as the processors that do convert (transformers' convert_to_rgb), done here beforehand.
        images = [Image.fromarray(convert_to_rgb(img, return_numpy=True)) for img in images]
    inputs = processor(text=texts, images=images, padding=padding, truncation=True, return_tensors="pt")
    with torch.no_grad():
        image = model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output
        masks = {} if name == "siglip" else {"attention_mask": inputs["attention_mask"]}
        text = model.get_text_features(input_ids=inputs["input_ids"], **masks).pooler_output
    return F.normalize(image, dim=-1), F.normalize(text, dim=-1)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_clip_s_of_each_family_equals_its_processor_and_raw_feature_calls(family_dirs, name):
    folder, captions, images = family_dirs[name], _captions(name), _images()
    scorer = capeval.CLIPScore(model=str(folder), device="cpu")
    family = FAMILIES[name]
    assert scorer.backbone.family is family and scorer.prefix == family.default_prefix
    prompted = [f"{PREFIX} {c}" if family.default_prefix else c for c in captions]
    ref_image, ref_text = _reference_embeddings(folder, name, prompted, images)
    ours_image = scorer.image_embeddings(images, None, len(images))
    ours_text = scorer.text_embeddings(captions)
    torch.testing.assert_close(ours_image, ref_image, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours_text, ref_text, atol=1e-5, rtol=0)
    expected = W * (ref_image * ref_text).sum(-1).clamp(min=0)  # CLIP-S = w * max(cos, 0) per caption
    result = scorer(captions, images=images)
    np.testing.assert_allclose(result["scores"], expected.numpy(), atol=1e-5, rtol=0)
    assert f"family={name}" in result["signature"]


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_refclip_s_of_each_family_is_the_harmonic_mean_of_its_raw_clip_s_and_best_reference_cosine(
    family_dirs, name
):
    folder, captions, images = family_dirs[name], _captions(name), _images()
    references = [[captions[(i + 1) % 4], captions[(i + 2) % 4]] for i in range(4)]
    family = FAMILIES[name]
    prompt = (lambda c: f"{PREFIX} {c}") if family.default_prefix else (lambda c: c)
    ref_image, ref_text = _reference_embeddings(folder, name, [prompt(c) for c in captions], images)
    result = capeval.RefCLIPScore(model=str(folder), device="cpu")(
        captions, references=references, images=images
    )
    a = W * (ref_image * ref_text).sum(-1).clamp(min=0)
    # The authors' text side: best cosine to a (prompted) reference, unclipped; RefCLIP-S = 2ab / (a + b), 0 at 0.
    b = torch.stack([(ref_text[i] * ref_text[[(i + 1) % 4, (i + 2) % 4]]).sum(-1).max() for i in range(4)])
    expected = torch.where(a + b == 0, torch.zeros_like(a), 2 * a * b / (a + b))
    np.testing.assert_allclose(result["scores"], expected.numpy(), atol=1e-5, rtol=0)


def _projection(model, name: str):
    return model.text_model.head if name == "siglip" else model.text_projection


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_emscore_token_embeddings_are_the_pooling_map_applied_to_every_position(family_dirs, name):
    from transformers import AutoModel, AutoTokenizer

    folder, captions = family_dirs[name], _captions(name)
    backbone = load_backbone(str(folder), device="cpu")
    pooled, tokens, ids = encode_text_tokens(backbone, captions)
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    for i, caption in enumerate(captions):
        if name == "siglip":  # padded to its length on the tokenizer's side, no mask, as trained
            enc = tok([caption], padding="max_length", truncation=True, return_tensors="pt")
            inputs = {"input_ids": enc["input_ids"]}
        else:
            enc = tok([caption], truncation=True, return_tensors="pt")
            inputs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        n = int(enc["attention_mask"].sum())
        with torch.no_grad():
            out = model.get_text_features(**inputs)
        rows = out.last_hidden_state[0, :n] if tok.padding_side == "right" else out.last_hidden_state[0, -n:]
        expected = F.normalize(_projection(model, name)(rows), dim=-1)
        torch.testing.assert_close(tokens[i], expected, atol=1e-5, rtol=0)
        assert list(ids[i]) == enc["input_ids"][0, :n].tolist()
        torch.testing.assert_close(pooled[i], F.normalize(out.pooler_output[0], dim=-1), atol=1e-5, rtol=0)
    # EMScore(X, X*) of captions against themselves: every token's best match is itself (cos 1), P = R = F = 1,
    # the coarse cosine is 1, so full_F = (1 + 1) / 2 = 1.
    result = capeval.EMScore(model=str(folder), device="cpu")(captions, references=[[c] for c in captions])
    np.testing.assert_allclose(result["scores"], 1.0, atol=1e-5)
    assert f"family={name}" in result["signature"]


def test_a_multilingual_model_gets_no_english_prompt_unless_one_is_given(family_dirs):
    assert capeval.CLIPScore(model=str(family_dirs["altclip"]), device="cpu").prefix == ""
    assert (
        capeval.CLIPScore(model=str(family_dirs["chinese_clip"]), device="cpu", prefix="图片").prefix
        == "图片"
    )
    assert capeval.CLIPScore(model=str(family_dirs["siglip"]), device="cpu").prefix == PREFIX


def test_signatures_name_the_family_only_outside_clip(family_dirs, tiny_clip_dir):
    siglip = capeval.CLIPScore(model=str(family_dirs["siglip"]), device="cpu").signature
    assert (
        "|family=siglip|image_resize=exact:32x32|text=max_length:48|tokenization=2|prefix=A photo depicts|w=2.5|"
        in siglip
    )
    align = capeval.CLIPScore(model=str(family_dirs["align"]), device="cpu").signature
    assert "|family=align|image_resize=exact:40x40,crop:32x32|text=longest:64|" in align
    clip = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu").signature
    assert "family=" not in clip and "image_resize" not in clip and "|prefix=A photo depicts|" in clip


def test_signatures_name_the_tokenisation_revision_of_the_families_whose_token_ids_it_changed(
    family_dirs, tiny_clip_dir
):
    from capeval.clip.tokenization import TOKENIZATION_REVISION

    def fields(model):
        return parse_signature(capeval.CLIPScore(model=str(model), device="cpu").signature)[1]

    # CLIP's BPE and SigLIP's SentencePiece read captions as their authors' tokenizers since revision 2: scores and
    # embeddings stored under an earlier signature (no such field) are not reused for them.
    assert TOKENIZATION_REVISION == 2
    assert fields(tiny_clip_dir)["tokenization"] == fields(family_dirs["siglip"])["tokenization"] == "2"
    for name in ("align", "chinese_clip", "altclip", "metaclip_2"):  # their tokenisation did not change
        assert "tokenization" not in fields(family_dirs[name]), name


def test_siglip_texts_are_padded_to_the_tokenizer_length_without_a_mask(family_dirs, monkeypatch):
    backbone = load_backbone(str(family_dirs["siglip"]), device="cpu")
    seen = {}
    original = backbone.model.get_text_features

    def spy(**kwargs):
        seen.update(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(backbone.model, "get_text_features", spy)
    capeval.clip.encode_texts(backbone, ["a dog"], prefix=None)
    assert seen["input_ids"].shape == (1, 48) and "attention_mask" not in seen
    assert seen["input_ids"][0, -1].item() == backbone.tokenizer.pad_token_id


def test_a_caption_over_a_familys_length_is_cut_by_its_tokenizer_and_counted(family_dirs):
    backbone = load_backbone(str(family_dirs["metaclip_2"]), device="cpu")
    long = " ".join(["dog"] * 40)
    with pytest.warns(capeval.diagnostics.categories.TruncationWarning, match="1 caption") as caught:
        _, _, ids = encode_text_tokens(backbone, [long, "a cat"])
    assert "longer than 20 tokens" in str(caught[0].message)
    assert len(ids[0]) == 20 and ids[0][-1] == backbone.tokenizer.eos_token_id  # </s> kept at the end


def test_the_processor_geometry_pads_a_crop_larger_than_the_resized_image_like_transformers():
    from transformers import CLIPImageProcessorPil

    proc = CLIPImageProcessorPil(
        size={"shortest_edge": 20},
        crop_size={"height": 24, "width": 24},
        do_normalize=False,
        do_rescale=False,
    )
    geometry = ProcessorGeometry(24, ("shortest_edge", 20), (24, 24), 3)
    image = Image.fromarray(np.random.default_rng(3).integers(0, 256, (31, 45, 3), dtype=np.uint8))
    expected = np.asarray(proc(images=image, return_tensors="np")["pixel_values"][0]).transpose(1, 2, 0)
    np.testing.assert_array_equal(geometry.apply(image), expected.astype(np.uint8))


def test_a_processor_geometry_survives_pickling_and_differs_from_the_plain_size():
    geometry = ProcessorGeometry(32, ("exact", 32, 32), None, 3)
    copy = pickle.loads(pickle.dumps(geometry))
    assert copy == geometry and copy.describe() == "exact:32x32" and int(copy) == 32
    assert geometry != 32 and len({geometry, ProcessorGeometry(32, ("shortest_edge", 32), (32, 32), 3)}) == 2


def test_siglip2_naflex_is_refused_by_name(tmp_path):
    from transformers import Siglip2Config

    Siglip2Config().save_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")  # refused from config.json, before any weight is read
    with pytest.raises(ValueError, match=r"model_type 'siglip2'.*NaFlex.*SiglipModel and are supported"):
        load_backbone(str(tmp_path), device="cpu")


def test_an_unknown_model_family_is_refused_with_the_supported_ones(tmp_path):
    from transformers import BertConfig

    BertConfig().save_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")  # refused from config.json, before any weight is read
    with pytest.raises(ValueError, match=r"model_type 'bert': not a dual encoder.*siglip \(SiglipModel\)"):
        load_backbone(str(tmp_path), device="cpu")


def test_a_family_without_image_and_text_feature_methods_is_refused_by_name(tmp_path, monkeypatch):
    from transformers import BertConfig

    BertConfig().save_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"")  # refused from config.json, before any weight is read
    monkeypatch.setitem(FAMILIES, "bert", Family("bert", "BertModel", "BertConfig"))
    with pytest.raises(ValueError, match="BertModel has no get_image_features or get_text_features"):
        load_backbone(str(tmp_path), device="cpu")


def test_a_pacs_checkpoint_on_another_family_is_refused(family_dirs, tmp_path):
    weights = tmp_path / "pacs.pth"
    weights.write_bytes(b"unused")
    with pytest.raises(ValueError, match="PAC-S checkpoints fit CLIPModel backbones only.*SiglipModel"):
        load_backbone(str(family_dirs["siglip"]), device="cpu", checkpoint=str(weights))


def test_a_family_without_its_image_processor_files_is_refused_naming_them(family_dirs, tmp_path):
    import shutil

    folder = tmp_path / "no-processor"
    shutil.copytree(family_dirs["siglip"], folder)
    (folder / "processor_config.json").unlink()
    with pytest.raises(ValueError, match=r"neither preprocessor_config.json nor a processor_config.json"):
        load_backbone(str(folder), device="cpu")


def test_a_legacy_preprocessor_config_file_is_read_like_the_processor_entry(family_dirs, tmp_path):
    import shutil

    folder = tmp_path / "legacy"
    shutil.copytree(family_dirs["chinese_clip"], folder)
    entry = json.loads((folder / "processor_config.json").read_text())["image_processor"]
    (
        folder / "processor_config.json"
    ).unlink()  # a Hub checkpoint saved before transformers 5 has only this file:
    entry["size"] = {"shortest_edge": 40}
    entry.update(do_center_crop=True, crop_size={"height": 32, "width": 32})
    (folder / "preprocessor_config.json").write_text(json.dumps(entry))
    backbone = load_backbone(str(folder), device="cpu")
    assert backbone.image_size.describe() == "shortest_edge:40,crop:32x32"


@pytest.mark.parametrize("name", ["align", "siglip"])
def test_video_frames_are_prepared_once_by_the_familys_processor(family_dirs, name):
    from capeval.clip.frame_encoding import encode_videos

    folder = family_dirs[name]
    rng = np.random.default_rng(11)
    video = rng.integers(0, 256, (3, 45, 60, 3), dtype=np.uint8)  # (T, H, W, C), non-square frames
    backbone = load_backbone(str(folder), device="cpu")
    (frames,) = encode_videos(backbone, [video])
    # ALIGN resizes to 40x40 and crops 32: a second pass over the 32x32 frame would resize it again.
    expected, _ = _reference_embeddings(folder, name, ["a dog"], [Image.fromarray(f) for f in video])
    torch.testing.assert_close(frames, expected, atol=1e-5, rtol=0)
