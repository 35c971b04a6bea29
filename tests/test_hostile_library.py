"""Hostile input against the Python API: what ``capeval.CLIPScore(...)``, ``capeval.WMD(...)`` and the other
callables refuse by name (and index), before any work, and what they warn about, instead of returning a
silently wrong number."""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from capeval.clip.images import load_image
from tests.threads import run_together

# --- Item 2: image and frame identity (what the model sees, not the bytes that happen to be equal) ---


def _item2_palette_pair(size: int) -> tuple[Image.Image, Image.Image]:
    """Two palette images with the same indices and different colours, at the model's input size (no resize)."""
    indices = np.random.RandomState(0).randint(0, 4, (size, size)).astype(np.uint8)
    bright = Image.fromarray(indices, "P")
    bright.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])
    dark = Image.fromarray(indices, "P")
    dark.putpalette([0, 0, 0, 10, 10, 10, 20, 20, 20, 30, 30, 30])
    return bright, dark


def test_palette_images_with_other_palettes_score_as_their_rgb_conversions(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    bright, dark = _item2_palette_pair(scorer.backbone.image_size)
    assert bright.tobytes() == dark.tobytes()  # the same indices: only the palettes differ
    scores = scorer(["a photo", "a photo"], images=[bright, dark])["scores"]
    as_rgb = scorer(["a photo", "a photo"], images=[bright.convert("RGB"), dark.convert("RGB")])["scores"]
    assert scores[0] != scores[1]
    assert scores == pytest.approx(as_rgb, abs=1e-6)


def test_image_keys_and_corpus_hashes_tell_palettes_apart_and_match_equal_images():
    from capeval.clip.images import image_key
    from capeval.corpus.embedding_cache import content_hash

    bright, dark = _item2_palette_pair(8)
    assert image_key(bright, 0) != image_key(dark, 1)
    assert content_hash(bright) != content_hash(dark)
    assert image_key(bright, 0) == image_key(bright.copy(), 1)
    assert content_hash(bright) == content_hash(bright.copy())


def test_an_array_and_a_tensor_of_the_same_bytes_in_their_two_layouts_are_two_pictures(tiny_clip_dir):
    from capeval.clip.images import image_key, load_image
    from capeval.corpus.embedding_cache import content_hash

    array = np.random.RandomState(1).randint(0, 256, (3, 8, 3), dtype=np.uint8)  # (H, W, C): 8 wide, 3 high
    tensor = torch.from_numpy(array.copy())  # (C, H, W): 3 wide, 8 high
    assert load_image(array, 0).size == (8, 3) and load_image(tensor, 1).size == (3, 8)
    assert image_key(array, 0) != image_key(tensor, 1)
    assert content_hash(array) != content_hash(tensor)
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    both = scorer(["a photo", "a photo"], images=[array, tensor])["scores"]
    each = scorer(["a photo", "a photo"], images=[load_image(array, 0), load_image(tensor, 1)])["scores"]
    assert both[0] != both[1]
    assert both == pytest.approx(each, abs=1e-6)


def test_an_array_and_a_tensor_holding_the_same_pixels_are_read_and_encoded_once(tiny_clip_dir, monkeypatch):
    import capeval.clip.image_encoding as image_encoding
    from capeval.clip.images import image_key
    from capeval.corpus.embedding_cache import content_hash

    array = np.random.RandomState(2).randint(0, 256, (20, 30, 3), dtype=np.uint8)
    tensor = torch.from_numpy(array.copy()).permute(2, 0, 1)  # the same picture, (C, H, W)
    assert image_key(array, 0) == image_key(tensor, 1)
    assert content_hash(array) == content_hash(tensor)
    reads = []
    real = image_encoding.preprocess_image
    monkeypatch.setattr(
        image_encoding, "preprocess_image", lambda img, i, n: reads.append(i) or real(img, i, n)
    )
    scores = capeval.CLIPScore(model=str(tiny_clip_dir))(["a photo", "a photo"], images=[array, tensor])[
        "scores"
    ]
    assert reads == [0]
    assert scores[0] == scores[1]


def test_video_keys_tell_array_and_tensor_layouts_apart():
    from capeval.clip.video import video_key

    frames = np.random.RandomState(3).randint(0, 256, (2, 3, 8, 3), dtype=np.uint8)  # (T, H, W, C)
    same_bytes = torch.from_numpy(frames.copy())  # read as (T, C, H, W): other frames
    same_frames = torch.from_numpy(frames.copy()).permute(0, 3, 1, 2)
    assert video_key(frames, 0) != video_key(same_bytes, 1)
    assert video_key(frames, 0) == video_key(same_frames, 2)


def test_a_file_whose_bytes_spell_a_pixel_header_never_takes_those_pixels_cache_key(tmp_path):
    from capeval.corpus.embedding_cache import content_hash

    black = Image.new("RGB", (1, 1))
    forged = tmp_path / "forged.png"  # not an image: it must fail, never borrow the black pixel's embedding
    forged.write_bytes(b"pil|RGB|(1, 1)" + black.tobytes())
    assert content_hash(str(forged)) != content_hash(black)


def test_a_bfloat16_tensor_reads_as_the_float32_tensor_of_its_values(tiny_clip_dir):
    values = torch.rand(3, 16, 16).bfloat16()
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    assert (
        scorer(["a photo"], images=[values])["scores"]
        == scorer(["a photo"], images=[values.float()])["scores"]
    )


# --- Item 6: high-bit-depth images and captions without visible text ---
def _item6_image(mode: str, values) -> Image.Image:
    dtype = {"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]
    img = Image.fromarray(np.asarray(values, dtype=dtype).reshape(40, 40))
    assert img.mode == mode
    return img


@pytest.mark.parametrize(
    ("mode", "values", "message"),
    [
        (
            "I;16",
            np.linspace(0, 65535, 1600),
            r"image 1 is a 16-bit image \(mode I;16\) with samples from 0 to 65535",
        ),
        (
            "I",
            np.full(1600, 70_000),
            r"image 1 is a 32-bit integer image \(mode I\) with samples from 70000 to 70000",
        ),
        (
            "I",
            np.linspace(-500, 200, 1600),
            r"image 1 .*mode I\) with samples from -500 to 200.*saturated \(black\)",
        ),
        (
            "F",
            np.linspace(0, 1000, 1600),
            r"image 1 is a 32-bit float image \(mode F\) with samples from 0 to 1000",
        ),
        ("F", np.linspace(0, 1, 1600), r"image 1 is a float image \(mode F\) with values in \[0, 1\]"),
        (
            "F",
            np.r_[np.zeros(1599), np.nan],
            r"image 1 is a 32-bit float image \(mode F\) holding NaN or infinity",
        ),
    ],
)
def test_high_bit_depth_images_the_rgb_conversion_would_saturate_are_refused_by_name(
    tiny_clip_dir, mode, values, message
):
    ok = Image.new("RGB", (40, 40), "gray")
    with pytest.raises(ValueError, match=message):
        capeval.CLIPScore(model=str(tiny_clip_dir))(
            ["a photo", "a photo"], images=[ok, _item6_image(mode, values)]
        )


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_high_bit_depth_images_within_8_bit_levels_score_with_the_authors_pixels(tiny_clip_dir, mode):
    from authors_reference import authors_clip_s, authors_pixels

    from capeval.clip.backbones import load_backbone
    from capeval.clip.images import normalize_pixels, preprocess_image

    levels = np.random.RandomState(4).randint(0, 256, 40 * 40)
    img = _item6_image(mode, levels)
    backbone = load_backbone(str(tiny_clip_dir))
    n = backbone.image_size
    ours = normalize_pixels(
        torch.from_numpy(preprocess_image(img, 0, n))[None], backbone.image_mean, backbone.image_std
    )
    assert torch.equal(ours[0], authors_pixels(img, n))
    score = capeval.CLIPScore(model=str(tiny_clip_dir))(["a photo"], images=[img])["scores"][0]
    assert score == pytest.approx(float(authors_clip_s(backbone.model, [img], ["a photo"])[0]), abs=1e-5)


INVISIBLE = [
    "\x00",
    "\x00 \x00\t",
    "\u200b",
    "\u200b\u200c\u200d\u2060\ufeff",
    "\u00ad",
    "\u202e\u2066\u2069",
    "\u3164",
    "\ufe0f",
    "\U000e0041\U000e007f",
    "\u2028\u3000",
]


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_caption_without_visible_text_is_an_empty_caption_naming_its_index(text):
    from capeval.validation import check_predictions, check_references

    with pytest.raises(ValueError, match=r"prediction 1 is an empty caption"):
        check_predictions(["a dog", text])
    with pytest.raises(ValueError, match=r"reference 1 of item 0 is an empty string"):
        check_references([["a dog", text]], 1)


def test_the_message_lists_the_invisible_code_points():
    from capeval.validation import check_predictions

    with pytest.raises(
        ValueError,
        match=r"prediction 0 is an empty caption: it holds only invisible characters "
        r"\(U\+0000, U\+200B\)",
    ):
        check_predictions(["\x00\u200b\x00"])


@pytest.mark.parametrize("text", ["é", "日本", "🙂", "\u0301", "a\u200b", "\x00a", "\ue000"])
def test_captions_with_any_visible_character_are_kept(text):
    from capeval.validation import check_predictions, has_visible_text

    assert has_visible_text(text)
    assert check_predictions([text]) == [text]


def test_every_metric_refuses_an_invisible_prediction_or_reference(tiny_clip_dir):
    from gensim.models import KeyedVectors

    from capeval.emscore import EMScore

    kv = KeyedVectors(vector_size=2, count=0)
    kv.add_vectors(["dog", "cat"], np.array([[0, 1], [1, 0]], dtype=np.float32))
    image = Image.new("RGB", (40, 40), "gray")
    model = str(tiny_clip_dir)
    calls = {
        "clipscore": lambda p: capeval.CLIPScore(model=model)(p, images=[image, image]),
        "refclipscore": lambda p: capeval.RefCLIPScore(model=model)(
            p, [["a dog"]] * 2, images=[image, image]
        ),
        "wmd": lambda p: capeval.WMD(vectors=kv)(p, [["a dog"]] * 2),
        "wembsim": lambda p: capeval.WEmbSim(vectors=kv)(p, [["a dog"]] * 2),
        "emscore": lambda p: EMScore(model=model)(p, [["a dog"]] * 2),
    }
    for call in calls.values():
        with pytest.raises(ValueError, match="prediction 1 is an empty caption: it holds only invisible"):
            call(["a dog", "\u200b\x00"])
    refs = [["a dog"], ["a cat", "\ufeff"]]
    for call in {
        "refclipscore": lambda: capeval.RefCLIPScore(model=model)(["a", "b"], refs, images=[image, image]),
        "wmd": lambda: capeval.WMD(vectors=kv)(["a dog", "a cat"], refs),
        "wembsim": lambda: capeval.WEmbSim(vectors=kv)(["a dog", "a cat"], refs),
        "emscore": lambda: EMScore(model=model)(["a dog", "a cat"], refs),
    }.values():
        with pytest.raises(
            ValueError, match="reference 1 of item 1 is an empty string: it holds only invisible"
        ):
            call()


def test_a_corpus_row_with_an_invisible_caption_is_reported_not_scored():
    from capeval.corpus.items import Columns, to_item

    columns = Columns(caption="caption", image="image", references="refs", id=None)
    item = to_item(0, {"caption": "\u200b\u200b", "image": "x.png"}, columns, needs_refs=False)
    assert item.error == "caption ('caption') is missing or empty (no visible text)"
    item = to_item(
        1, {"caption": "a dog", "image": "x.png", "refs": ["a dog", "\x00"]}, columns, needs_refs=True
    )
    assert "references ('refs') must be a non-empty list of non-empty strings" in item.error


def test_the_trainer_hook_counts_an_invisible_generated_caption_as_empty(tiny_clip_dir):
    import datasets

    from capeval.integrations.trainer import make_compute_metrics

    rows = datasets.Dataset.from_dict({"image": [Image.new("RGB", (32, 32), c) for c in ("red", "blue")]})

    class Decoder:  # the hook's scoring of decoded captions does not decode
        def batch_decode(self, ids, skip_special_tokens=True):
            raise AssertionError("not called")

    hook = make_compute_metrics(Decoder(), rows, ["clipscore"], options={"model": str(tiny_clip_dir)})
    out = hook.score(["a red square", "\u200b"])
    alone = capeval.CLIPScore(model=str(tiny_clip_dir))(["a red square"], images=[rows[0]["image"]])[
        "clipscore"
    ]
    assert out["empty_predictions"] == 1
    assert out["clipscore"] == pytest.approx(alone / 2, abs=1e-6)


# --- Item 7: resize bounds (aspect ratio, decoded pixels) ---
def _item7_png(width: int, height: int) -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("L", (width, height)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def item7_decodes(monkeypatch):
    """Records every image PIL decodes (ImageFile.load) and every resize, with its requested size."""
    from PIL import ImageFile

    seen = {"load": 0, "resize": []}
    load, resize = ImageFile.ImageFile.load, Image.Image.resize

    def spy_load(self):
        seen["load"] += 1
        return load(self)

    def spy_resize(self, size, *args, **kwargs):
        seen["resize"].append(tuple(size))
        return resize(self, size, *args, **kwargs)

    monkeypatch.setattr(ImageFile.ImageFile, "load", spy_load)
    monkeypatch.setattr(Image.Image, "resize", spy_resize)
    return seen


def test_a_274_byte_1x100000_png_is_refused_from_its_header_before_decoding(tiny_clip_dir, item7_decodes):
    data = _item7_png(1, 100_000)
    assert len(data) < 300
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    n = scorer.backbone.image_size  # an image already at the input size is not resized
    with pytest.raises(
        ValueError,
        match=r"image 1 is 1x100000 pixels, an aspect ratio of 100,000:1; capeval "
        r"accepts at most 100:1",
    ):
        scorer(["a", "b"], images=[Image.new("RGB", (n, n)), {"bytes": data, "path": None}])
    assert item7_decodes["load"] == 0 and item7_decodes["resize"] == []


@pytest.mark.parametrize("size", [(1, 1_000_000), (25_000_000, 1), (3, 1000)])
def test_extreme_aspect_ratios_in_memory_are_refused_before_any_resize(tiny_clip_dir, item7_decodes, size):
    img = Image.new("1", size)
    w, h = size
    with pytest.raises(ValueError, match=rf"image 0 is {w}x{h} pixels, an aspect ratio of [\d,]+:1"):
        capeval.CLIPScore(model=str(tiny_clip_dir))(["a"], images=[img])
    assert item7_decodes["resize"] == []


def test_a_path_with_an_extreme_aspect_ratio_names_index_and_file(tmp_path, tiny_clip_dir, item7_decodes):
    path = tmp_path / "strip.png"
    path.write_bytes(_item7_png(5000, 2))
    with pytest.raises(
        ValueError, match=r"image 0 \('.*strip\.png'\) is 5000x2 pixels, an aspect ratio of 2,500:1"
    ):
        capeval.CLIPScore(model=str(tiny_clip_dir))(["a"], images=[str(path)])
    assert item7_decodes["load"] == 0


def test_the_largest_accepted_aspect_ratio_resizes_to_at_most_100_times_the_input_area(
    tiny_clip_dir, item7_decodes
):
    from authors_reference import authors_pixels

    from capeval.clip.backbones import load_backbone
    from capeval.clip.images import MAX_ASPECT_RATIO, normalize_pixels, preprocess_image

    backbone = load_backbone(str(tiny_clip_dir))
    n = backbone.image_size
    rng = np.random.RandomState(5)
    for size in [(7, 7 * MAX_ASPECT_RATIO), (3 * MAX_ASPECT_RATIO, 3)]:
        img = Image.fromarray(rng.randint(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        item7_decodes["resize"].clear()
        pixels = preprocess_image(img, 0, n)
        (resized,) = item7_decodes["resize"]
        assert resized[0] * resized[1] <= MAX_ASPECT_RATIO * n * n
        ours = normalize_pixels(torch.from_numpy(pixels)[None], backbone.image_mean, backbone.image_std)[0]
        assert torch.equal(ours, authors_pixels(img, n))  # the bound refuses; it never changes a pixel


def test_a_decompression_bomb_is_a_capeval_error_naming_the_image(monkeypatch, tiny_clip_dir):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    warned = {"bytes": _item7_png(120, 120), "path": None}  # 14,400 pixels: above the limit, PIL only warns
    refused = {"bytes": _item7_png(200, 200), "path": None}  # 40,000: above twice the limit, PIL raises
    for image in (warned, refused):
        with pytest.raises(ValueError, match=r"image 1 is too large: .*MAX_IMAGE_PIXELS"):
            scorer(["a", "b"], images=[Image.new("RGB", (8, 8)), image])


def test_running_out_of_memory_while_decoding_is_a_capeval_error_naming_the_image(monkeypatch, tmp_path):
    from PIL import ImageFile

    from capeval.clip.images import load_image

    path = tmp_path / "big.png"
    path.write_bytes(_item7_png(64, 64))

    def exhausted(self):
        raise MemoryError

    monkeypatch.setattr(ImageFile.ImageFile, "load", exhausted)
    with pytest.raises(
        ValueError, match=r"image 4 \('.*big\.png'\) is too large to decode: the machine ran out"
    ):
        load_image(str(path), 4)


def test_video_frames_with_an_extreme_aspect_ratio_name_the_video_and_frame(tiny_clip_dir):
    from capeval.emscore import EMScore

    frames = [Image.new("RGB", (64, 64)), Image.new("RGB", (2, 1000))]
    with pytest.raises(
        ValueError, match=r"video 0, frame 1: image 1 is 2x1000 pixels, an aspect ratio of 500:1"
    ):
        EMScore(model=str(tiny_clip_dir), num_frames=2)(["a dog"], videos=[frames])


def test_a_video_file_with_an_extreme_aspect_ratio_is_refused_before_decoding(tmp_path, tiny_clip_dir):
    from capeval.clip.video import decode_video, write_video

    path = write_video(tmp_path / "strip.mp4", [np.zeros((2, 400, 3), dtype=np.uint8)] * 2)
    with pytest.raises(
        ValueError, match=r"video 3 \('.*strip\.mp4'\): a frame is 400x2 pixels, an aspect ratio of 200:1"
    ):
        decode_video(path, None, 32, index=3)


# --- Item 3: model folders without a working CLIP tokenizer ---


def _item3_copy(tiny_clip_dir: Path, tmp_path: Path, name: str, drop: tuple[str, ...] = ()) -> Path:
    """A copy of the tiny CLIP folder without the files in ``drop``, with the backbone cache cleared."""
    from capeval.clip.backbones import clear_cache

    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    for file in drop:
        (folder / file).unlink()
    clear_cache()
    return folder


def _item3_edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_model_folder_without_tokenizer_files_is_refused_naming_the_files(tiny_clip_dir, tmp_path):
    import capeval

    folder = _item3_copy(tiny_clip_dir, tmp_path, "no-tokenizer", ("tokenizer.json", "tokenizer_config.json"))
    with pytest.raises(ValueError, match=r"no CLIP tokenizer: it lacks tokenizer\.json \(or both vocab\.json "
                       r"and merges\.txt\)") as err:  # fmt: skip
        capeval.CLIPScore(model=str(folder), device="cpu")
    assert str(folder) in str(err.value) and "save_pretrained" in str(err.value)


def test_model_folder_with_vocab_but_no_merges_names_merges_txt(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone
    from capeval.testing.tiny_clip import clip_vocab_and_merges

    folder = _item3_copy(tiny_clip_dir, tmp_path, "vocab-only", ("tokenizer.json",))
    (folder / "vocab.json").write_text(json.dumps(clip_vocab_and_merges()[0]))
    with pytest.raises(
        ValueError, match=r"lacks tokenizer\.json and merges\.txt \(it has only vocab\.json\)"
    ):
        load_backbone(str(folder), device="cpu")


def test_hub_snapshot_without_tokenizer_files_is_refused_naming_the_snapshot(
    tiny_clip_dir, tmp_path, monkeypatch
):
    from huggingface_hub import constants

    from capeval.clip.backbones import clear_cache, load_backbone

    commit = "0123456789" * 4
    repo = tmp_path / "hub" / "models--someorg--tiny-clip"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_clip_dir / name, snapshot / name)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    clear_cache()
    with pytest.raises(ValueError, match=r"model 'someorg/tiny-clip' has no CLIP tokenizer: its cached snapshot "
                       r".*0123456789.* lacks tokenizer\.json.*network access"):  # fmt: skip
        load_backbone("someorg/tiny-clip", device="cpu")


def test_tokenizer_of_another_model_family_is_refused(tiny_clip_dir, tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    from capeval.clip.backbones import load_backbone

    folder = _item3_copy(
        tiny_clip_dir, tmp_path, "bert-tokenizer", ("tokenizer.json", "tokenizer_config.json")
    )
    vocab = {w: i for i, w in enumerate(["[UNK]", "[CLS]", "[SEP]", "a", "photo", "dog"])}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]").save_pretrained(
        folder
    )
    with pytest.raises(
        ValueError, match=r"no working CLIP tokenizer .*it has no end-of-text token.*unknown tokens"
    ):
        load_backbone(str(folder), device="cpu")


def test_tokenizer_whose_end_of_text_the_text_tower_does_not_pool_at_is_refused(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone

    folder = _item3_copy(tiny_clip_dir, tmp_path, "other-eos")
    _item3_edit_json(folder / "tokenizer_config.json", lambda cfg: cfg.update(eos_token="<|startoftext|>"))
    with pytest.raises(ValueError, match=r"pools at end-of-text id 49407 .* writes end-of-text as 49406"):
        load_backbone(str(folder), device="cpu")


def test_legacy_eos_token_id_2_of_the_openai_configs_still_loads(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import load_backbone

    # openai/clip-vit-base-patch32's config says eos_token_id 2: the tower pools at the largest id, end-of-text.
    folder = _item3_copy(tiny_clip_dir, tmp_path, "legacy-eos")
    _item3_edit_json(folder / "config.json", lambda cfg: cfg["text_config"].update(eos_token_id=2))
    backbone = load_backbone(str(folder), device="cpu")
    assert backbone.model.config.text_config.eos_token_id == 2
    assert backbone.tokenizer.eos_token_id == 49407


# --- Item 5: all-zero word vectors, and RefCLIP-S / RefPAC-S near a zero denominator ---


@pytest.fixture
def item5_zero_row_vectors(tmp_path):
    """word2vec text vectors in which ``pad`` has an all-zero vector."""
    from capeval.text.vectors import clear_cache

    rows = {"dog": [3, 4, 0], "cat": [4, 3, 0], "runs": [0, 4, 3], "beach": [1, 1, 1], "pad": [0, 0, 0]}
    path = tmp_path / "zero-row.txt"
    path.write_text("5 3\n" + "".join(f"{w} {' '.join(map(str, v))}\n" for w, v in rows.items()))
    clear_cache()
    yield path
    clear_cache()


def test_wmd_normalized_treats_zero_vector_words_as_unknown_with_a_warning(item5_zero_row_vectors):
    import capeval

    with pytest.warns(
        UserWarning, match=r"wmd: 1 word\(s\) of vectors zero-row\.txt.* all-zero vector.*'pad'"
    ):
        wmd = capeval.WMD(vectors=str(item5_zero_row_vectors), normalize_vectors=True)
    out = wmd(["dog pad runs", "dog cat"], [["cat beach"], ["pad cat dog"]])
    # gensim 4 divides 0 by 0 here; with 'pad' unknown both distances are finite, the second exactly 0.
    assert np.isfinite(out["distances"]).all() and out["distances"][1] == 0.0
    assert "vectors=zero-row.txt@" in out["signature"] and ",zero_rows_oov=1|" in out["signature"]


def test_wmd_on_raw_vectors_keeps_zero_vector_words_as_gensim_does(item5_zero_row_vectors):
    import warnings

    from gensim.models import KeyedVectors

    import capeval

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # raw vectors: nothing is dropped, nothing to warn about
        wmd = capeval.WMD(vectors=str(item5_zero_row_vectors))
    out = wmd(["dog pad runs"], [["cat beach"]])
    kv = KeyedVectors.load_word2vec_format(str(item5_zero_row_vectors))
    assert out["distances"][0] == pytest.approx(
        kv.wmdistance(["dog", "pad", "runs"], ["cat", "beach"], norm=False)
    )
    assert "zero_rows_oov" not in out["signature"]


def test_wembsim_warns_and_a_caption_of_zero_vector_words_is_reported_not_silently_zero(
    item5_zero_row_vectors,
):
    import capeval

    with pytest.warns(UserWarning, match=r"wembsim: 1 word\(s\) .*'pad'"):
        wembsim = capeval.WEmbSim(vectors=str(item5_zero_row_vectors), normalize_vectors=True)
    with pytest.warns(UserWarning, match=r"1 predictions have no in-vocabulary word .*index 1"):
        out = wembsim(["dog pad", "pad"], [["dog"], ["cat"]])
    assert out["scores"] == [pytest.approx(1.0), 0.0]
    assert ",zero_rows_oov=1|" in out["signature"]


def _item5_cancelling_terms(scorer, monkeypatch, w: float):
    """Two items: item 1's w*cos(image, caption) nearly cancels its best-reference cosine of -0.4.

    The tiny CLIP's captions are all alike (cosines near 0.8), so text embeddings are set by hand.
    """
    import torch

    basis = torch.eye(16)
    cosine = -0.4
    table = {
        "fine caption": basis[0],
        "fine reference": basis[0],
        "odd caption": basis[3],
        "odd reference": cosine * basis[3] + (1 - cosine**2) ** 0.5 * basis[4],
    }
    monkeypatch.setattr(scorer, "text_embeddings", lambda texts: torch.stack([table[t] for t in texts]))
    t = (-cosine + 1e-4) / w  # w * t + cosine = 1e-4
    image_embeds = torch.stack([basis[0], t * basis[3] + (1 - t**2) ** 0.5 * basis[5]])
    return ["fine caption", "odd caption"], [["fine reference"], ["odd reference"]], image_embeds


def test_refclipscore_warns_naming_items_whose_harmonic_mean_denominator_is_near_zero(
    tiny_clip_dir, monkeypatch
):
    import capeval

    scorer = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu")
    predictions, references, image_embeds = _item5_cancelling_terms(scorer, monkeypatch, 2.5)
    with pytest.warns(UserWarning, match=r"RefCLIP-S: CLIP-S \+ best-reference cosine is near zero for 1 item\(s\)"
                      r".*item 1: CLIP-S 0\.4001, best-reference cosine -0\.4, RefCLIP-S -3\d\d\d") as record:  # fmt: skip
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert record[0].filename == __file__  # points at the caller, not at capeval
    assert "item 0" not in str(record[0].message)
    assert out["scores"][0] == pytest.approx(2.5 * 1.0 * 1.0 * 2 / (2.5 + 1.0))
    assert out["scores"][1] < -3000  # the authors' formula is kept: the warning is the guard


def test_refclipscore_with_the_papers_clipped_cosine_has_nothing_to_warn_about(tiny_clip_dir, monkeypatch):
    import warnings

    import capeval

    scorer = capeval.RefCLIPScore(model=str(tiny_clip_dir), device="cpu", clip_reference_cosine=True)
    predictions, references, image_embeds = _item5_cancelling_terms(scorer, monkeypatch, 2.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert out["scores"][1] == 0.0  # H(0.4001, max(-0.4, 0)) = 0


def test_refpacscore_warns_with_its_own_names_and_points_at_the_caller(tiny_clip_dir, monkeypatch):
    import capeval

    scorer = capeval.PACScore(checkpoint=str(tiny_clip_dir), device="cpu")
    predictions, references, image_embeds = _item5_cancelling_terms(scorer, monkeypatch, 2.0)
    with pytest.warns(UserWarning, match=r"RefPAC-S: PAC-S \+ best-reference cosine is near zero .*item 1: "
                      r"PAC-S 0\.4001") as record:  # fmt: skip
        out = scorer(predictions, references, image_embeds=image_embeds)
    assert record[0].filename == __file__
    assert out["refpacscore_scores"][1] < -3000


# --- Item 9: caption size in WMD (and WEmbSim) ---


@pytest.fixture(scope="module")
def item9_words() -> list[str]:
    """Alphabetic GloVe words, none a COCO stopword: each is its own in-vocabulary token."""
    from capeval.text.stopwords import COCO_WMD_STOPWORDS
    from capeval.text.tokenize import coco_tokens
    from capeval.text.vectors import load_vectors

    words = load_vectors().keyed_vectors.index_to_key[500:120_000]
    words = [w for w in words if w.isalpha() and w.isascii() and w not in COCO_WMD_STOPWORDS]
    return [w for w in words if coco_tokens(w) == [w]][:40_000]


def _item9_text(words: list[str], start: int, n: int) -> str:
    return " ".join(words[start : start + n])


def _item9_peak(run) -> tuple[object, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            result = run()
        except ValueError as e:
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_wmd_refuses_a_prediction_over_the_word_cap_before_building_its_cost_matrix(item9_words):
    import capeval
    from capeval.text.transport import MAX_DOCUMENT_WORDS

    wmd = capeval.WMD()
    long_text = _item9_text(item9_words, 0, MAX_DOCUMENT_WORDS + 200)
    error, peak = _item9_peak(lambda: wmd(["a dog runs", long_text], [["a dog"], [long_text[::-1]]]))
    assert isinstance(error, ValueError)
    assert str(error).startswith(
        "prediction 1 has 1,200 distinct in-vocabulary words (1 prediction(s) over the "
    )
    assert "at most 1,000 distinct in-vocabulary words" in str(error)
    assert peak < 32 * 2**20  # its 1,200 x 1,200 pair alone would take ~200 MB


def test_wmd_refuses_a_reference_over_the_word_cap_naming_item_and_reference(item9_words):
    import capeval

    wmd = capeval.WMD()
    long_text = _item9_text(item9_words, 0, 1_500)
    with pytest.raises(
        ValueError, match=r"^reference 1 of item 1 has 1,500 distinct in-vocabulary words; WMD"
    ):
        wmd(["a dog", "a cat"], [["a dog"], ["a cat", long_text]])


def test_wmd_at_the_word_cap_is_scored(item9_words):
    import capeval
    from capeval.text.transport import MAX_DOCUMENT_WORDS

    text = _item9_text(item9_words, 0, MAX_DOCUMENT_WORDS)
    out = capeval.WMD()([text], [[text, "a dog"]])
    assert out["distances"] == [0.0]  # the same bag of words: no transport problem to solve


def test_wmd_in_slices_gives_the_same_distances_and_references(item9_words, monkeypatch):
    import capeval
    from capeval.text import transport

    rng = np.random.default_rng(0)
    words = item9_words[:300]
    predictions = [" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(40)]
    references = [[" ".join(rng.choice(words, rng.integers(1, 12))) for _ in range(4)] for _ in range(40)]
    whole = capeval.WMD()(predictions, references)
    monkeypatch.setattr(transport, "SLICE_ENTRIES", 150)  # a few references per slice
    wmd = capeval.WMD()
    sliced = wmd(predictions, references)
    np.testing.assert_allclose(sliced["distances"], whole["distances"], rtol=1e-12)
    assert sliced["scores"] == pytest.approx(whole["scores"], rel=1e-12)
    assert len(set(sliced["distances"])) > 10  # real transport problems, not all ties


def test_wmd_memory_stays_bounded_by_the_slice_not_the_batch(item9_words, monkeypatch):
    import capeval
    from capeval.text import transport

    # 40 captions of 400 words, each its own reference: 6.4M cost entries in all, about 1 GB built at once.
    texts = [_item9_text(item9_words, 400 * i, 400) for i in range(40)]
    wmd = capeval.WMD()
    monkeypatch.setattr(transport, "SLICE_ENTRIES", 400 * 400, raising=False)  # also measured without slices
    out, peak = _item9_peak(lambda: wmd(texts, [[t] for t in texts]))
    assert out["distances"] == [0.0] * 40
    assert peak < 64 * 2**20  # one 160,000-entry slice (~28 MB) and the batch's tokens and embeddings


def test_wembsim_needs_no_word_cap_its_memory_is_linear_in_the_words(item9_words):
    import capeval

    text = _item9_text(item9_words, 0, 20_000)
    wembsim = capeval.WEmbSim()
    out, peak = _item9_peak(lambda: wembsim([text], [[text[::-1] + " dog", text]]))
    assert out["scores"][0] == pytest.approx(0.5 * (1 + out["reference_scores"][0][0]))
    assert peak < 48 * 2**20  # 20,000 words x 50 dims in float64 is 8 MB; a pairwise matrix would be 3.2 GB


# --- Item 4: a string where a list belongs, text where numbers belong ---

ITEM4_PREDICTIONS = ["a dark image", "a bright image"]
ITEM4_REFERENCES = [["a black picture"], ["a white picture"]]


def _item4_images():
    return [Image.fromarray(np.full((24, 24, 3), c, dtype=np.uint8)) for c in (20, 230)]


@pytest.fixture(scope="module")
def item4_scorers(tiny_clip_dir):
    """Each callable, with a call that scores ``predictions`` (and ``references`` where it takes them)."""
    model = str(tiny_clip_dir)
    images = _item4_images()
    clip = capeval.CLIPScore(model=model, device="cpu")
    ref = capeval.RefCLIPScore(model=model, device="cpu")
    pac = capeval.PACScore(checkpoint=model, device="cpu")
    em = capeval.EMScore(model=model, device="cpu")
    wmd, wembsim = capeval.WMD(), capeval.WEmbSim()
    return {
        "clipscore": lambda p, r: clip(p, images=images),
        "refclipscore": lambda p, r: ref(p, references=r, images=images),
        "pacscore": lambda p, r: pac(p, references=r, images=images),
        "emscore": lambda p, r: em(p, references=r),
        "wmd": lambda p, r: wmd(p, r),
        "wembsim": lambda p, r: wembsim(p, r),
    }


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "pacscore", "emscore", "wmd", "wembsim"])
def test_every_callable_refuses_a_bare_string_or_bytes_as_predictions(item4_scorers, name):
    for bare in ("dog", b"dog"):
        with pytest.raises(TypeError, match="predictions must be a list of strings, got (str|bytes)"):
            item4_scorers[name](bare, [["a dog"]] * 3)


@pytest.mark.parametrize("name", ["refclipscore", "pacscore", "emscore", "wmd", "wembsim"])
def test_every_callable_refuses_a_string_in_place_of_a_reference_list_naming_its_index(item4_scorers, name):
    with pytest.raises(TypeError, match="references 1 is a string; expected a list of reference strings"):
        item4_scorers[name](ITEM4_PREDICTIONS, [["a black picture"], "a white picture"])
    with pytest.raises(TypeError, match="references must be a list of lists of strings, got str"):
        item4_scorers[name](ITEM4_PREDICTIONS, "a white picture")


def test_images_given_as_a_string_bytes_or_an_unordered_set_are_refused(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got str"):
        scorer(["a"], images="photo.png")
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got bytes"):
        scorer(["a", "b"], images=b"ab")
    # A set has no order to pair with the predictions: scoring it would pair images at random.
    with pytest.raises(TypeError, match="images must be a list with one entry per prediction, got set"):
        scorer(ITEM4_PREDICTIONS, images={"a.png", "b.png"})


def test_image_embeds_rows_holding_text_are_refused_not_read_as_numbers(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    dim = scorer.backbone.embed_dim
    with pytest.raises(TypeError, match="image_embeds row 1 is str"):
        scorer(ITEM4_PREDICTIONS, image_embeds=[[0.5] * dim, "0.5"])
    # numpy would read the text "0.5" as the number 0.5 and score it.
    with pytest.raises(TypeError, match="image_embeds must be a .N, D. array of real numbers, got dtype <U"):
        scorer(ITEM4_PREDICTIONS, image_embeds=[["0.5"] * dim, ["0.5"] * dim])


def test_video_embeds_holding_a_string_are_refused_naming_the_video(tiny_clip_dir):
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu")
    dim = scorer.backbone.embed_dim
    with pytest.raises(TypeError, match="video_embeds 1 is a str"):
        scorer(ITEM4_PREDICTIONS, video_embeds=[np.ones((2, dim)), "frames.npy"])
    with pytest.raises(TypeError, match="video_embeds 0 must hold real numbers, got dtype <U"):
        scorer(ITEM4_PREDICTIONS, video_embeds=[[["1"] * dim], np.ones((2, dim))])


def test_a_custom_tokenizer_returning_one_string_is_refused_not_split_into_characters():
    scorer = capeval.WMD(tokenizer=lambda caption: caption.lower())
    with pytest.raises(TypeError, match="the tokenizer returned str for the caption 'a dog'"):
        scorer(["a dog"], [["a dog"]])
    scorer = capeval.WEmbSim(tokenizer=lambda caption: [1, 2])
    with pytest.raises(TypeError, match="the tokenizer returned the token 1 .int."):
        scorer(["a dog"], [["a dog"]])


def test_an_idf_table_with_string_keys_is_refused_naming_the_key(tiny_clip_dir):
    # A table read back from JSON has string keys: they never match a token id.
    with pytest.raises(TypeError, match="idf key '320' is str: keys are CLIP token ids .ints."):
        capeval.EMScore(model=str(tiny_clip_dir), device="cpu", idf={"320": 1.0})


def test_bytes_as_a_stopword_list_are_refused():
    with pytest.raises(TypeError, match="stopwords must be a list name or an iterable of strings, got bytes"):
        capeval.WMD(stopwords=b"the")


# --- Item 5 (part): w=nan and every other float option ---


@pytest.mark.parametrize("w", [math.nan, math.inf, -math.inf, 0.0, -2.5])
@pytest.mark.parametrize("cls", ["CLIPScore", "RefCLIPScore"])
def test_a_non_finite_or_non_positive_w_is_refused_before_the_model_loads(cls, w, tmp_path):
    # The model does not exist: refusing w first proves the check runs before any loading.
    with pytest.raises(ValueError, match=r"w must be a positive number \(finite, > 0\), got"):
        getattr(capeval, cls)(model=str(tmp_path / "no-such-model"), w=w)


@pytest.mark.parametrize("w", [math.nan, math.inf, 0.0, -2.0])
def test_pacscore_refuses_a_bad_w_before_reading_its_checkpoint(tmp_path, w):
    checkpoint = tmp_path / "clip_ViT-B-32.pth"
    checkpoint.write_bytes(b"never read")
    with pytest.raises(ValueError, match="w must be a positive number"):
        capeval.PACScore(checkpoint=str(checkpoint), w=w)


def test_w_of_the_wrong_type_is_a_type_error_naming_w(tmp_path):
    for bad in ("2.5", True, None):
        with pytest.raises(TypeError, match="w must be a number, got"):
            capeval.CLIPScore(model=str(tmp_path / "no-such-model"), w=bad)


@pytest.mark.parametrize("sigma", [math.nan, math.inf, 0, -1.0, True, "1"])
def test_wmd_refuses_a_bad_sigma_before_the_vectors_load(tmp_path, sigma):
    with pytest.raises((ValueError, TypeError), match="sigma must be a (positive )?number"):
        capeval.WMD(vectors=str(tmp_path / "no-such-vectors.txt"), sigma=sigma)


def test_a_valid_w_still_rescales_the_score(tiny_clip_dir):
    images = _item4_images()
    base = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")(ITEM4_PREDICTIONS, images=images)
    half = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu", w=1.25)(ITEM4_PREDICTIONS, images=images)
    assert half["scores"] == pytest.approx([s / 2 for s in base["scores"]])
    assert "w=1.25" in half["signature"]


# --- Item 11: one scorer object used from several threads ---


@pytest.mark.parametrize("name", ["clipscore", "refclipscore", "emscore", "wmd", "wembsim"])
def test_one_scorer_called_from_four_threads_gives_each_the_sequential_result(item4_scorers, name):
    # Non-ASCII captions take the tokenizer's slow path, ASCII ones the shared word cache.
    preds, refs = ["a dark café image", "a bright image"], [["a black picture"], ["a white café picture"]]
    call = item4_scorers[name]
    sequential = call(preds, refs)
    results = run_together(lambda: call(preds, refs))
    assert all(isinstance(r, dict) for r in results), results
    assert [r["scores"] for r in results] == [sequential["scores"]] * 4
    assert call(preds, refs)["scores"] == sequential["scores"]


def test_an_idf_defaultdict_is_never_written_to_so_threads_can_share_the_scorer(tiny_clip_dir):
    # Looking up a defaultdict inserts the key: a shared scorer would mutate it while another thread iterates it.
    table = defaultdict(lambda: 1.0, {49406: 0.0, 49407: 0.5})
    before = dict(table)
    scorer = capeval.EMScore(model=str(tiny_clip_dir), device="cpu", idf=table)
    results = run_together(lambda: scorer(["a zebra runs", "two cats"], [["a horse"], ["cats"]]))
    assert all(isinstance(r, dict) for r in results), results
    assert len({tuple(r["scores"]) for r in results}) == 1
    assert dict(table) == before


def test_overlapping_float32_gpu_encodings_restore_cudnns_tf32_switch(monkeypatch):
    from capeval.clip import image_encoding

    class FakeBackbone:
        device = torch.device("cuda", 0)
        dtype = torch.float32

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    first = image_encoding._ieee_fp32_convolutions(FakeBackbone())
    second = image_encoding._ieee_fp32_convolutions(FakeBackbone())
    first.__enter__()
    second.__enter__()  # another thread starts while the first is still encoding
    assert torch.backends.cudnn.allow_tf32 is False
    first.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32 is False  # the second is still encoding in IEEE float32
    second.__exit__(None, None, None)
    assert torch.backends.cudnn.allow_tf32 is True  # the user's setting, not the first thread's "off"


def test_threads_meeting_a_new_tokenizer_build_its_word_cache_once(tiny_clip_dir, monkeypatch):
    from transformers import AutoTokenizer

    from capeval.clip import tokenization

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_clip_dir))
    probes = []
    original = tokenization._encode_with_tokenizer

    def counting(tok, cleaned):
        if tok is tokenizer:
            probes.append(threading.get_ident())
        return original(tok, cleaned)

    monkeypatch.setattr(tokenization, "_encode_with_tokenizer", counting)
    caches = run_together(lambda: tokenization._word_ids_for(tokenizer))
    assert len({id(c) for c in caches}) == 1 and caches[0] is not None
    assert len(probes) == 1


# --- Item 12: options validated before any work; loader errors named ---


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch_size": "64"}, TypeError, "batch_size must be an int >= 1, got str"),
        ({"batch_size": 2.5}, TypeError, "batch_size must be an int >= 1, got float"),
        ({"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
        ({"device": "meta"}, ValueError, "device 'meta' holds shapes, not numbers"),
        ({"device": "cuda:banana"}, ValueError, "unknown device 'cuda:banana'"),
        ({"dtype": ["float16"]}, TypeError, "dtype must be one of"),
        ({"dtype": "int8"}, ValueError, "unsupported dtype 'int8'"),
        ({"prefix": "A photo | depicts"}, ValueError, r"prefix 'A photo \| depicts' contains '\|'"),
        ({"prefix": 3}, TypeError, "prefix must be a string"),
        ({"num_workers": 0}, ValueError, "num_workers must be >= 1, got 0"),
        ({"num_workers": "4"}, TypeError, "num_workers must be an int >= 1 or None"),
        ({"progress": "no"}, TypeError, "progress must be True, False or None"),
        ({"clip_reference_cosine": "no"}, TypeError, "clip_reference_cosine must be True or False"),
    ],
)
def test_a_bad_option_is_refused_by_name_before_the_model_loads(options, error, message, tmp_path):
    with pytest.raises(error, match=message):
        capeval.RefCLIPScore(model=str(tmp_path / "no-such-model"), **options)


def test_numpy_scalars_are_accepted_as_options(tiny_clip_dir):
    scorer = capeval.RefCLIPScore(
        model=str(tiny_clip_dir), device="cpu", batch_size=np.int64(2), w=np.float32(2.5), progress=np.False_,
        clip_reference_cosine=np.True_,
    )  # fmt: skip
    assert (scorer.batch_size, scorer.w, scorer.progress, scorer.clip_reference_cosine) == (
        2,
        2.5,
        False,
        True,
    )
    assert type(scorer.batch_size) is int and type(scorer.w) is float


def test_a_model_path_holding_the_signature_separator_is_refused_before_loading(tmp_path):
    with pytest.raises(ValueError, match=r"model '.*a\|b' contains '\|', the separator of result signatures"):
        capeval.CLIPScore(model=str(tmp_path / "a|b"))
    with pytest.raises(ValueError, match="model is an empty string"):
        capeval.CLIPScore(model="")


def test_a_device_torch_cannot_make_tensors_on_is_refused_at_construction():
    from capeval.clip.backbones import resolve_device

    with pytest.raises(ValueError, match="device 'xla': this torch cannot make tensors there"):
        resolve_device("xla")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"batch_size": "64"}, TypeError, "batch_size must be an int >= 1, got str"),
        ({"num_frames": "10"}, TypeError, "num_frames must be a positive int or None"),
        ({"idf": {320: math.nan}}, ValueError, "idf weight of token id 320 is nan"),
        ({"idf": {320: -1.0}}, ValueError, "idf weight of token id 320 is -1.0"),
        ({"idf": {320: "1"}}, TypeError, "idf weight of token id 320 is str"),
        ({"idf": {True: 1.0}}, TypeError, "idf key True is bool"),
        (
            {"idf": defaultdict(lambda: math.inf)},
            ValueError,
            r"idf weight of unseen token ids \(the default\)",
        ),
    ],
)
def test_emscore_refuses_bad_options_and_idf_tables_before_the_model_loads(options, error, message, tmp_path):
    with pytest.raises(error, match=message):
        capeval.EMScore(model=str(tmp_path / "no-such-model"), **options)


@pytest.mark.parametrize("flag", ["normalize_vectors", "prune"])
def test_wmd_flags_must_be_bools(flag, tmp_path):
    with pytest.raises(TypeError, match=f"{flag} must be True or False, got str"):
        capeval.WMD(vectors=str(tmp_path / "none.txt"), **{flag: "no"})


def test_bfloat16_and_float16_images_read_exactly_as_their_float32_copy(tiny_clip_dir):
    rng = np.random.default_rng(0)
    # Every float16 value in [0, 1]: 124 of them round to another 8-bit level when scaled in float16 arithmetic.
    values = np.arange(0, 2**16, dtype=np.uint16).view(np.float16)
    values = values[np.isfinite(values) & (values >= 0) & (values <= 1)]
    half = np.resize(values, (3, 48, 48)).astype(np.float16)
    as_float32 = half.astype(np.float32)
    assert np.array_equal(
        np.asarray(load_image(half.transpose(1, 2, 0), 0)),
        np.asarray(load_image(as_float32.transpose(1, 2, 0), 0)),
    )
    tensor = torch.from_numpy(rng.random((3, 32, 32), dtype=np.float32)).bfloat16()
    assert np.array_equal(np.asarray(load_image(tensor, 0)), np.asarray(load_image(tensor.float(), 0)))
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    got = scorer(ITEM4_PREDICTIONS, images=[tensor, torch.from_numpy(half)])
    want = scorer(ITEM4_PREDICTIONS, images=[tensor.float(), torch.from_numpy(as_float32)])
    assert got["scores"] == want["scores"]


def test_an_image_dict_with_a_str_under_bytes_is_a_type_error_naming_the_index(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    image = _item4_images()[0]
    with pytest.raises(
        TypeError, match="image 1: the 'bytes' of a datasets Image dict must be bytes .* got str"
    ):
        scorer(ITEM4_PREDICTIONS, images=[image, {"bytes": "iVBORw0KGgo=", "path": None}])


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_special_files_as_images_vectors_and_checkpoints_are_refused_unread(tiny_clip_dir, tmp_path):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    with pytest.raises(
        ValueError, match=r"image 0 \('/dev/zero'\): not a regular file .a device, pipe or socket"
    ):
        scorer(["a caption"], images=["/dev/zero"])
    pipe = tmp_path / "photo.png"
    os.mkfifo(pipe)  # opening it for reading would block forever
    with pytest.raises(ValueError, match="image 1 .*photo.png'.: not a regular file"):
        scorer(ITEM4_PREDICTIONS, images=[_item4_images()[0], str(pipe)])
    with pytest.raises(ValueError, match="vectors /dev/zero: not a regular file"):
        capeval.WMD(vectors="/dev/zero")
    with pytest.raises(ValueError, match="checkpoint '/dev/zero': /dev/zero is not a regular file"):
        capeval.PACScore(checkpoint="/dev/zero")


def _item12_model_copy(tiny_clip_dir: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(tiny_clip_dir, folder)
    return folder


def test_a_model_folder_whose_weights_are_a_device_is_refused_unread(tiny_clip_dir, tmp_path):
    folder = _item12_model_copy(tiny_clip_dir, tmp_path, "device-weights")
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("/dev/null")
    with pytest.raises(ValueError, match="model.safetensors is not a regular file .a device, pipe or socket"):
        capeval.CLIPScore(model=str(folder), device="cpu")


def test_a_damaged_safetensors_weights_file_is_a_value_error_naming_the_file(tiny_clip_dir, tmp_path):
    from capeval.clip.backbones import clear_cache

    cut = _item12_model_copy(tiny_clip_dir, tmp_path, "cut")
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    garbled = _item12_model_copy(tiny_clip_dir, tmp_path, "garbled")
    (garbled / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    clear_cache()
    for folder in (cut, garbled):
        with pytest.raises(ValueError, match=f"{folder / 'model.safetensors'} is truncated or corrupt"):
            capeval.CLIPScore(model=str(folder), device="cpu")
        with pytest.raises(ValueError, match=f"{folder / 'model.safetensors'} is truncated or corrupt"):
            capeval.PACScore(checkpoint=str(folder), device="cpu")


def test_a_cut_pytorch_weights_file_is_a_value_error_naming_the_file(tiny_clip_dir, tmp_path):
    from transformers import CLIPModel

    from capeval.clip.backbones import clear_cache

    folder = _item12_model_copy(tiny_clip_dir, tmp_path, "cut-bin")
    state = CLIPModel.from_pretrained(str(folder)).state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    clear_cache()
    with pytest.raises(ValueError, match="pytorch_model.bin is truncated or corrupt"):
        capeval.CLIPScore(model=str(folder), device="cpu")
