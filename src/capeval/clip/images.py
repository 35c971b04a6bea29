"""Image inputs: reading every accepted form, identity for de-duplication, and CLIP's preprocessing.

The preprocessing re-states the OpenAI transform used by the CLIPScore and PAC-S authors
(``clip/clip.py``: ``Resize(n, BICUBIC)``, ``CenterCrop(n)``, ``convert("RGB")``, ``ToTensor``,
``Normalize(mean, std)``) with PIL alone, in that order: the RGB conversion happens *after* the
crop, exactly as there, so palette, grayscale and 16/32-bit images are resized in their own mode. Files and bytes are opened in the
raster formats of ``capeval.clip.image_formats`` only (an EPS file never reaches Ghostscript). Two
bounds are capeval's own: aspect ratios beyond ``MAX_ASPECT_RATIO`` are refused (the resize would grow with
the ratio), and so are 16/32-bit images whose samples the RGB conversion would clip (``check_sample_range``).
One is PIL's, applied to every image however it arrives: more pixels than ``PIL.Image.MAX_IMAGE_PIXELS``
(``check_geometry``; ``.npy`` bytes are checked from their header, before the array is allocated).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from capeval.clip.image_formats import ImageFileError, open_raster
from capeval.clip.image_geometry import ProcessorGeometry
from capeval.clip.npy_images import is_npy, npy_header, read_npy

ImageInput = Any  # PIL.Image.Image | str | os.PathLike | np.ndarray | torch.Tensor | {"bytes", "path"}

_ACCEPTED = (
    "a PIL image, a file path, a numpy array (H, W[, C]), a torch tensor (C, H, W) or a datasets Image dict"
)


def _describe(image: ImageInput) -> str:
    if isinstance(image, (str, os.PathLike)):
        return f" ({os.fspath(image)!r})"
    if isinstance(image, dict) and image.get("path"):
        return f" ({image['path']!r})"
    return ""


def not_a_regular_file(st: os.stat_result, shown: str, index: int, kind: str = "image") -> ValueError | None:
    """The refusal of a path that is no regular file: a folder, or a device, pipe or socket (``/dev/zero`` is
    endless, a pipe blocks forever): refused from its ``stat``, before any byte is read."""
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISDIR(st.st_mode):
        return ValueError(
            f"{kind} {index} ({shown!r}): is a folder, not {'an' if kind == 'image' else 'a'} {kind} file"
        )
    return ValueError(
        f"{kind} {index} ({shown!r}): not a regular file (a device, pipe or socket); refused unread"
    )


def _image_bytes(image: dict, index: int):
    data = image["bytes"]
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"image {index}: the 'bytes' of a datasets Image dict must be bytes (the encoded file), "
            f"got {type(data).__name__} ({data!r:.40})"
        )
    return data


def tensor_pixels(image: torch.Tensor) -> np.ndarray:
    """A tensor's values as a numpy array; float16 and bfloat16 (which numpy lacks) widen exactly to float32, so a
    half-precision image reads as its float32 copy does."""
    image = image.detach().cpu()
    if image.dtype in (torch.float16, torch.bfloat16):
        image = image.float()
    return image.numpy()


MAX_ASPECT_RATIO = 100
"""Longest side over shortest side that capeval preprocesses: capeval's bound, not the authors'.

CLIP's preprocessing scales the shorter side to the model's input size n and keeps the aspect ratio, so the
work and memory of the resize grow with the ratio (n x ratio*n pixels). At 100:1 that is at most 5 megapixels
for n = 224; a 1x100000 picture would need 22 million rows. Beyond the bound the image is refused by name: no
exact cheaper computation is available (PIL resamples a region of the source from single-precision coordinates,
so resizing only the cropped region differs from resizing the whole image by up to 22 levels on a 3x1000
image), and the centre crop of such an image shows under 1% of it anyway.
"""

_ARRAY_DTYPES = "use uint8, bool or floats in [0, 1]"


def _what(index: int | None, label: str = "") -> str:
    return "image" if index is None else f"image {index}{label}"


def _array_pixels(image: np.ndarray | torch.Tensor, index: int | None) -> np.ndarray:
    """The (H, W[, C]) numpy array an array or tensor is read as; refuses shapes and dtypes that are no image.

    Tensors follow torchvision's (C, H, W) layout and are moved to channels-last here, so an array and a tensor
    give equal results exactly when they hold the same pixels (their identity is taken from this array).
    """
    if isinstance(image, torch.Tensor):
        try:
            arr = tensor_pixels(image)
        except TypeError as err:
            raise ValueError(
                f"{_what(index)}: unsupported tensor dtype {image.dtype}; {_ARRAY_DTYPES}"
            ) from err
        chw = arr.ndim == 3
    else:
        arr, chw = image, False
    shape = tuple(arr.shape)
    if chw:
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[-1] not in (3, 4)):
        layout = "(C, H, W)" if chw else "(H, W) or (H, W, C)"
        raise ValueError(
            f"{_what(index)}: array of shape {shape} is not an image {layout} with 1, 3 or 4 channels"
        )
    if min(arr.shape[:2]) == 0:
        raise ValueError(f"{_what(index)}: array of shape {shape} has no pixels")
    if arr.dtype not in (np.bool_, np.uint8) and not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{_what(index)}: unsupported array dtype {arr.dtype}; {_ARRAY_DTYPES}")
    return arr


def pixel_digest(image: Image.Image | np.ndarray | torch.Tensor, index: int | None = None) -> bytes:
    """Content identity of an in-memory image: equal digests mean the model sees the same pixels.

    A PIL image by its mode, size, palette (mode and entries: palette images with the same indices and other
    colours differ) and pixel bytes; an array or tensor by the dtype, shape and bytes of the channels-last array
    capeval reads it as (a (C, H, W) tensor and the (H, W, C) array of the same pixels share a digest; the same
    bytes read in the two layouts do not). Stable across runs and machines.

    Raises:
        ValueError: an array or tensor that is not an image (shape, dtype).
        TypeError: any other input.
    """
    digest = hashlib.blake2b(digest_size=16, person=b"capeval-pixels")
    if isinstance(image, Image.Image):
        digest.update(f"pil|{image.mode}|{image.width}x{image.height}|".encode())
        if image.palette is not None:
            # What convert("RGB") maps the indices through (transparency does not change RGB pixels).
            palette = image.getpalette(rawmode=None) or []
            digest.update(f"palette|{image.palette.mode}|{len(palette)}|".encode() + bytes(palette))
        digest.update(image.tobytes())
        return digest.digest()
    if isinstance(image, (np.ndarray, torch.Tensor)):
        arr = np.ascontiguousarray(_array_pixels(image, index))
        digest.update(f"array|{arr.dtype.str}|{arr.shape}|".encode())
        digest.update(arr.tobytes())
        return digest.digest()
    raise TypeError(f"{_what(index)}: expected a PIL image, a numpy array or a torch tensor")


def _stat_image_file(image: str | os.PathLike, index: int) -> tuple[Path, os.stat_result]:
    """The path of an image file and its ``stat``; a missing, unreadable or non-regular file refused by index."""
    path = Path(os.fspath(image)).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ValueError(f"image {index} ({os.fspath(image)!r}): file not found") from None
    except OSError as err:
        raise ValueError(f"image {index} ({os.fspath(image)!r}): cannot read it: {err.strerror}") from err
    refusal = not_a_regular_file(st, os.fspath(image), index)
    if refusal is not None:
        raise refusal
    return path, st


def image_key(image: ImageInput, index: int) -> tuple:
    """Identity of an image input: equal keys mean the same pixels, so it is encoded once.

    Paths are identified by resolved path and file stat (size, mtime); in-memory inputs by ``pixel_digest``.
    Raises ``TypeError`` for unsupported inputs and ``ValueError`` for arrays that are no image, naming the index.
    """
    if isinstance(image, (str, os.PathLike)):
        path, st = _stat_image_file(image, index)
        return ("path", str(path.resolve()), st.st_size, st.st_mtime_ns)
    if isinstance(image, (Image.Image, np.ndarray, torch.Tensor)):
        return ("pixels", pixel_digest(image, index).hex())
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return ("bytes", hashlib.blake2b(_image_bytes(image, index), digest_size=16).hexdigest())
        if image.get("path"):
            return image_key(image["path"], index)
        raise ValueError(
            f"image {index}: a datasets Image dict needs 'bytes' or 'path', got keys {sorted(image)}"
        )
    raise TypeError(f"image {index}: expected {_ACCEPTED}, got {type(image).__name__}")


def check_geometry(width: int, height: int, what: str = "image") -> None:
    """Refuse an image with no pixels, more pixels than PIL's ``Image.MAX_IMAGE_PIXELS`` or an aspect ratio beyond
    ``MAX_ASPECT_RATIO``, before any resize.

    The pixel bound is the one PIL applies when it opens a file (where capeval turns PIL's warning into an
    error), read at each call so that raising it raises it everywhere: here it holds for every way an image
    arrives, ``.npy`` bytes (from their header, before the array is allocated), arrays, tensors and PIL images
    included.

    Args:
        width, height: its size (from a file header, before decoding, where there is one).
        what: how messages name it (``"image 3 ('a.png')"``, ``"video 0: a frame"``).
    """
    if width < 1 or height < 1:
        raise ValueError(f"{what} is {width}x{height}: it has no pixels")
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise ValueError(
            f"{what} is too large: {width}x{height} is {width * height:,} pixels, over PIL's "
            f"MAX_IMAGE_PIXELS of {int(limit):,} (raise PIL.Image.MAX_IMAGE_PIXELS to allow it)"
        )
    short, long = min(width, height), max(width, height)
    if long > MAX_ASPECT_RATIO * short:
        raise ValueError(
            f"{what} is {width}x{height} pixels, an aspect ratio of {long / short:,.0f}:1; capeval accepts "
            f"at most {MAX_ASPECT_RATIO}:1 (capeval.clip.images.MAX_ASPECT_RATIO): CLIP's preprocessing scales "
            f"the shorter side to the model's input size, which would stretch the longer side to "
            f"{long / short:,.0f} times that size. Crop or pad it first."
        )


_HIGH_BIT_DEPTH = {"I": "32-bit integer", "F": "32-bit float"}


def check_sample_range(img: Image.Image, what: str = "image") -> None:
    """Refuse a 16/32-bit image whose samples the authors' RGB conversion would saturate.

    CLIP's preprocessing (OpenAI's ``_transform``, used by the CLIPScore and PAC-S authors) resizes an image in
    its own mode and then calls ``convert("RGB")``, which reads "I", "I;16" and "F" samples as 8-bit levels
    and clips them to 0-255. capeval follows that mapping, and so refuses images it cannot represent: samples
    below 0 or above 255 (a 16-bit photograph would turn white), NaN or infinity, and float images whose
    values all lie in [0, 1] (the [0, 1] convention of float arrays, which the 0-255 reading makes black).
    """
    if img.mode not in _HIGH_BIT_DEPTH and not img.mode.startswith("I;16"):
        return
    kind = _HIGH_BIT_DEPTH.get(img.mode, "16-bit")
    arr = np.asarray(img)
    if img.mode == "F" and not np.isfinite(arr).all():
        raise ValueError(f"{what} is a {kind} image (mode F) holding NaN or infinity")
    lo, hi = arr.min().item(), arr.max().item()
    advice = (
        "scale it to 8 bits first, e.g. Image.fromarray((np.asarray(img) / 257).round().astype('uint8')) "
        "for 16-bit data"
    )
    if lo < 0 or hi > 255:
        turns = "white" if hi > 255 else "black"
        raise ValueError(
            f"{what} is a {kind} image (mode {img.mode}) with samples from {lo:g} to {hi:g}: CLIP's "
            f"preprocessing, as its authors run it, converts to RGB by clipping samples to 0-255, so it would "
            f"score a saturated ({turns}) picture; capeval refuses it instead: {advice}"
        )
    if img.mode == "F" and 0 < hi <= 1:
        raise ValueError(
            f"{what} is a float image (mode F) with values in [0, 1]: CLIP's preprocessing reads 'F' samples "
            "as 0-255 levels (as its authors' convert('RGB') does), so it would score an almost black picture; "
            "pass the float array itself (capeval reads float arrays in [0, 1]) or multiply it by 255"
        )


@contextlib.contextmanager
def _pil_errors(what: str):
    """PIL's failures to open or decode, as ``ValueError`` naming the image."""
    try:
        with warnings.catch_warnings():
            # Above PIL's MAX_IMAGE_PIXELS PIL only warns; an image that large is refused instead.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except ImageFileError:
        raise  # already names the image (and its format)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ValueError(
            f"{what} is too large: {err} (raise PIL.Image.MAX_IMAGE_PIXELS to allow it)"
        ) from err
    except MemoryError as err:
        raise ValueError(f"{what} is too large to decode: the machine ran out of memory") from err
    except UnidentifiedImageError as err:
        raise ValueError(f"{what} is not a readable image file") from err
    except FileNotFoundError as err:
        raise ValueError(f"{what}: file not found") from err
    except (OSError, SyntaxError, ValueError) as err:
        raise ValueError(f"{what} is corrupt or truncated: {err}") from err


def _open(source, index: int, label: str) -> Image.Image:
    """Open a file or bytes in one of the allowed raster formats, check its size from the header, decode it."""
    what = _what(index, label)
    with _pil_errors(what):
        img = open_raster(source, what)
    try:
        check_geometry(img.width, img.height, what)  # before decoding: a few bytes can declare any size
        with _pil_errors(what):
            img.load()
    except BaseException:
        img.close()
        raise
    return img


def _array_to_pil(arr: np.ndarray, index: int) -> Image.Image:
    """The PIL image of a checked (H, W[, C]) array from ``_array_pixels``."""
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)  # exact: scaled to 0-255 as its float32 copy is, not in 11-bit steps
    if arr.dtype == np.bool_:
        arr = arr.astype(np.uint8) * 255
    elif np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise ValueError(f"image {index}: float array holds NaN or inf")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0.0 or hi > 1.0:
            raise ValueError(
                f"image {index}: float arrays must hold values in [0, 1], got [{lo:.3g}, {hi:.3g}]"
            )
        arr = np.round(arr * 255.0).astype(np.uint8)
    return Image.fromarray(np.ascontiguousarray(arr))


def _read_npy(data, index: int, label: str) -> Image.Image:
    """An (H, W[, C]) array stored as ``.npy`` bytes, its size checked from the header before it is allocated."""
    what = _what(index, label)
    shape, _ = npy_header(data, what)
    if len(shape) in (2, 3):
        check_geometry(shape[1], shape[0], what)
    return _array_to_pil(_array_pixels(read_npy(data, what), index), index)


def load_image(image: ImageInput, index: int) -> Image.Image:
    """Read one image input into a PIL image, with errors that name the index (and path).

    Files are checked from their header before decoding. Every image is refused when CLIP's preprocessing
    could not represent it (``check_geometry``: no pixels or an aspect ratio beyond ``MAX_ASPECT_RATIO``;
    ``check_sample_range``: 16/32-bit samples outside 0-255).

    Raises:
        TypeError: unsupported input type.
        ValueError: missing, unreadable, corrupt, too large or malformed image.
    """
    img = _read(image, index)
    what = _what(index, _describe(image))
    check_geometry(img.width, img.height, what)
    check_sample_range(img, what)
    return img


def _read(image: ImageInput, index: int) -> Image.Image:
    if isinstance(image, Image.Image):
        if image.width == 0 or image.height == 0:
            raise ValueError(f"image {index}: PIL image of size {image.size} has no pixels")
        return image
    if isinstance(image, (str, os.PathLike)):
        path, _ = _stat_image_file(image, index)
        return _open(path, index, _describe(image))
    if isinstance(image, (np.ndarray, torch.Tensor)):
        arr = _array_pixels(image, index)
        check_geometry(arr.shape[1], arr.shape[0], _what(index))  # before the array is converted
        return _array_to_pil(arr, index)
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            data = _image_bytes(image, index)
            if is_npy(data):  # an in-memory array as capeval stores it for evaluate (capeval.clip.npy_images)
                return _read_npy(data, index, _describe(image))
            return _open(io.BytesIO(data), index, _describe(image))
        if image.get("path"):
            return _read(image["path"], index)
        raise ValueError(
            f"image {index}: a datasets Image dict needs 'bytes' or 'path', got keys {sorted(image)}"
        )
    raise TypeError(f"image {index}: expected {_ACCEPTED}, got {type(image).__name__}")


def resized_size(width: int, height: int, size: int) -> tuple[int, int]:
    """(width, height) after CLIP's shorter-side resize to ``size``.

    torchvision's ``Resize(int)`` keeps the aspect ratio and truncates the longer side, not rounds it.
    """
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def resize_and_crop(img: Image.Image, size: int) -> np.ndarray:
    """OpenAI CLIP geometry: bicubic shorter-side resize to ``size`` in the image's own mode, centre crop, RGB
    (a ``ProcessorGeometry`` ``size``: that family's processor geometry instead).

    open_clip's default transform for OpenCLIP files ("shortest": ``Resize(size)``, ``CenterCrop(size)``, then
    ``convert("RGB")``; open_clip 3.3.0 ``src/open_clip/transform.py``) is this same sequence of PIL calls.

    The image must pass ``check_geometry`` (checked here too) and ``check_sample_range`` (``load_image`` checks
    it): the resize costs size x (size x aspect ratio) pixels.

    Returns:
        np.ndarray: (size, size, 3) uint8.
    """
    check_geometry(img.width, img.height)
    if isinstance(
        size, ProcessorGeometry
    ):  # another family's processor geometry (video frames come here too)
        return size.apply(img)
    w, h = img.size
    new_w, new_h = resized_size(w, h, size)
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.BICUBIC)
    left = int(round((new_w - size) / 2.0))
    top = int(round((new_h - size) / 2.0))
    img = img.crop((left, top, left + size, top + size))
    return np.array(img.convert("RGB"), dtype=np.uint8)


def normalize_pixels(batch: torch.Tensor, mean: tuple, std: tuple) -> torch.Tensor:
    """(B, H, W, 3) uint8 to (B, 3, H, W) float32, scaled to [0, 1] then normalised like ``ToTensor``+``Normalize``.

    The same three operations in the same order as torchvision's (so the same float32 values), done in place on
    the one float copy, with the channel constants made once per device."""
    x = batch.permute(0, 3, 1, 2).to(torch.float32, copy=True).div_(255)  # a copy: never the caller's tensor
    m, s = _channel_constants(tuple(mean), tuple(std), x.device)
    return x.sub_(m).div_(s)


@functools.lru_cache(maxsize=64)
def _channel_constants(mean: tuple, std: tuple, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    return m, s


def preprocess_image(image: ImageInput, index: int, size: int) -> np.ndarray:
    """Read and geometrically transform one input: (size, size, 3) uint8, ready for ``normalize_pixels``.

    ``size`` is a plain int for OpenAI CLIP's geometry, or a ``ProcessorGeometry`` (``Backbone.image_size`` of
    the other families) for their image processor's. An RGB uint8 array already ``size`` x ``size`` is that
    geometry's own output (no resize, a crop of the whole, RGB as it is): it is returned as it is, not sent through
    PIL again.
    """
    if (
        type(size) is int
        and isinstance(image, np.ndarray)
        and image.dtype == np.uint8
        and image.shape == (size, size, 3)
    ):
        return np.ascontiguousarray(image)
    img = load_image(image, index)
    try:
        return resize_and_crop(img, size)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"image {index}{_describe(image)} could not be processed ({img.mode}, {img.size}): {err}"
        ) from err
