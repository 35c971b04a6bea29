"""Hostile input against the Spaces: every visitor input is bounded and refused by name before it costs work."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from capeval.demo import DEFAULT_LIMITS, InputError, Limits, get_panel


# --- Item 7: the Spaces' pixel limits count the pixels of the resize, not only of the file ---
@pytest.fixture
def item7_model(monkeypatch, tiny_clip_dir):
    monkeypatch.setenv("CAPEVAL_DEMO_MODEL", str(tiny_clip_dir))
    return "configured"


def test_a_1x25000000_strip_within_the_megapixel_limit_is_refused_from_its_header(item7_model, uploads):
    from capeval.demo.uploads import check_image_header

    path = uploads / "strip.png"
    Image.new("1", (1, 25_000_000)).save(path)  # exactly the 25-megapixel limit, a few kilobytes
    assert 1 * 25_000_000 <= DEFAULT_LIMITS.max_image_pixels
    message = r"The image is 1x25000000, an aspect ratio of 25,000,000:1; this demo accepts at most 100:1"
    with pytest.raises(InputError, match=message):
        check_image_header(path, DEFAULT_LIMITS)
    with pytest.raises(InputError, match=message):
        get_panel("clipscore").score(image=str(path), captions="a dog", model=item7_model)


def test_the_image_panels_count_the_resized_image_against_the_pixel_limit(item7_model, uploads):
    from capeval.demo.panels_image import CLIPScorePanel, RefCLIPScorePanel

    path = uploads / "wide.png"
    Image.new("RGB", (2000, 20), "gray").save(path)  # 40,000 pixels in the file, 100:1
    limits = Limits(max_image_pixels=50_000)  # the model (input 32) resizes it to 3200x32 = 102,400
    message = (
        r"The image is 2000x20: the model resizes it to 3200x32 \(102,400 pixels\) before cropping; "
        r"this demo accepts at most 50,000 pixels per image"
    )
    with pytest.raises(InputError, match=message):
        CLIPScorePanel(limits).score(image=str(path), captions="a dog", model=item7_model)
    with pytest.raises(InputError, match=message):
        RefCLIPScorePanel(limits).score(
            image=str(path), captions="a dog", references="a cat", model=item7_model
        )
    scored = CLIPScorePanel(Limits(max_image_pixels=110_000)).score(
        image=str(path), captions="a dog", model=item7_model
    )
    assert len(scored.rows) == 1


def test_a_video_with_an_extreme_aspect_ratio_is_refused_from_its_container(uploads):
    from capeval.clip.video import write_video
    from capeval.demo.uploads import check_video_header

    path = write_video(uploads / "strip.mp4", [np.zeros((2, 400, 3), dtype=np.uint8)] * 2, fps=2)
    with pytest.raises(
        InputError, match=r"The video is 400x2, an aspect ratio of 200:1; this demo accepts at most"
    ):
        check_video_header(path, DEFAULT_LIMITS)


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


def test_the_emscore_space_refuses_a_strip_frame_before_sampling_it(item7_model, uploads, item8_reads):
    strip = uploads / "strip.png"
    Image.new("RGB", (1, 1000)).save(strip)
    with pytest.raises(
        InputError, match=r"The frame 1 is 1x1000, an aspect ratio of 1,000:1; this demo accepts"
    ):
        get_panel("emscore").score(frames=[str(strip)], captions="a dog", model=item7_model, num_frames=32)
    assert item8_reads == []


def test_the_emscore_space_bounds_the_pixels_of_a_request_and_says_the_limit(
    item7_model, uploads, item8_reads
):
    from capeval.demo.panels_video import EMScorePanel

    frames = [_item8_frame(uploads / f"f{k}.png", size=(400, 300), seed=k) for k in range(4)]
    # Each frame: 120,000 decoded + 42x32 = 1,344 resized; four of them are 485,376 pixels.
    panel = EMScorePanel(Limits(max_request_pixels=400_000))
    message = (
        r"The 4 frames sampled 32 times need 485,376 pixels of decoding and resizing \(each distinct frame once\); "
        r"this demo handles at most 400,000 pixels per request"
    )
    with pytest.raises(InputError, match=message):
        panel.score(frames=frames, captions="a dog", model=item7_model, num_frames=32)
    assert item8_reads == []
    scored = panel.score(frames=frames[:3], captions="a dog", model=item7_model, num_frames=32)
    assert len(scored.rows) == 1
    # Scoring and the heatmap each read the three distinct frames once, however often they are sampled.
    assert len(item8_reads) == 2 * 3


def test_a_video_request_counts_its_sampled_frames_after_resizing(item7_model, uploads):
    from capeval.clip.video import write_video
    from capeval.demo.panels_video import EMScorePanel

    path = write_video(uploads / "v.mp4", [np.zeros((32, 64, 3), dtype=np.uint8)] * 4, fps=4)
    # Each sampled frame: 2,048 converted + 64x32 = 2,048 resized; 16 samples are 65,536 pixels.
    with pytest.raises(
        InputError, match=r"16 frames of this video need 65,536 pixels of decoding and resizing"
    ):
        EMScorePanel(Limits(max_request_pixels=60_000)).score(
            video=str(path), captions="a dog", model=item7_model, num_frames=16
        )
