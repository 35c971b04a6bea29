"""Video decoding, frame sampling and frame embeddings (capeval.clip.video), on videos written by the tests; each
distinct frame is read once."""

from __future__ import annotations

import os
import warnings

import av
import numpy as np
import pytest
import torch
from PIL import Image

from capeval.clip import frame_encoding
from capeval.clip import video as vid
from capeval.clip.backbones import load_backbone
from capeval.clip.frame_encoding import encode_videos, frame_embeddings
from capeval.clip.image_encoding import encode_images
from capeval.clip.video import decode_video, sample_indices, video_key, write_video
from tests.frame_reads import count_frame_reads, write_frame

SIZE = 32


def gray_frames(n: int, size: int = 48) -> list[np.ndarray]:
    """Frame i is a flat gray of level 10 * i: its decoded mean tells which frame it was."""
    return [np.full((size, size, 3), 10 * i, dtype=np.uint8) for i in range(n)]


def frame_levels(frames) -> list[int]:
    return [int(round(float(f.mean()) / 10)) for f in frames]


@pytest.fixture(scope="module")
def gray_video(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("videos") / "gray.mp4", gray_frames(23))


@pytest.mark.parametrize(
    ("n", "k", "expected"),
    [
        (100, 10, [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]),
        (23, 4, [0, 7, 14, 22]),
        (3, 5, [0, 0, 1, 1, 2]),
        (1, 3, [0, 0, 0]),
        (5, None, [0, 1, 2, 3, 4]),
    ],
)
def test_sample_indices_truncate_numpy_linspace_like_the_authors(n, k, expected):
    assert sample_indices(n, k) == expected
    if k is not None:
        assert expected == [int(i) for i in np.linspace(0, n - 1, k)]


@pytest.mark.parametrize(
    ("k", "error"), [(0, ValueError), (-2, ValueError), (2.5, TypeError), (True, TypeError)]
)
def test_bad_num_frames_is_a_clear_error(k, error):
    with pytest.raises(error, match="num_frames"):
        vid.check_num_frames(k)


def test_every_frame_is_decoded_in_order_by_default(gray_video):
    frames = decode_video(gray_video, None, SIZE)
    assert len(frames) == 23
    assert frame_levels(frames) == list(range(23))
    assert all(f.shape == (SIZE, SIZE, 3) and f.dtype == np.uint8 for f in frames)


def test_num_frames_keeps_the_evenly_spaced_frames(gray_video):
    frames = decode_video(gray_video, 5, SIZE)
    assert frame_levels(frames) == sample_indices(23, 5) == [0, 5, 11, 16, 22]


def test_only_the_sampled_frames_are_converted(gray_video, monkeypatch):
    calls = []
    real = vid.resize_and_crop
    monkeypatch.setattr(vid, "resize_and_crop", lambda img, size: calls.append(1) or real(img, size))
    decode_video(gray_video, 4, SIZE)
    assert len(calls) == 4


def test_a_wrong_header_frame_count_still_samples_the_decoded_frames(gray_video, monkeypatch):
    for wrong in (40, 9):
        monkeypatch.setattr(vid, "_count_frames", lambda *a, wrong=wrong: wrong)
        assert frame_levels(decode_video(gray_video, 5, SIZE)) == [0, 5, 11, 16, 22]


def test_frames_are_preprocessed_like_images(gray_video):
    rgb = [f.to_ndarray(format="rgb24") for f in av.open(str(gray_video)).decode(video=0)]
    backbone_size = 24
    expected = [vid.resize_and_crop(Image.fromarray(a), backbone_size) for a in rgb]
    got = decode_video(gray_video, None, backbone_size)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_frame_lists_arrays_and_tensors_give_the_same_frames(gray_video, tmp_path):
    arrays = gray_frames(6)
    pils = [Image.fromarray(a) for a in arrays]
    paths = []
    for i, p in enumerate(pils):
        paths.append(tmp_path / f"f{i}.png")
        p.save(paths[-1])
    stacked = np.stack(arrays)
    tensor = torch.from_numpy(stacked).permute(0, 3, 1, 2)
    outs = [vid.read_frames(v, 3, SIZE, 0) for v in (arrays, pils, paths, stacked, tensor)]
    for out in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(outs[0], out, strict=True))
    assert frame_levels(outs[0]) == [0, 2, 5]


def test_video_keys_identify_equal_content_and_paths(gray_video):
    frames = gray_frames(3)
    assert video_key(frames, 0) == video_key([f.copy() for f in frames], 1)
    assert video_key(frames, 0) != video_key(frames[:2], 1)
    assert video_key(gray_video, 0) == video_key(str(gray_video), 1)


def test_video_keys_tell_array_and_tensor_layouts_apart():
    from capeval.clip.video import video_key

    frames = np.random.RandomState(3).randint(0, 256, (2, 3, 8, 3), dtype=np.uint8)  # (T, H, W, C)
    same_bytes = torch.from_numpy(frames.copy())  # read as (T, C, H, W): other frames
    same_frames = torch.from_numpy(frames.copy()).permute(0, 3, 1, 2)
    assert video_key(frames, 0) != video_key(same_bytes, 1)
    assert video_key(frames, 0) == video_key(same_frames, 2)


@pytest.fixture(scope="module")
def broken_videos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("broken")
    good = write_video(folder / "good.mp4", gray_frames(8))
    data = good.read_bytes()
    (folder / "truncated.mp4").write_bytes(data[: len(data) // 2])
    (folder / "garbage.mp4").write_bytes(
        np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes()
    )
    (folder / "empty.mp4").write_bytes(b"")
    (folder / "a_folder.mp4").mkdir()
    # A Matroska file whose video stream never receives a frame (only its audio stream has packets).
    with av.open(str(folder / "zero_frames.mkv"), "w") as c:
        v = c.add_stream("libx264", rate=10)
        v.width = v.height = 32
        v.pix_fmt = "yuv420p"
        a = c.add_stream("pcm_s16le", rate=8000)
        c.start_encoding()
        chunk = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        chunk.sample_rate = 8000
        c.mux(a.encode(chunk))
        c.mux(a.encode())
        c.mux(v.encode())
    with av.open(str(folder / "audio_only.wav"), "w") as c:
        a = c.add_stream("pcm_s16le", rate=8000)
        chunk = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        chunk.sample_rate = 8000
        c.mux(a.encode(chunk))
        c.mux(a.encode())
    return folder


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("missing.mp4", "file not found"),
        ("a_folder.mp4", "is a folder"),
        ("empty.mp4", "empty file"),
        ("garbage.mp4", "not a readable video file"),
        ("truncated.mp4", "truncated"),
        ("zero_frames.mkv", "no decodable frames"),
        ("audio_only.wav", "no video stream"),
    ],
)
@pytest.mark.parametrize("num_frames", [None, 4])
def test_broken_videos_give_errors_naming_the_item(broken_videos, name, match, num_frames):
    path = broken_videos / name
    with pytest.raises(ValueError, match=rf"^video 7 \('{path}'\).*{match}"):
        decode_video(path, num_frames, SIZE, index=7)


def test_a_video_that_decodes_fewer_frames_than_announced_is_reported(gray_video, monkeypatch):
    real = vid._decode_selected

    def announcing_more(*args):
        kept, n, _ = real(*args)
        return kept, n, n + 5

    monkeypatch.setattr(vid, "_decode_selected", announcing_more)
    with pytest.warns(UserWarning, match="announces 28 frames but only 23 decoded"):
        decode_video(gray_video, None, SIZE, index=2)


def test_bad_frames_in_a_frame_list_name_the_video_and_the_frame():
    with pytest.raises(ValueError, match="video 3 is an empty list of frames"):
        video_key([], 3)
    with pytest.raises(TypeError, match="video 1, frame 2"):
        video_key([np.zeros((4, 4, 3), np.uint8)] * 2 + [object()], 1)
    with pytest.raises(ValueError, match="video 0, frame 1"):
        vid.read_frames([np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 7), np.uint8)], None, SIZE, 0)
    with pytest.raises(ValueError, match="video 5: an array video must be 4-D"):
        video_key(np.zeros((4, 4, 3), np.uint8), 5)
    with pytest.raises(TypeError, match="video 4: expected"):
        video_key(42, 4)


def test_encode_videos_matches_encode_images_and_decodes_each_video_once(
    tiny_clip_dir, gray_video, monkeypatch
):
    backbone = load_backbone(str(tiny_clip_dir), device="cpu")
    decoded = []
    real = vid.decode_video
    monkeypatch.setattr(vid, "decode_video", lambda path, *a: decoded.append(path) or real(path, *a))
    frames_list = gray_frames(5)
    embs = encode_videos(
        backbone, [gray_video, frames_list, str(gray_video), gray_video], num_frames=3, batch_size=2
    )
    assert len(decoded) == 1
    assert [tuple(e.shape) for e in embs] == [(3, backbone.embed_dim)] * 4
    assert embs[0] is embs[2] is embs[3]
    expected = encode_images(backbone, decode_video(gray_video, 3, backbone.image_size))
    torch.testing.assert_close(embs[0], expected)
    torch.testing.assert_close(embs[1], encode_images(backbone, [frames_list[i] for i in (0, 2, 4)]))
    torch.testing.assert_close(embs[0].norm(dim=1), torch.ones(3))


def test_encode_videos_flushes_in_chunks_without_changing_results(tiny_clip_dir, monkeypatch):
    backbone = load_backbone(str(tiny_clip_dir), device="cpu")
    videos = [gray_frames(n) for n in (3, 7, 2, 5)]
    whole = encode_videos(backbone, videos, batch_size=64)
    # With batch_size=1: an encoder call every 4 frames.
    monkeypatch.setattr(frame_encoding, "CHUNK_FRAMES", 1)
    chunked = encode_videos(backbone, videos, batch_size=1, num_workers=1)
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_precomputed_frame_embeddings_are_sampled_and_normalised():
    rng = np.random.default_rng(0)
    raw = [rng.normal(size=(k, 8)).astype(np.float32) for k in (12, 3)]
    out = frame_embeddings(raw, 2, 8, num_frames=4)
    assert [tuple(t.shape) for t in out] == [(4, 8), (4, 8)]
    torch.testing.assert_close(
        out[0], torch.nn.functional.normalize(torch.from_numpy(raw[0][[0, 3, 7, 11]]), dim=-1)
    )
    stacked = frame_embeddings(np.stack([raw[0], raw[0]]), 2, 8)
    assert stacked[1].shape == (12, 8)


@pytest.mark.parametrize(
    ("embeds", "error", "match"),
    [
        ([np.zeros((3, 8))], ValueError, "got 1 video_embeds for 2 predictions"),
        ([np.zeros((3, 8)), np.zeros((3, 5))], ValueError, r"video_embeds 1 has shape \(3, 5\)"),
        ([np.zeros((3, 8)), np.zeros((0, 8))], ValueError, "video_embeds 1 has no frames"),
        ([np.zeros((3, 8)), np.full((2, 8), np.nan)], ValueError, "video_embeds 1 holds NaN"),
        (np.zeros((2, 8)), ValueError, "one \\(N, K, D\\) array"),
        ("frames", TypeError, "one \\(K, D\\) array per prediction"),
    ],
)
def test_bad_precomputed_frame_embeddings_are_clear_errors(embeds, error, match):
    with pytest.raises(error, match=match):
        frame_embeddings(embeds, 2, 8)


def test_write_video_round_trips_odd_sizes(tmp_path):
    frames = [np.full((33, 45, 3), 200, np.uint8)] * 3
    path = write_video(tmp_path / "odd.mp4", frames)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = decode_video(path, None, SIZE)
    assert len(got) == 3 and os.path.getsize(path) > 0


# --- Each distinct frame is read once ---


@pytest.fixture
def frame_reads(monkeypatch):
    """Counts the frames the video reader decodes and resizes."""
    return count_frame_reads(monkeypatch)


def test_a_frame_sampled_32_times_is_decoded_and_resized_once_with_the_same_pixels(tmp_path, frame_reads):
    from capeval.clip.images import preprocess_image
    from capeval.clip.video import read_frames

    frame = write_frame(tmp_path / "f.png")
    frames = read_frames([frame], 32, 32, 0)
    assert len(frame_reads) == 1
    assert len(frames) == 32
    assert all(np.array_equal(f, preprocess_image(frame, 0, 32)) for f in frames)


def test_identical_frames_given_several_times_are_read_once(tmp_path, frame_reads):
    from capeval.clip.video import read_frames

    a = Image.open(write_frame(tmp_path / "a.png", seed=1)).convert("RGB")
    b = Image.open(write_frame(tmp_path / "b.png", seed=2)).convert("RGB")
    frames = read_frames([a, a.copy(), b, a, b.copy()], None, 32, 0)
    assert len(frame_reads) == 2
    assert np.array_equal(frames[0], frames[3]) and not np.array_equal(frames[0], frames[2])
    stacked = np.stack(
        [np.asarray(a), np.asarray(b), np.asarray(a)]
    )  # an array video: each frame its content
    frame_reads.clear()
    read_frames(stacked, 6, 32, 0)
    assert len(frame_reads) == 2


def test_deduplicated_frames_give_the_embeddings_of_frame_by_frame_encoding(tiny_clip_dir, tmp_path):
    import torch

    from capeval.clip.backbones import load_backbone
    from capeval.clip.frame_encoding import encode_videos
    from capeval.clip.image_encoding import encode_images
    from capeval.clip.images import preprocess_image

    backbone = load_backbone(str(tiny_clip_dir))
    a, b = write_frame(tmp_path / "a.png", seed=3), write_frame(tmp_path / "b.png", seed=4)
    (emb,) = encode_videos(backbone, [[a, a, b]], num_frames=7)
    n = backbone.image_size
    each = encode_images(backbone, [preprocess_image(f, 0, n) for f in (a, b)])
    # np.linspace(0, 2, 7) truncated: frames 0 0 0 1 1 1 2 of [a, a, b], so a a a a a a b
    expected = each[[0, 0, 0, 0, 0, 0, 1]]
    assert torch.equal(emb, expected)
