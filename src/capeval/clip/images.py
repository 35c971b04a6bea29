"""Image inputs: reading every accepted form, identity for de-duplication, and CLIP's preprocessing.

The preprocessing re-states the OpenAI transform used by the CLIPScore and PAC-S authors
(``clip/clip.py``: ``Resize(n, BICUBIC)``, ``CenterCrop(n)``, ``convert("RGB")``, ``ToTensor``,
``Normalize(mean, std)``) with PIL alone, in that order: the RGB conversion happens *after* the
crop, exactly as there, so palette and grayscale images are resized in their own mode.
"""

from __future__ import annotations

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


def image_key(image: ImageInput, index: int) -> tuple:
    """Identity of an image input: equal keys mean the same pixels, so it is encoded once.

    Paths are identified by resolved path and file stat (size, mtime); in-memory inputs by a hash of
    their content. Raises ``TypeError`` for unsupported inputs, naming the index.
    """
    if isinstance(image, (str, os.PathLike)):
        path = Path(os.fspath(image)).expanduser()
        try:
            st = path.stat()
        except FileNotFoundError as err:
            raise ValueError(f"image {index} ({os.fspath(image)!r}): file not found") from err
        except OSError as err:
            raise ValueError(f"image {index} ({os.fspath(image)!r}): cannot read it: {err.strerror}") from err
        refusal = not_a_regular_file(st, os.fspath(image), index)
        if refusal is not None:
            raise refusal
        return ("path", str(path.resolve()), st.st_size, st.st_mtime_ns)
    if isinstance(image, Image.Image):
        digest = hashlib.blake2b(image.tobytes(), digest_size=16)
        return ("pil", image.mode, image.size, digest.hexdigest())
    if isinstance(image, torch.Tensor):
        image = tensor_pixels(image)
    if isinstance(image, np.ndarray):
        arr = np.ascontiguousarray(image)
        return (
            "array",
            str(arr.dtype),
            arr.shape,
            hashlib.blake2b(arr.tobytes(), digest_size=16).hexdigest(),
        )
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return ("bytes", hashlib.blake2b(_image_bytes(image, index), digest_size=16).hexdigest())
        if image.get("path"):
            return image_key(image["path"], index)
        raise ValueError(
            f"image {index}: a datasets Image dict needs 'bytes' or 'path', got keys {sorted(image)}"
        )
    raise TypeError(f"image {index}: expected {_ACCEPTED}, got {type(image).__name__}")


def _open(source, index: int, label: str) -> Image.Image:
    try:
        with warnings.catch_warnings():
            # Above PIL's MAX_IMAGE_PIXELS PIL only warns; an image that large is refused instead.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(source)
            img.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ValueError(
            f"image {index}{label} is too large: {err} (raise PIL.Image.MAX_IMAGE_PIXELS to allow it)"
        ) from err
    except UnidentifiedImageError as err:
        raise ValueError(f"image {index}{label} is not a readable image file") from err
    except FileNotFoundError as err:
        raise ValueError(f"image {index}{label}: file not found") from err
    except (OSError, SyntaxError, ValueError) as err:
        raise ValueError(f"image {index}{label} is corrupt or truncated: {err}") from err
    return img


def _array_to_pil(arr: np.ndarray, index: int, chw: bool) -> Image.Image:
    if arr.ndim == 3 and chw:
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[-1] not in (3, 4)):
        layout = "(C, H, W)" if chw else "(H, W) or (H, W, C)"
        raise ValueError(
            f"image {index}: array of shape {tuple(arr.shape)} is not an image {layout} with 1, 3 or 4 channels"
        )
    if min(arr.shape[:2]) == 0:
        raise ValueError(f"image {index}: array of shape {tuple(arr.shape)} has no pixels")
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
    elif arr.dtype != np.uint8:
        raise ValueError(f"image {index}: unsupported array dtype {arr.dtype}; use uint8 or floats in [0, 1]")
    return Image.fromarray(np.ascontiguousarray(arr))


def load_image(image: ImageInput, index: int) -> Image.Image:
    """Read one image input into a PIL image, with errors that name the index (and path).

    Raises:
        TypeError: unsupported input type.
        ValueError: missing, unreadable, corrupt, too large or malformed image.
    """
    if isinstance(image, Image.Image):
        if image.width == 0 or image.height == 0:
            raise ValueError(f"image {index}: PIL image of size {image.size} has no pixels")
        return image
    if isinstance(image, (str, os.PathLike)):
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
        return _open(path, index, _describe(image))
    if isinstance(image, torch.Tensor):
        # torch images follow torchvision's (C, H, W) layout; 2-D tensors are grayscale.
        return _array_to_pil(tensor_pixels(image), index, chw=image.ndim == 3)
    if isinstance(image, np.ndarray):
        return _array_to_pil(image, index, chw=False)
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return _open(io.BytesIO(_image_bytes(image, index)), index, _describe(image))
        if image.get("path"):
            return load_image(image["path"], index)
        raise ValueError(
            f"image {index}: a datasets Image dict needs 'bytes' or 'path', got keys {sorted(image)}"
        )
    raise TypeError(f"image {index}: expected {_ACCEPTED}, got {type(image).__name__}")


def _resize_mode_safe(img: Image.Image) -> Image.Image:
    # PIL cannot resample 16/32-bit integer or "I;16" images with BICUBIC; the authors' pipeline crashes
    # on them. Scale to 8 bits first so they score instead (documented deviation, only where they crash).
    if img.mode.startswith("I;16") or img.mode == "I":
        arr = np.asarray(img, dtype=np.float64)
        hi = 65535.0 if img.mode.startswith("I;16") or arr.max() > 255 else 255.0
        return Image.fromarray(np.clip(np.round(arr * 255.0 / hi), 0, 255).astype(np.uint8), mode="L")
    if img.mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        hi = 1.0 if arr.max() <= 1.0 else 255.0
        return Image.fromarray(np.clip(np.round(arr * 255.0 / hi), 0, 255).astype(np.uint8), mode="L")
    return img


def resize_and_crop(img: Image.Image, size: int) -> np.ndarray:
    """OpenAI CLIP geometry: bicubic shorter-side resize to ``size``, centre crop, then RGB.

    Returns:
        np.ndarray: (size, size, 3) uint8.
    """
    img = _resize_mode_safe(img)
    w, h = img.size
    # torchvision.transforms.Resize(int) keeps the aspect ratio: the longer side is truncated, not rounded.
    if w <= h:
        new_w, new_h = size, int(size * h / w)
    else:
        new_w, new_h = int(size * w / h), size
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.BICUBIC)
    left = int(round((new_w - size) / 2.0))
    top = int(round((new_h - size) / 2.0))
    img = img.crop((left, top, left + size, top + size))
    return np.array(img.convert("RGB"), dtype=np.uint8)


def normalize_pixels(batch: torch.Tensor, mean: tuple, std: tuple) -> torch.Tensor:
    """(B, H, W, 3) uint8 to (B, 3, H, W) float32, scaled to [0, 1] then normalised like ``ToTensor``+``Normalize``."""
    x = batch.permute(0, 3, 1, 2).to(torch.float32).div(255)
    m = torch.tensor(mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    return x.sub(m).div(s)


def preprocess_image(image: ImageInput, index: int, size: int) -> np.ndarray:
    """Read and geometrically transform one input: (size, size, 3) uint8, ready for ``normalize_pixels``."""
    img = load_image(image, index)
    try:
        return resize_and_crop(img, size)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"image {index}{_describe(image)} could not be processed ({img.mode}, {img.size}): {err}"
        ) from err
