"""The image file formats capeval decodes: an allow-list of raster formats, the same on every path.

PIL opens some 40 formats by default, and some of them run other programs: an EPS file (``%!PS``) is handed to
Ghostscript when it is decoded, whatever name or extension the file carried, and Ghostscript's ``-dSAFER`` mode
has had escapes. Every image capeval reads from a file or from bytes (API paths and ``{"bytes"}`` dicts, the
evaluate modules, the CLI, COCO image folders, corpus shards on both engines, the Spaces' uploads and pasted
images) is opened here, with PIL told to try only ``RASTER_FORMATS``. Anything else is refused by name, with
the format its first bytes show, before any plugin of that format parses it.
"""

from __future__ import annotations

import os
from typing import IO

from PIL import Image, UnidentifiedImageError

RASTER_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
"""PIL format names capeval decodes: the formats photographs, datasets and img2dataset's ``--encode_format``
use. Phones' multi-picture JPEGs (MPO) open through the JPEG plugin. Everything else (EPS, PSD, PDF-like
vector formats, scientific formats, icons) is refused; convert such an image to PNG first."""

_PREFIX_BYTES = 16  # what PIL itself reads before asking each plugin whether it accepts a file

_NOT_IMAGES = (
    (b"<?xml", "XML (an SVG?)"),
    (b"<svg", "SVG"),
    (b"%PDF", "PDF"),
)


class ImageFileError(ValueError):
    """An image file refused from its header; the message already names the image."""


class ImageFormatError(ImageFileError):
    """A file in a format capeval does not decode (``RASTER_FORMATS``); the message names the format."""


def detected_format(prefix: bytes) -> str | None:
    """The format a file's first bytes show, by the acceptance checks of PIL's plugins (prefix tests only: no
    plugin parses the file here), or a few non-image formats by their magic; ``None`` when none matches."""
    Image.init()
    for name in RASTER_FORMATS:
        if _accepts(name, prefix):
            return name
    for name, (_, accept) in Image.OPEN.items():
        if accept is not None and _accepts(name, prefix):
            return name
    stripped = prefix.lstrip()
    for magic, name in _NOT_IMAGES:
        if stripped.startswith(magic):
            return name
    return None


def _accepts(name: str, prefix: bytes) -> bool:
    accept = Image.OPEN.get(name, (None, None))[1]
    if accept is None:
        return False
    try:
        result = accept(prefix)
    except Exception:  # a plugin's check on a short prefix may index past it
        return False
    return bool(result) and not isinstance(result, str)  # a str is PIL's "almost, but" warning


def refusal(prefix: bytes, what: str) -> ImageFileError:
    """The error for a file PIL could not open in ``RASTER_FORMATS``: another format (named), no image at all,
    or an allowed format whose header is damaged."""
    found = detected_format(prefix)
    if found in RASTER_FORMATS:
        return ImageFileError(f"{what} is corrupt or truncated: its {found} header cannot be parsed")
    shown = f"in the {found} format" if found else "not a readable image file (no format capeval knows)"
    return ImageFormatError(
        f"{what} is {shown}; capeval decodes only {', '.join(RASTER_FORMATS)} images "
        "(capeval.clip.image_formats.RASTER_FORMATS) and refuses other formats unread: convert it to PNG first"
    )


def open_raster(source: str | os.PathLike | IO[bytes], what: str) -> Image.Image:
    """``Image.open`` limited to ``RASTER_FORMATS``: only the header is parsed, nothing is decoded yet.

    Args:
        source: a file path or a binary file object (seekable).
        what: how messages name the image (``"image 3 ('a.jpg')"``).

    Raises:
        ImageFormatError: any other format (named from its first bytes), or no image at all.
        ImageFileError: an allowed format whose header cannot be parsed.
        OSError and PIL's own errors: a raster file damaged further in (the caller words those).
    """
    try:
        return Image.open(source, formats=RASTER_FORMATS)
    except UnidentifiedImageError:
        raise refusal(_prefix(source), what) from None


def _prefix(source: str | os.PathLike | IO[bytes]) -> bytes:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            return fh.read(_PREFIX_BYTES)
    source.seek(0)
    return source.read(_PREFIX_BYTES)
