"""Hostile input against the Python API: every bad input is refused by name, none yields a silently wrong number."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import capeval

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
