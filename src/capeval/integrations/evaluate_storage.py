"""Images and videos through evaluate's Arrow cache without a pixel changing.

capeval's image modules declare ``images`` as ``datasets.Image(decode=False)`` and EMScore declares ``videos`` as
``VIDEO_FEATURE``, so ``add``/``add_batch`` stream them like captions. datasets' own encoding would change them:
it re-encodes a PIL image in its own format (a JPEG again, lossily), stores a PIL image opened from a file as that
file's path (edits made in memory are lost), and converts arrays by its own rules (floats and (C, H, W) tensors
refused or cast). So every in-memory image is turned into a ``{"bytes", "path"}`` dict here, before evaluate sees
it, and read back by capeval's reader (``capeval.clip.images``), never decoded by datasets:

- a PIL image: an L, RGB or RGBA image (nearly every photograph) as the ``.npy`` bytes of its uint8 array, which
  capeval reads back as the same image (a PNG encode of a 640x480 photograph costs 70-200 ms on one core, more than
  CLIP ViT-B/32's forward pass; the array ~2 ms: ``scripts/bench_evaluate_inputs.py``); PNG (zlib level 1) for
  1, LA, P and I;16, whose arrays capeval would read as other images; TIFF for I, F, I;16B, CMYK and LAB (checked
  by reading it back); any other mode is refused by name;
- a numpy array or torch tensor: the ``.npy`` bytes of the array capeval reads it as (a (C, H, W) tensor as its
  (H, W, C) array), so dtype, range and layout are kept;
- a path stays a path (read, as ``capeval.CLIPScore`` reads it, when the scores are computed); a datasets Image
  dict passes through (its bytes win over its path, as capeval reads it).

In-memory images are checked (shape, dtype, size, aspect ratio, sample range) before they are stored, paths are
checked to exist. A video is a path, or its frames stored one by one as images; evaluate checks that the first
row's strings are strings, so "no path" is ``""`` and a prediction without a video is ``NO_VIDEO``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import datasets
import numpy as np
import torch
from PIL import Image

from capeval.clip.images import _array_pixels, image_key, load_image
from capeval.clip.npy_images import npy_bytes

VIDEO_FEATURE = {"path": datasets.Value("string"), "frames": datasets.List(datasets.Image(decode=False))}
NO_VIDEO = {"path": "", "frames": []}

# Modes whose uint8 array capeval reads back as the same PIL image (Image.fromarray: 2-D -> L, 3 -> RGB, 4 -> RGBA).
ARRAY_MODES = frozenset({"L", "RGB", "RGBA"})
PNG_MODES = frozenset({"1", "LA", "P", "I;16"})  # PNG stores these exactly (a test proves it)
TIFF_MODES = frozenset({"I", "F", "I;16B", "CMYK", "LAB"})  # PNG cannot; TIFF can (checked on every image)
PNG_COMPRESS_LEVEL = 1  # zlib's fastest level: lossless like the others, and faster than PIL's default 6


def _pil_bytes(image: Image.Image, what: str) -> bytes:
    if image.mode in ARRAY_MODES:
        return npy_bytes(np.asarray(image))
    buffer = io.BytesIO()
    if image.mode in PNG_MODES:
        image.save(buffer, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        return buffer.getvalue()
    if image.mode in TIFF_MODES:
        image.save(buffer, format="TIFF")
        data = buffer.getvalue()
        with Image.open(io.BytesIO(data), formats=["TIFF"]) as back:  # our own bytes, read as written
            if back.mode == image.mode and back.size == image.size and back.tobytes() == image.tobytes():
                return data
    raise ValueError(
        f"{what} is a PIL image of mode {image.mode!r}, which capeval cannot store losslessly for evaluate "
        f"(it stores the modes {sorted(ARRAY_MODES | PNG_MODES | TIFF_MODES)}); convert it first, e.g. image.convert('RGB') "
        "(what CLIP's preprocessing does after resizing), or pass it as an array"
    )


def stored_image(image, index: int) -> dict | None:
    """One image input as the ``{"bytes", "path"}`` dict evaluate stores, checked first (``None`` stays ``None``:
    no image for this prediction, its embedding given to ``compute``).

    Raises:
        TypeError: not an image input.
        ValueError: a missing path; an in-memory image capeval would refuse to score; a PIL mode it cannot store.
    """
    if image is None:
        return None
    if isinstance(image, (str, os.PathLike)):
        image_key(image, index)  # exists and is a regular file: refused now, not at compute()
        return {"bytes": None, "path": os.fspath(image)}
    if isinstance(image, dict):
        image_key(image, index)  # has bytes or a path
        if image.get("bytes") is not None:
            path = image.get("path")
            # datasets stores only the path of a dict whose path is a file; capeval reads the bytes first.
            return {"bytes": image["bytes"], "path": None if path and os.path.isfile(path) else path}
        return {"bytes": None, "path": image["path"]}
    load_image(image, index)  # every check capeval scores under: shape, dtype, geometry, sample range
    if isinstance(image, Image.Image):
        return {"bytes": _pil_bytes(image, f"image {index}"), "path": None}
    if isinstance(image, (np.ndarray, torch.Tensor)):
        return {"bytes": npy_bytes(_array_pixels(image, index)), "path": None}
    raise TypeError(f"image {index}: unsupported input {type(image).__name__}")  # load_image refused it first


def stored_video(video, index: int) -> dict:
    """One video input as the ``VIDEO_FEATURE`` dict: a path, or its frames each stored as an image; ``None``
    (no video for this prediction) as ``NO_VIDEO``.

    A (T, H, W, C) array or (T, C, H, W) tensor is stored frame by frame, as capeval reads it.
    """
    if video is None:
        return dict(NO_VIDEO)
    if isinstance(video, (str, os.PathLike)):
        path = os.fspath(video)
        if not os.path.isfile(path):
            what = "is a folder, not a video file" if os.path.isdir(path) else "file not found"
            raise ValueError(f"video {index} ({path!r}): {what}")
        return {"path": path, "frames": []}
    if isinstance(video, (np.ndarray, torch.Tensor)):
        if video.ndim != 4:
            raise ValueError(
                f"video {index}: an array video must be 4-D (T, H, W, C) or a tensor (T, C, H, W), "
                f"got shape {tuple(video.shape)}"
            )
        video = list(video)
    if not isinstance(video, Sequence) or isinstance(video, (str, bytes)):
        raise TypeError(
            f"video {index}: expected a video file path, a list of frames or a (T, H, W, C) array, "
            f"got {type(video).__name__}"
        )
    if len(video) == 0:
        raise ValueError(f"video {index} is an empty list of frames")
    frames = []
    for j, frame in enumerate(video):
        try:
            frames.append(stored_image(frame, j))
        except (TypeError, ValueError) as err:
            raise type(err)(f"video {index}, frame {j}: {err}") from err
    return {"path": "", "frames": frames}


def read_stored_video(stored: dict | None):
    """The video input a stored ``VIDEO_FEATURE`` dict stands for: its path, its list of frame dicts, or ``None``."""
    if stored is None:
        return None
    if stored.get("path"):
        return stored["path"]
    return stored.get("frames") or None
