"""Image inputs: the authors' preprocessing, every accepted form, and clear errors for bad images."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from authors_reference import authors_pixels
from PIL import Image

from capeval.clip.images import image_key, load_image, normalize_pixels, preprocess_image, resize_and_crop

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
