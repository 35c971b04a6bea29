"""Hostile input against the Spaces: every visitor input is bounded and refused by name before it costs work."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image


# --- Item 8: EMScore frames: each distinct frame read once, the request's pixels bounded ---
def _item8_frame(path, size=(40, 30), seed=0):
    Image.fromarray(np.random.RandomState(seed).randint(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
        path
    )
    return str(path)


@pytest.fixture
def item8_reads(monkeypatch):
    """Counts the frames the video reader decodes and resizes."""
    import capeval.clip.video as video

    reads = []
    real = video.resize_and_crop
    monkeypatch.setattr(video, "resize_and_crop", lambda img, size: reads.append(img.size) or real(img, size))
    return reads


def test_a_frame_sampled_32_times_is_decoded_and_resized_once_with_the_same_pixels(tmp_path, item8_reads):
    from capeval.clip.images import preprocess_image
    from capeval.clip.video import read_frames

    frame = _item8_frame(tmp_path / "f.png")
    frames = read_frames([frame], 32, 32, 0)
    assert len(item8_reads) == 1
    assert len(frames) == 32
    assert all(np.array_equal(f, preprocess_image(frame, 0, 32)) for f in frames)


def test_identical_frames_given_several_times_are_read_once(tmp_path, item8_reads):
    from capeval.clip.video import read_frames

    a = Image.open(_item8_frame(tmp_path / "a.png", seed=1)).convert("RGB")
    b = Image.open(_item8_frame(tmp_path / "b.png", seed=2)).convert("RGB")
    frames = read_frames([a, a.copy(), b, a, b.copy()], None, 32, 0)
    assert len(item8_reads) == 2
    assert np.array_equal(frames[0], frames[3]) and not np.array_equal(frames[0], frames[2])
    stacked = np.stack(
        [np.asarray(a), np.asarray(b), np.asarray(a)]
    )  # an array video: each frame its content
    item8_reads.clear()
    read_frames(stacked, 6, 32, 0)
    assert len(item8_reads) == 2


def test_deduplicated_frames_give_the_embeddings_of_frame_by_frame_encoding(tiny_clip_dir, tmp_path):
    import torch

    from capeval.clip.backbones import load_backbone
    from capeval.clip.frame_encoding import encode_videos
    from capeval.clip.image_encoding import encode_images
    from capeval.clip.images import preprocess_image

    backbone = load_backbone(str(tiny_clip_dir))
    a, b = _item8_frame(tmp_path / "a.png", seed=3), _item8_frame(tmp_path / "b.png", seed=4)
    (emb,) = encode_videos(backbone, [[a, a, b]], num_frames=7)
    n = backbone.image_size
    each = encode_images(backbone, [preprocess_image(f, 0, n) for f in (a, b)])
    expected = each[
        [0, 0, 0, 1, 1, 1, 1]
    ]  # np.linspace(0, 2, 7) truncated: frames 0 0 0 1 1 1 2 -> a a a a a a b
    expected = each[[0, 0, 0, 0, 0, 0, 1]]
    assert torch.equal(emb, expected)
