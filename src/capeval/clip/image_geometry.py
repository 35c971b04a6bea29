"""The resize and crop of a model family's own image processor, on uint8 pixels.

CLIPModel checkpoints keep OpenAI's geometry (``capeval.clip.images.resize_and_crop``: shorter-side resize in the
image's own mode, RGB after the crop, the crop offset rounded as torchvision rounds it). Other families are scored
as their transformers image processor prepares them (its PIL backend, ``PilBackend._preprocess``): RGB first (an
alpha channel composited onto white), then a resize to an exact height x width (SigLIP, Chinese-CLIP, ALIGN) or of
the shorter side (AltCLIP, MetaCLIP 2), then a centre crop with the offset floored (``image_transforms.center_crop``,
zero-padded where the crop is larger than the image). Both resize in uint8 RGB through PIL, so the pixels are equal.
OpenCLIP files with open_clip's "squash" resize keep open_clip's order instead (``rgb_after_resize``): the image is
resized to the square in its own mode and converted to RGB last, with PIL's ``convert("RGB")``, which drops an alpha
channel rather than compositing it onto white.

``ProcessorGeometry`` is an ``int`` (the square side of the model's input) so that every path that prepares
images with ``preprocess_image(image, index, backbone.image_size)``, the corpus and training ones included, applies
the family's geometry without knowing about families.
"""

from __future__ import annotations

import numpy as np
from PIL import Image


class ProcessorGeometry(int):
    """The square input side (the int value) and how a family's image processor reaches it.

    Attributes:
        resize: ``("exact", height, width)`` or ``("shortest_edge", n)``.
        crop: ``(height, width)`` of the centre crop, or ``None`` (no crop).
        resample: PIL resampling filter number (``Image.BICUBIC`` = 3, ...).
        rgb_after_resize: open_clip's order for its "squash" resize (``Resize((n, n))`` before its RGB conversion,
            open_clip 3.3.0 ``src/open_clip/transform.py``, ``image_transform``): resized in the image's own mode,
            then ``convert("RGB")`` (alpha dropped, not composited). Only with an exact resize and no crop.
            ``False``: transformers' order, RGB first with alpha composited onto white.
    """

    resize: tuple
    crop: tuple[int, int] | None
    resample: int
    rgb_after_resize: bool

    def __new__(
        cls,
        side: int,
        resize: tuple,
        crop: tuple[int, int] | None,
        resample: int,
        rgb_after_resize: bool = False,
    ):
        if rgb_after_resize and (resize[0] != "exact" or crop is not None):
            raise ValueError(
                f"rgb_after_resize is open_clip's 'squash' order: an exact resize without a crop, not {resize} "
                f"with crop {crop}"
            )
        obj = super().__new__(cls, side)
        obj.resize, obj.crop, obj.resample, obj.rgb_after_resize = (
            tuple(resize),
            None if crop is None else tuple(crop),
            int(resample),
            bool(rgb_after_resize),
        )
        return obj

    def __reduce__(self):
        # Worker processes receive it pickled: int's own reduction would drop the geometry.
        return (
            ProcessorGeometry,
            (int(self), self.resize, self.crop, self.resample, self.rgb_after_resize),
        )

    def _key(self) -> tuple:
        return (int(self), self.resize, self.crop, self.resample, self.rgb_after_resize)

    def __eq__(self, other) -> bool:
        # Two backbones with the same side but different geometries must not share prepared pixels.
        if isinstance(other, ProcessorGeometry):
            return self._key() == other._key()
        if isinstance(other, int):
            return False
        return NotImplemented

    def __ne__(self, other) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{int(self)} ({self.describe()})"

    def describe(self) -> str:
        """``exact:224x224`` or ``shortest_edge:256,crop:224x224`` (plus ``,resample:N`` when not bicubic, and
        ``,rgb:after_resize`` in open_clip's order)."""
        if self.resize[0] == "exact":
            text = f"exact:{self.resize[1]}x{self.resize[2]}"
        else:
            text = f"shortest_edge:{self.resize[1]}"
        if self.crop is not None:
            text += f",crop:{self.crop[0]}x{self.crop[1]}"
        if self.resample != Image.BICUBIC:
            text += f",resample:{self.resample}"
        if self.rgb_after_resize:
            text += ",rgb:after_resize"
        return text

    def apply(self, img: Image.Image) -> np.ndarray:
        """(side, side, 3) uint8: the pixels the family's image processor would rescale and normalise."""
        if self.rgb_after_resize:
            return self._resize_then_rgb(img)
        img = _to_rgb(img)
        w, h = img.size
        if self.resize[0] == "exact":
            new_h, new_w = self.resize[1], self.resize[2]
        else:
            new_h, new_w = _shortest_edge_size(h, w, self.resize[1])
        if (new_w, new_h) != (w, h):
            img = img.resize((new_w, new_h), resample=self.resample)
        pixels = np.asarray(img, dtype=np.uint8)
        if self.crop is not None:
            pixels = _centre_crop(pixels, *self.crop)
        if pixels.shape[:2] != (int(self), int(self)):
            raise ValueError(
                f"the processor's geometry gives {pixels.shape[1]}x{pixels.shape[0]} pixels, not {int(self)}"
            )
        return np.ascontiguousarray(pixels)

    def _resize_then_rgb(self, img: Image.Image) -> np.ndarray:
        """open_clip's "squash": torchvision's ``Resize((h, w))`` on a PIL image is PIL's own ``resize`` in the
        image's mode (none when the size is already right), then open_clip's ``convert("RGB")``. PIL resizes
        palette and 1-bit images with nearest neighbours whatever the filter, RGBA with premultiplied alpha."""
        new_h, new_w = self.resize[1], self.resize[2]
        if img.size != (new_w, new_h):
            img = img.resize((new_w, new_h), resample=self.resample)
        pixels = np.asarray(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)
        if pixels.shape[:2] != (int(self), int(self)):
            raise ValueError(
                f"the processor's geometry gives {pixels.shape[1]}x{pixels.shape[0]} pixels, not {int(self)}"
            )
        return np.ascontiguousarray(pixels)


def _to_rgb(img: Image.Image) -> Image.Image:
    """transformers' ``convert_to_rgb``: transparency composited onto white, everything else converted."""
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img if img.mode == "RGB" else img.convert("RGB")


def _shortest_edge_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(height, width) of transformers' ``get_resize_output_image_size(default_to_square=False)``: longer side
    truncated."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _centre_crop(pixels: np.ndarray, crop_h: int, crop_w: int) -> np.ndarray:
    """transformers' ``center_crop``: offsets floored; zero padding (centred, rounded up) where the crop is larger."""
    h, w = pixels.shape[:2]
    top, left = (h - crop_h) // 2, (w - crop_w) // 2
    if top >= 0 and left >= 0:
        return pixels[top : top + crop_h, left : left + crop_w]
    new_h, new_w = max(crop_h, h), max(crop_w, w)
    padded = np.zeros((new_h, new_w, pixels.shape[2]), dtype=pixels.dtype)
    pad_top, pad_left = -(-(new_h - h) // 2), -(-(new_w - w) // 2)
    padded[pad_top : pad_top + h, pad_left : pad_left + w] = pixels
    top, left = top + pad_top, left + pad_left
    return padded[top : top + crop_h, left : left + crop_w]
