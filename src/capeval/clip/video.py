"""Video inputs: decoding with PyAV and frame sampling (their CLIP embeddings: ``capeval.clip.frame_encoding``).

EMScore (Shi et al. 2022) embeds every frame of a video with CLIP's image encoder, or a fixed number of
frames evenly spaced (``np.linspace(0, n - 1, k)`` truncated to integers, as their VATEX-EVAL script
samples its cached frame features). Each frame goes through the same OpenAI preprocessing as an image.

Decoding runs on a small thread pool, a few videos ahead of the model; only the sampled frames are
converted to RGB and resized, and they are kept at the model's input size, so memory stays small
whatever the video resolution. Files are opened through ``capeval.clip.video_containers``: container formats
only, the demuxer chosen by capeval (no playlist ever makes FFmpeg read another file). A video given several times (the same path for several captions) is
decoded and encoded once.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from capeval.clip.images import (
    check_geometry,
    image_key,
    load_image,
    not_a_regular_file,
    resize_and_crop,
    tensor_pixels,
)
from capeval.clip.video_containers import open_video_container
from capeval.diagnostics.categories import DamagedVideoWarning, user_stacklevel

VideoInput = Any  # str | os.PathLike | Sequence[image] | np.ndarray (T, H, W, C) | torch.Tensor (T, C, H, W)

NUM_FRAMES = None  # Shi et al. 2022, emscore/utils.py encode_video: the library embeds every frame
VATEX_EVAL_NUM_FRAMES = 10  # Shi et al. 2022, VATEX-EVAL-demo.py: use_uniform_sample = 10

_ACCEPTED = (
    "a video file path, a list of frames (PIL images, arrays, tensors or image paths), "
    "a (T, H, W, C) array or a (T, C, H, W) tensor"
)


def check_num_frames(num_frames: int | None) -> int | None:
    """``None`` (every frame) or a positive int."""
    if num_frames is None:
        return None
    if isinstance(num_frames, bool) or not isinstance(num_frames, (int, np.integer)):
        raise TypeError(f"num_frames must be a positive int or None, got {type(num_frames).__name__}")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1 (or None for every frame), got {num_frames}")
    return int(num_frames)


def sample_indices(n_frames: int, num_frames: int | None) -> list[int]:
    """Frames kept out of ``n_frames``: all of them, or ``num_frames`` evenly spaced.

    ``[int(i) for i in np.linspace(0, n_frames - 1, num_frames)]`` as the authors sample: the first and
    last frames are always kept, and a video shorter than ``num_frames`` repeats frames.
    """
    if n_frames < 1:
        raise ValueError(f"cannot sample frames from a video of {n_frames} frames")
    if num_frames is None:
        return list(range(n_frames))
    return [int(i) for i in np.linspace(0, n_frames - 1, num_frames)]


def _describe(video: VideoInput) -> str:
    if isinstance(video, (str, os.PathLike)):
        return f" ({os.fspath(video)!r})"
    return ""


def _import_av():
    from capeval.diagnostics.extras import import_extra

    return import_extra("av", "video", "reading videos (EMScore on videos)")


def video_key(video: VideoInput, index: int) -> tuple:
    """Identity of a video input: equal keys mean the same frames, so it is decoded and encoded once.

    Paths by resolved path and file stat; frame lists and arrays by the content of their frames.
    """
    if isinstance(video, (str, os.PathLike)):
        path = Path(os.fspath(video)).expanduser()
        try:
            st = path.stat()
        except OSError as err:
            raise ValueError(f"video {index}{_describe(video)}: cannot read it: {err.strerror}") from err
        refusal = not_a_regular_file(st, os.fspath(video), index, kind="video")
        if refusal is not None:
            raise refusal
        return ("path", str(path.resolve()), st.st_size, st.st_mtime_ns)
    if isinstance(video, (np.ndarray, torch.Tensor)):
        if video.ndim != 4:
            raise ValueError(
                f"video {index}: an array video must be 4-D (T, H, W, C) or a tensor (T, C, H, W), "
                f"got shape {tuple(video.shape)}"
            )
        # The frames as read_frames reads them: each (C, H, W) tensor frame is moved to channels-last, so
        # an array and a tensor holding the same bytes in their two layouts (other pictures) differ here.
        arr = _frames_array(video, index)
        digest = hashlib.blake2b(digest_size=16, person=b"capeval-frames")
        digest.update(f"array|{arr.dtype.str}|{arr.shape}|".encode())
        digest.update(np.ascontiguousarray(arr).tobytes())
        return ("array", digest.hexdigest())
    if isinstance(video, Sequence) and not isinstance(video, (str, bytes)):
        if len(video) == 0:
            raise ValueError(f"video {index} is an empty list of frames")
        keys = []
        for j, frame in enumerate(video):
            try:
                keys.append(image_key(frame, j))
            except (TypeError, ValueError) as err:
                raise type(err)(f"video {index}, frame {j}: {err}") from err
        return ("frames", tuple(keys))
    raise TypeError(f"video {index}: expected {_ACCEPTED}, got {type(video).__name__}")


def _frames_array(video: np.ndarray | torch.Tensor, index: int) -> np.ndarray:
    """A (T, H, W, C) array video as it is, a (T, C, H, W) tensor as the (T, H, W, C) array of its frames."""
    if isinstance(video, np.ndarray):
        return video
    try:
        return np.moveaxis(tensor_pixels(video), 1, -1)
    except TypeError as err:
        raise ValueError(f"video {index}: unsupported tensor dtype {video.dtype}") from err


def _open_container(av, path: Path, index: int, label: str):
    if not path.exists():
        raise ValueError(f"video {index}{label}: file not found")
    if path.is_dir():
        raise ValueError(f"video {index}{label} is a folder, not a video file")
    if path.stat().st_size == 0:
        raise ValueError(f"video {index}{label} is an empty file (0 bytes)")
    try:
        container = open_video_container(av, path, f"video {index}{label}")
    except av.error.FFmpegError as err:
        raise ValueError(f"video {index}{label} is not a readable video file: {err}") from err
    if not container.streams.video:
        streams = len(container.streams)
        container.close()
        if streams == 0:
            # What FFmpeg reports for an MP4 cut before its index (moov) atom.
            raise ValueError(f"video {index}{label} holds no streams: it is truncated or not a video file")
        raise ValueError(f"video {index}{label} has no video stream (only {streams} other stream(s))")
    codec = container.streams.video[0].codec_context
    if codec.width and codec.height:  # some containers state no size before decoding
        try:
            # Before decoding: every sampled frame is resized, at a cost that grows with the aspect ratio.
            check_geometry(codec.width, codec.height, f"video {index}{label}: a frame")
        except ValueError:
            container.close()
            raise
    return container


def _decode_selected(av, path: Path, wanted: set[int] | None, size: int, index: int, label: str):
    """Decode the stream once; convert only the frames whose position is in ``wanted`` (all if None).

    Returns:
        (frames, n_decoded, announced): {position: (size, size, 3) uint8}, how many frames the stream
        decoded to, and how many its header announces (0 when it does not say).
    """
    container = _open_container(av, path, index, label)
    kept: dict[int, np.ndarray] = {}
    n = 0
    try:
        stream = container.streams.video[0]
        announced = int(stream.frames or 0)
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            if wanted is None or n in wanted:
                check_geometry(frame.width, frame.height, f"video {index}{label}: frame {n}")
                # to_ndarray + fromarray: the same pixels as to_image(), several times faster.
                kept[n] = resize_and_crop(Image.fromarray(frame.to_ndarray(format="rgb24")), size)
            n += 1
    except av.error.FFmpegError as err:
        raise ValueError(
            f"video {index}{label} is corrupt: decoding failed after {n} frame(s): {err}"
        ) from err
    finally:
        container.close()
    return kept, n, announced


def _count_frames(av, path: Path, index: int, label: str) -> int:
    """The stream's frame count from its header, else by reading its packets (no decoding)."""
    container = _open_container(av, path, index, label)
    try:
        stream = container.streams.video[0]
        if stream.frames and stream.frames > 0:
            return int(stream.frames)
        return sum(1 for packet in container.demux(stream) if packet.size)
    except av.error.FFmpegError as err:
        raise ValueError(f"video {index}{label} is corrupt: {err}") from err
    finally:
        container.close()


def decode_video(
    path: str | os.PathLike, num_frames: int | None, size: int, index: int = 0
) -> list[np.ndarray]:
    """The sampled frames of a video file, each resized and centre-cropped as CLIP preprocesses images.

    With ``num_frames`` set, the frame count is taken from the container (header or packets) so that only
    the sampled frames are converted; if decoding finds another count, the sampling is redone on the
    true count, so the indices are always those of the frames the decoder delivers.

    Args:
        path: a video file PyAV (FFmpeg) can read.
        num_frames: frames kept, evenly spaced; ``None`` keeps every frame.
        size: the model's input size (the frames are returned ready for it).
        index: the video's position in the caller's list, for error messages.

    Returns:
        list of (size, size, 3) uint8 arrays, in sampling order.

    Raises:
        ValueError: missing, empty, unreadable or corrupt file, no video stream, or no decodable frame.
    """
    av = _import_av()
    label = _describe(path)
    path = Path(os.fspath(path)).expanduser()
    if num_frames is None:
        kept, n, announced = _decode_selected(av, path, None, size, index, label)
        _check_count(n, announced, index, label)
        return [kept[i] for i in range(n)]
    guess = _count_frames(av, path, index, label)
    wanted = sample_indices(guess, num_frames) if guess > 0 else None
    kept, n, announced = _decode_selected(
        av, path, None if wanted is None else set(wanted), size, index, label
    )
    _check_count(n, announced, index, label)
    true_wanted = sample_indices(n, num_frames)
    if not set(true_wanted) <= kept.keys():
        # The header's count was wrong: decode again, keeping the frames sampled from the true count.
        kept, n2, _ = _decode_selected(av, path, set(true_wanted), size, index, label)
        if n2 != n:
            raise ValueError(
                f"video {index}{label} decodes to {n} then {n2} frames: it is unstable or corrupt"
            )
    return [kept[i] for i in true_wanted]


def _check_count(n: int, announced: int, index: int, label: str) -> None:
    if n == 0:
        raise ValueError(f"video {index}{label} has no decodable frames")
    if announced and n < announced:
        # FFmpeg skips frames it cannot decode; say so rather than score a damaged video silently.
        warnings.warn(
            f"video {index}{label}: its header announces {announced} frames but only {n} decoded "
            "(the file may be damaged); scoring the decoded frames",
            DamagedVideoWarning,
            stacklevel=user_stacklevel(),
        )


def read_frames(video: VideoInput, num_frames: int | None, size: int, index: int) -> list[np.ndarray]:
    """Sampled frames of any accepted video input, preprocessed to (size, size, 3) uint8."""
    if isinstance(video, (str, os.PathLike)):
        return decode_video(video, num_frames, size, index)
    if isinstance(video, torch.Tensor):
        frames: Sequence = list(video.detach().cpu())
    elif isinstance(video, np.ndarray):
        frames = list(video)
    else:
        frames = video
    if len(frames) == 0:
        raise ValueError(f"video {index} has no frames")
    # A frame sampled several times (a video shorter than num_frames) or given several times (the same
    # image repeated) is read and resized once: the same pixels, reused.
    by_position: dict[int, np.ndarray] = {}
    by_content: dict[tuple, np.ndarray] = {}
    out = []
    for j in sample_indices(len(frames), num_frames):
        if j not in by_position:
            try:
                key = image_key(frames[j], j)
                if key not in by_content:
                    by_content[key] = resize_and_crop(load_image(frames[j], j), size)
            except (TypeError, ValueError) as err:
                raise type(err)(f"video {index}, frame {j}: {err}") from err
            by_position[j] = by_content[key]
        out.append(by_position[j])
    return out


def write_video(
    path: str | os.PathLike, frames: Sequence, fps: int = 10, codec: str = "libx264", pix_fmt: str = "yuv420p"
) -> Path:
    """Encode frames (PIL images or (H, W, 3) uint8 arrays of one size) into a video file with PyAV.

    For tests, demos and examples (e.g. a clip of ``capeval.shapes.draw_frames``). H.264 needs even
    sides: odd-sized frames are cropped by one pixel.

    Returns:
        Path: the written file.
    """
    av = _import_av()
    if len(frames) == 0:
        raise ValueError("write_video needs at least one frame")
    arrays = [
        np.asarray(f.convert("RGB")) if hasattr(f, "convert") else np.asarray(f, dtype=np.uint8)
        for f in frames
    ]
    h, w = arrays[0].shape[:2]
    h, w = h - h % 2, w - w % 2
    path = Path(os.fspath(path))
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        for i, arr in enumerate(arrays):
            if arr.shape[:2] != arrays[0].shape[:2] or arr.ndim != 3 or arr.shape[2] != 3:
                raise ValueError(f"frame {i} has shape {arr.shape}; every frame must be {arrays[0].shape}")
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(arr[:h, :w]), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path
