"""Bounds on reading an image: an extreme aspect ratio is refused from the header before anything is decoded or
resized, the largest accepted ratio resizes to a bounded area with the authors' pixels, a decompression bomb or
running out of memory is a capeval error naming the image, video frames meet the same bound, and a device or a
pipe is refused unread wherever a file is read."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image

import capeval
from tests.tiny_scorers import PREDICTIONS, two_images


def _png(width: int, height: int) -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("L", (width, height)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def decodes_counted(monkeypatch):
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


# --- An extreme aspect ratio is refused before anything is decoded or resized ---


def test_a_274_byte_1x100000_png_is_refused_from_its_header_before_decoding(tiny_clip_dir, decodes_counted):
    data = _png(1, 100_000)
    assert len(data) < 300
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    n = scorer.backbone.image_size  # an image already at the input size is not resized
    with pytest.raises(
        ValueError,
        match=r"image 1 is 1x100000 pixels, an aspect ratio of 100,000:1; capeval "
        r"accepts at most 100:1",
    ):
        scorer(["a", "b"], images=[Image.new("RGB", (n, n)), {"bytes": data, "path": None}])
    assert decodes_counted["load"] == 0 and decodes_counted["resize"] == []


@pytest.mark.parametrize("size", [(1, 1_000_000), (25_000_000, 1), (3, 1000)])
def test_extreme_aspect_ratios_in_memory_are_refused_before_any_resize(tiny_clip_dir, decodes_counted, size):
    img = Image.new("1", size)
    w, h = size
    with pytest.raises(ValueError, match=rf"image 0 is {w}x{h} pixels, an aspect ratio of [\d,]+:1"):
        capeval.CLIPScore(model=str(tiny_clip_dir))(["a"], images=[img])
    assert decodes_counted["resize"] == []


def test_a_path_with_an_extreme_aspect_ratio_names_index_and_file(tmp_path, tiny_clip_dir, decodes_counted):
    path = tmp_path / "strip.png"
    path.write_bytes(_png(5000, 2))
    with pytest.raises(
        ValueError, match=r"image 0 \('.*strip\.png'\) is 5000x2 pixels, an aspect ratio of 2,500:1"
    ):
        capeval.CLIPScore(model=str(tiny_clip_dir))(["a"], images=[str(path)])
    assert decodes_counted["load"] == 0


def test_the_largest_accepted_aspect_ratio_resizes_to_at_most_100_times_the_input_area(
    tiny_clip_dir, decodes_counted
):
    from authors_reference import authors_pixels

    from capeval.clip.backbones import load_backbone
    from capeval.clip.images import MAX_ASPECT_RATIO, normalize_pixels, preprocess_image

    backbone = load_backbone(str(tiny_clip_dir))
    n = backbone.image_size
    rng = np.random.RandomState(5)
    for size in [(7, 7 * MAX_ASPECT_RATIO), (3 * MAX_ASPECT_RATIO, 3)]:
        img = Image.fromarray(rng.randint(0, 256, (size[1], size[0], 3), dtype=np.uint8))
        decodes_counted["resize"].clear()
        pixels = preprocess_image(img, 0, n)
        (resized,) = decodes_counted["resize"]
        assert resized[0] * resized[1] <= MAX_ASPECT_RATIO * n * n
        ours = normalize_pixels(torch.from_numpy(pixels)[None], backbone.image_mean, backbone.image_std)[0]
        assert torch.equal(ours, authors_pixels(img, n))  # the bound refuses; it never changes a pixel


# --- A decompression bomb, or running out of memory, is an error naming the image ---


def test_a_decompression_bomb_is_a_capeval_error_naming_the_image(monkeypatch, tiny_clip_dir):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    scorer = capeval.CLIPScore(model=str(tiny_clip_dir))
    warned = {"bytes": _png(120, 120), "path": None}  # 14,400 pixels: above the limit, PIL only warns
    refused = {"bytes": _png(200, 200), "path": None}  # 40,000: above twice the limit, PIL raises
    for image in (warned, refused):
        with pytest.raises(ValueError, match=r"image 1 is too large: .*MAX_IMAGE_PIXELS"):
            scorer(["a", "b"], images=[Image.new("RGB", (8, 8)), image])


def test_running_out_of_memory_while_decoding_is_a_capeval_error_naming_the_image(monkeypatch, tmp_path):
    from PIL import ImageFile

    from capeval.clip.images import load_image

    path = tmp_path / "big.png"
    path.write_bytes(_png(64, 64))

    def exhausted(self):
        raise MemoryError

    monkeypatch.setattr(ImageFile.ImageFile, "load", exhausted)
    with pytest.raises(
        ValueError, match=r"image 4 \('.*big\.png'\) is too large to decode: the machine ran out"
    ):
        load_image(str(path), 4)


# --- Video frames meet the same bound ---


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


# --- Devices and pipes are refused unread ---


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
        scorer(PREDICTIONS, images=[two_images()[0], str(pipe)])
    with pytest.raises(ValueError, match="vectors /dev/zero: not a regular file"):
        capeval.WMD(vectors="/dev/zero")
    with pytest.raises(ValueError, match="checkpoint '/dev/zero': /dev/zero is not a regular file"):
        capeval.PACScore(checkpoint="/dev/zero")
