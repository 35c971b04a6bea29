"""Image inputs: the authors' preprocessing, every accepted form (high-bit-depth and half-precision ones included),
an image's identity (what the model sees, not the bytes that happen to be equal), and clear errors for bad
images. The bounds on reading an image are in test_images_bounds.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from authors_reference import authors_pixels
from PIL import Image

import capeval
from capeval.clip.images import image_key, load_image, normalize_pixels, preprocess_image, resize_and_crop
from tests.tiny_scorers import PREDICTIONS, two_images

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


def _noise(size, mode="RGB", seed=0) -> Image.Image:
    w, h = size
    rng = np.random.RandomState(seed)
    rgb = Image.fromarray(rng.randint(0, 256, (h, w, 3), dtype=np.uint8))
    if mode == "RGB":
        return rgb
    if mode == "P":
        return rgb.quantize(colors=17)
    if mode == "RGBA":
        img = rgb.copy()
        img.putalpha(Image.fromarray(rng.randint(0, 256, (h, w), dtype=np.uint8)))
        return img
    return rgb.convert(mode)


def _ours(img: Image.Image, size: int) -> torch.Tensor:
    arr = torch.from_numpy(resize_and_crop(img, size)).unsqueeze(0)
    return normalize_pixels(arr, MEAN, STD)[0]


@pytest.mark.parametrize(
    "size",
    [(224, 224), (500, 375), (375, 500), (225, 224), (1, 1), (10, 1000), (1000, 10), (17, 31), (640, 427)],
)
@pytest.mark.parametrize("mode", ["RGB", "L", "P", "RGBA", "CMYK", "LA", "1", "I", "I;16", "F"])
def test_pixels_equal_the_authors_transform_on_odd_sizes_and_modes(size, mode):
    img = _noise(size, mode)
    ours = _ours(img, 224)
    theirs = authors_pixels(img, 224)
    assert ours.shape == (3, 224, 224)
    assert torch.equal(ours, theirs)


def test_pixels_equal_the_authors_transform_at_other_input_sizes():
    img = _noise((97, 61))
    for n_px in (32, 48, 336):
        assert torch.equal(_ours(img, n_px), authors_pixels(img, n_px))


def test_rgb_conversion_happens_after_the_crop_like_the_authors():
    # A palette image is resized with nearest neighbour in its own mode (PIL's rule for "P"), so converting
    # first would give different pixels: equality with the authors' order proves ours is theirs.
    img = _noise((300, 200), "P")
    converted_first = _ours(img.convert("RGB"), 224)
    assert torch.equal(_ours(img, 224), authors_pixels(img, 224))
    assert not torch.equal(_ours(img, 224), converted_first)


def test_every_input_form_gives_the_same_pixels(tmp_path):
    img = _noise((50, 40))
    path = tmp_path / "x.png"
    img.save(path)
    arr = np.asarray(img)
    forms = [
        img,
        str(path),
        path,
        arr,
        arr.astype(np.float32) / 255.0,
        torch.from_numpy(arr).permute(2, 0, 1).contiguous(),
        {"bytes": path.read_bytes(), "path": None},
        {"bytes": None, "path": str(path)},
    ]
    ref = preprocess_image(img, 0, 32)
    for i, form in enumerate(forms):
        assert np.array_equal(preprocess_image(form, i, 32), ref), f"form {i} differs"


def test_grayscale_arrays_and_tensors_are_accepted():
    gray = np.random.RandomState(0).randint(0, 256, (20, 30), dtype=np.uint8)
    assert load_image(gray, 0).mode == "L"
    assert load_image(torch.from_numpy(gray), 0).mode == "L"
    assert load_image(gray[..., None], 0).mode == "L"


def test_image_keys_identify_content_not_object(tmp_path):
    a = _noise((20, 20), seed=1)
    b = a.copy()
    c = _noise((20, 20), seed=2)
    assert image_key(a, 0) == image_key(b, 1)
    assert image_key(a, 0) != image_key(c, 2)
    path = tmp_path / "a.png"
    a.save(path)
    assert image_key(str(path), 0) == image_key(tmp_path / "." / "a.png", 1)


def test_missing_file_names_the_index_and_path(tmp_path):
    with pytest.raises(ValueError, match=r"image 3 .*nope\.jpg.*file not found"):
        load_image(str(tmp_path / "nope.jpg"), 3)


def test_corrupt_bytes_name_the_index(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    with pytest.raises(ValueError, match=r"image 2 .*bad\.jpg.* (not a readable image|corrupt or truncated)"):
        load_image(str(bad), 2)
    with pytest.raises(ValueError, match="image 5 is not a readable image"):
        load_image({"bytes": b"garbage", "path": None}, 5)


def test_truncated_jpeg_is_reported_as_corrupt(tmp_path):
    buf = io.BytesIO()
    _noise((200, 200)).save(buf, format="JPEG")
    path = tmp_path / "cut.jpg"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ValueError, match=r"image 0 .*cut\.jpg.* corrupt or truncated"):
        load_image(str(path), 0)


def test_decompression_bomb_is_refused_with_the_index(tmp_path, monkeypatch):
    path = tmp_path / "big.png"
    Image.new("RGB", (400, 300)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 50_000)
    with pytest.raises(ValueError, match=r"image 7 .*big\.png.* too large"):
        load_image(str(path), 7)


def test_one_pixel_cap_holds_for_npy_bytes_arrays_tensors_and_pil_images(monkeypatch):
    # Files met PIL's MAX_IMAGE_PIXELS; .npy bytes (a 144-megapixel array was accepted), arrays, tensors and PIL
    # images did not. The .npy header is checked before the array is allocated.
    import capeval.clip.images as images
    from capeval.clip.npy_images import npy_bytes

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 50_000)
    monkeypatch.setattr(
        images, "read_npy", lambda *a: pytest.fail("the array was read before its size check")
    )
    pixels = np.zeros((300, 200, 3), np.uint8)  # 60,000 pixels
    for image in (
        {"bytes": npy_bytes(pixels), "path": None},
        pixels,
        torch.from_numpy(pixels).permute(2, 0, 1),
        Image.fromarray(pixels),
    ):
        with pytest.raises(
            ValueError,
            match=r"image 3 is too large: 200x300 is 60,000 pixels, over PIL's MAX_IMAGE_PIXELS of 50,000",
        ):
            load_image(image, 3)
    assert load_image(pixels[:250], 3).size == (200, 250)  # 50,000 pixels: at the cap, accepted


def test_unsupported_types_and_shapes_name_the_index():
    with pytest.raises(TypeError, match="image 4: expected"):
        load_image(12345, 4)
    with pytest.raises(ValueError, match=r"image 1: array of shape \(5, 5, 7\)"):
        load_image(np.zeros((5, 5, 7), dtype=np.uint8), 1)
    with pytest.raises(ValueError, match=r"image 0: float arrays must hold values in \[0, 1\]"):
        load_image(np.full((4, 4, 3), 3.0), 0)
    with pytest.raises(ValueError, match="image 2: unsupported array dtype int64"):
        load_image(np.zeros((4, 4, 3), dtype=np.int64), 2)
    with pytest.raises(ValueError, match=r"image 6 \('\.'\): is a folder"):
        load_image(".", 6)
    with pytest.raises(ValueError, match="image 8: a datasets Image dict needs 'bytes' or 'path'"):
        load_image({"bytes": None, "path": None}, 8)


# --- An image's identity is what the model sees, not the bytes that happen to be equal ---


def _palette_pair(size: int) -> tuple[Image.Image, Image.Image]:
    """Two palette images with the same indices and different colours, at the model's input size (no resize)."""
    indices = np.random.RandomState(0).randint(0, 4, (size, size)).astype(np.uint8)
    bright = Image.fromarray(indices, "P")
    bright.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])
    dark = Image.fromarray(indices, "P")
    dark.putpalette([0, 0, 0, 10, 10, 10, 20, 20, 20, 30, 30, 30])
    return bright, dark


def test_palette_images_with_other_palettes_score_as_their_rgb_conversions(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    bright, dark = _palette_pair(scorer.backbone.image_size)
    assert bright.tobytes() == dark.tobytes()  # the same indices: only the palettes differ
    scores = scorer(["a photo", "a photo"], images=[bright, dark])["scores"]
    as_rgb = scorer(["a photo", "a photo"], images=[bright.convert("RGB"), dark.convert("RGB")])["scores"]
    assert scores[0] != scores[1]
    assert scores == pytest.approx(as_rgb, abs=1e-6)


def test_image_keys_tell_palettes_apart_and_match_equal_images():
    from capeval.clip.images import image_key

    bright, dark = _palette_pair(8)
    assert image_key(bright, 0) != image_key(dark, 1)
    assert image_key(bright, 0) == image_key(bright.copy(), 1)


def test_an_array_and_a_tensor_of_the_same_bytes_in_their_two_layouts_are_two_pictures(tiny_clip_dir):
    from capeval.clip.images import image_key, load_image

    array = np.random.RandomState(1).randint(0, 256, (3, 8, 3), dtype=np.uint8)  # (H, W, C): 8 wide, 3 high
    tensor = torch.from_numpy(array.copy())  # (C, H, W): 3 wide, 8 high
    assert load_image(array, 0).size == (8, 3) and load_image(tensor, 1).size == (3, 8)
    assert image_key(array, 0) != image_key(tensor, 1)
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    both = scorer(["a photo", "a photo"], images=[array, tensor])["scores"]
    each = scorer(["a photo", "a photo"], images=[load_image(array, 0), load_image(tensor, 1)])["scores"]
    assert both[0] != both[1]
    assert both == pytest.approx(each, abs=1e-6)


def test_an_array_and_a_tensor_holding_the_same_pixels_are_read_and_encoded_once(tiny_clip_dir, monkeypatch):
    import capeval.clip.image_encoding as image_encoding
    from capeval.clip.images import image_key

    array = np.random.RandomState(2).randint(0, 256, (20, 30, 3), dtype=np.uint8)
    tensor = torch.from_numpy(array.copy()).permute(2, 0, 1)  # the same picture, (C, H, W)
    assert image_key(array, 0) == image_key(tensor, 1)
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


def test_a_bfloat16_tensor_reads_as_the_float32_tensor_of_its_values(tiny_clip_dir):
    values = torch.rand(3, 16, 16).bfloat16()
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    assert (
        scorer(["a photo"], images=[values])["scores"]
        == scorer(["a photo"], images=[values.float()])["scores"]
    )


# --- High-bit-depth and half-precision images ---


def _high_bit_depth_image(mode: str, values) -> Image.Image:
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
            ["a photo", "a photo"], images=[ok, _high_bit_depth_image(mode, values)]
        )


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_high_bit_depth_images_within_8_bit_levels_score_with_the_authors_pixels(tiny_clip_dir, mode):
    from authors_reference import authors_clip_s, authors_pixels

    from capeval.clip.backbones import load_backbone
    from capeval.clip.images import normalize_pixels, preprocess_image

    levels = np.random.RandomState(4).randint(0, 256, 40 * 40)
    img = _high_bit_depth_image(mode, levels)
    backbone = load_backbone(str(tiny_clip_dir))
    n = backbone.image_size
    ours = normalize_pixels(
        torch.from_numpy(preprocess_image(img, 0, n))[None], backbone.image_mean, backbone.image_std
    )
    assert torch.equal(ours[0], authors_pixels(img, n))
    score = capeval.CLIPScore(model=str(tiny_clip_dir))(["a photo"], images=[img])["scores"][0]
    assert score == pytest.approx(float(authors_clip_s(backbone.model, [img], ["a photo"])[0]), abs=1e-5)


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
    got = scorer(PREDICTIONS, images=[tensor, torch.from_numpy(half)])
    want = scorer(PREDICTIONS, images=[tensor.float(), torch.from_numpy(as_float32)])
    assert got["scores"] == want["scores"]


# --- An image dict's bytes must be bytes ---


def test_an_image_dict_with_a_str_under_bytes_is_a_type_error_naming_the_index(tiny_clip_dir):
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")
    image = two_images()[0]
    with pytest.raises(
        TypeError, match="image 1: the 'bytes' of a datasets Image dict must be bytes .* got str"
    ):
        scorer(PREDICTIONS, images=[image, {"bytes": "iVBORw0KGgo=", "path": None}])


def test_an_rgb_array_already_at_the_input_size_comes_out_as_pil_would_give_it_without_pil():
    from capeval.clip import images as image_module

    rng = np.random.default_rng(3)
    for size in (32, 224):
        array = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        through_pil = image_module.resize_and_crop(image_module.load_image(array, 0), size)
        fast = image_module.preprocess_image(array, 0, size)
        np.testing.assert_array_equal(fast, through_pil)
        assert fast.flags.c_contiguous
    # Another size, or another dtype, still goes through PIL's resize and conversion.
    small = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    assert image_module.preprocess_image(small, 0, 32).shape == (32, 32, 3)
