"""Images through evaluate's own add/add_batch/compute: stored in its Arrow cache without a pixel changing.

Each case is an image that datasets' own ``Image()`` feature would change (an EXIF-rotated JPEG comes back
transposed, a JPEG opened from bytes is re-encoded lossily, an edited file-backed image is replaced by its file,
arrays in (C, H, W) or float are refused or cast); the module's scores must equal ``capeval.CLIPScore`` called
directly on the same objects, value for value.
"""

from __future__ import annotations

import io

import datasets
import evaluate
import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

import capeval
from capeval.clip.images import load_image
from capeval.clip.npy_images import npy_bytes
from capeval.integrations.evaluate_storage import ARRAY_MODES, PNG_MODES, TIFF_MODES, stored_image

RNG = np.random.default_rng(7)


def _noise(height=48, width=64) -> np.ndarray:
    return RNG.integers(0, 256, (height, width, 3), dtype=np.uint8)


def _jpeg_bytes(arr: np.ndarray, orientation: int | None = None) -> bytes:
    buffer = io.BytesIO()
    image = Image.fromarray(arr)
    if orientation is None:
        image.save(buffer, format="JPEG", quality=80)
    else:
        exif = Image.Exif()
        exif[0x0112] = orientation  # EXIF Orientation: 6 = rotate 90 degrees clockwise to display
        image.save(buffer, format="JPEG", quality=80, exif=exif)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def clipscore(repo_root, tiny_clip_dir):
    return evaluate.load(str(repo_root / "metrics" / "clipscore"), model=str(tiny_clip_dir), device="cpu")


@pytest.fixture(scope="module")
def direct(tiny_clip_dir):
    return capeval.CLIPScore(model=str(tiny_clip_dir), device="cpu")


def _streamed(module, images: list) -> dict:
    captions = [f"picture number {i}" for i in range(len(images))]
    module.add_batch(predictions=captions[:1], images=images[:1])
    for caption, image in zip(captions[1:], images[1:], strict=True):
        module.add(prediction=caption, images=image)
    return module.compute()


def _direct(scorer, images: list) -> dict:
    return scorer([f"picture number {i}" for i in range(len(images))], images=images)


def test_an_exif_rotated_jpeg_file_scores_as_capeval_reads_it_not_transposed(clipscore, direct, tmp_path):
    path = tmp_path / "rotated.jpg"
    path.write_bytes(_jpeg_bytes(_noise(40, 70), orientation=6))
    # datasets' decoding applies the EXIF rotation (70x40 becomes 40x70); capeval, as the authors, does not.
    decoded = datasets.Image().decode_example({"path": str(path), "bytes": None})
    assert decoded.size == (40, 70) and Image.open(path).size == (70, 40)
    images = [str(path), path, Image.open(path)]
    assert _streamed(clipscore, images) == _direct(direct, images)


def test_a_pil_jpeg_opened_from_bytes_is_stored_losslessly(clipscore, direct):
    image = Image.open(io.BytesIO(_jpeg_bytes(_noise())))
    assert image.format == "JPEG" and not getattr(image, "filename", "")
    stored = stored_image(image, 0)
    assert stored["bytes"].startswith(b"\x93NUMPY")  # its pixels as decoded, not a second JPEG generation
    assert np.array_equal(np.asarray(load_image(stored, 0)), np.asarray(image))
    assert _streamed(clipscore, [image, image.copy()]) == _direct(direct, [image, image.copy()])


def test_an_edited_file_backed_image_keeps_its_edits(clipscore, direct, tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(_noise()).save(path)
    edited = Image.open(path)
    edited.load()
    ImageDraw.Draw(edited).rectangle((0, 0, 40, 30), fill=(255, 0, 0))
    assert edited.filename == str(path)  # datasets would store this path and lose the rectangle
    assert not np.array_equal(
        np.asarray(load_image(stored_image(edited, 0), 0)), np.asarray(Image.open(path))
    )
    got = _streamed(clipscore, [edited, str(path)])
    assert got == _direct(direct, [edited, str(path)])
    assert got["scores"][0] != got["scores"][1]


@pytest.mark.parametrize("mode", ["P", "LA", "I;16", "1", "L", "RGBA", "I", "F", "CMYK"])
def test_pil_modes_score_as_the_plain_api_scores_them(clipscore, direct, mode):
    base = Image.fromarray(_noise())
    if mode == "I;16":
        image = Image.fromarray(RNG.integers(0, 256, (48, 64)).astype(np.uint16))
    elif mode in ("I", "F"):
        image = Image.fromarray(
            RNG.integers(0, 256, (48, 64)).astype(np.int32 if mode == "I" else np.float32)
        )
    else:
        image = base.convert(mode)
    assert image.mode == mode
    assert _streamed(clipscore, [image, base]) == _direct(direct, [image, base])


@pytest.mark.parametrize("mode", sorted(ARRAY_MODES | PNG_MODES | TIFF_MODES))
def test_every_stored_pil_mode_reads_back_with_the_same_mode_palette_and_pixels(mode):
    if mode.startswith("I"):
        dtype = np.uint16 if mode.startswith("I;16") else np.int32
        image = Image.fromarray(RNG.integers(0, 256, (9, 7)).astype(dtype))
        image = image if mode != "I;16B" else image.convert("I;16B")
    elif mode == "F":
        image = Image.fromarray(RNG.random((9, 7), dtype=np.float32) * 255)
    else:
        image = Image.fromarray(_noise(9, 7)).convert(mode)
    assert image.mode == mode
    back = load_image(stored_image(image, 0), 0)
    assert (back.mode, back.size, back.tobytes()) == (image.mode, image.size, image.tobytes())
    assert back.getpalette() == image.getpalette()


def test_a_mode_no_lossless_container_holds_is_refused_by_name():
    with pytest.raises(ValueError, match=r"image 0 is a PIL image of mode 'HSV'.*convert it first"):
        stored_image(Image.fromarray(_noise()).convert("HSV"), 0)


def test_arrays_and_tensors_keep_dtype_range_and_layout(clipscore, direct):
    pixels = _noise()
    images = [
        pixels,  # uint8 (H, W, C)
        pixels.astype(np.float32) / 255,  # float in [0, 1]: datasets would refuse a multi-channel float array
        torch.from_numpy(pixels).permute(2, 0, 1).contiguous(),  # uint8 (C, H, W)
        torch.from_numpy(pixels).permute(2, 0, 1).float() / 255,  # float (C, H, W)
        torch.from_numpy(pixels).permute(2, 0, 1).to(torch.bfloat16) / 255,  # widened exactly to float32
        pixels[..., 0] > 128,  # bool mask
    ]
    assert _streamed(clipscore, images) == _direct(direct, images)


def test_an_image_capeval_would_refuse_is_refused_by_add_batch_before_anything_is_stored(clipscore):
    with pytest.raises(ValueError, match="aspect ratio of 300:1"):
        clipscore.add_batch(predictions=["a", "b"], images=[_noise(), np.zeros((1, 300, 3), np.uint8)])
    with pytest.raises(ValueError, match=r"image 0: float arrays must hold values in \[0, 1\]"):
        clipscore.add(prediction="a", images=np.full((8, 8, 3), 2.0, np.float32))
    with pytest.raises(ValueError, match="file not found"):
        clipscore.add_batch(predictions=["a"], images=["/no/such/picture.png"])
    assert len(clipscore) == 0  # nothing was stored


def test_a_stored_array_is_checked_from_its_header_before_it_is_allocated(monkeypatch):
    import capeval.clip.images as images

    monkeypatch.setattr(
        images, "read_npy", lambda *a: pytest.fail("the array was read before its size check")
    )
    wide = {"bytes": npy_bytes(np.zeros((2, 500), np.uint8)), "path": None}
    with pytest.raises(ValueError, match="aspect ratio of 250:1"):
        load_image(wide, 3)
    truncated = {"bytes": npy_bytes(np.zeros((64, 64, 3), np.uint8))[:-10], "path": None}
    with pytest.raises(ValueError, match="image 4: the .npy array is truncated"):
        load_image(truncated, 4)


def test_a_stored_array_never_unpickles():
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="array of Python objects is refused"):
        load_image({"bytes": buffer.getvalue(), "path": None}, 0)


def test_image_embeds_stand_in_for_images_without_making_them_required(repo_root, tiny_clip_dir, direct):
    module = evaluate.load(str(repo_root / "metrics" / "clipscore"), model=str(tiny_clip_dir), device="cpu")
    images = [_noise(), _noise()]
    embeds = direct.image_embeddings(images, None, 2)
    captions = ["picture number 0", "picture number 1"]
    module.add_batch(predictions=captions[:1])
    module.add(prediction=captions[1])
    assert module.compute(image_embeds=embeds) == direct(captions, image_embeds=embeds)
    assert module.compute(predictions=captions, image_embeds=embeds) == direct(captions, image_embeds=embeds)
    module.add_batch(predictions=captions[:1], images=images[:1])
    module.add(prediction=captions[1])
    with pytest.raises(
        ValueError, match="prediction 1 was stored without images= while prediction 0 has one"
    ):
        module.compute()
    module.add_batch(predictions=captions, images=images)
    with pytest.raises(ValueError, match="prediction 0 was given images= .* and image_embeds= was given"):
        module.compute(image_embeds=embeds)
    with pytest.raises(TypeError, match="add_batch takes images=, not image_embeds="):
        module.add_batch(predictions=captions, image_embeds=embeds)
    with pytest.raises(ValueError, match="images= given without predictions="):
        module.compute(images=images)
