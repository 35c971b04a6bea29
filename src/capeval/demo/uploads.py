"""Upload components that only ever read what a visitor uploaded, within the demo's limits.

Gradio's own ``Image``/``Video``/``File`` components accept, through the API, a file payload whose path is
an ``http(s)://`` URL and then download it on the server. The components here refuse that (the server
fetches nothing a visitor names), accept only files inside Gradio's upload folder (never a server path
typed into a request), and check format, size, pixel count and video length from the file headers before
anything decodes the data. Images are opened in capeval's raster formats only and videos with capeval's
container demuxers only (``capeval.clip.image_formats``, ``capeval.clip.video_containers``), the lists every
other path uses; Gradio never decodes an upload itself (a pasted image arrives as a ``data:`` URL, which is
checked the same way and kept byte for byte). They render with Gradio's own front-end components.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import os
import warnings
from pathlib import Path

import gradio as gr
from gradio import component_meta
from gradio import utils as gr_utils
from gradio_client import utils as client_utils
from PIL import Image, UnidentifiedImageError

from capeval.clip.image_formats import ImageFileError, open_raster
from capeval.clip.images import MAX_ASPECT_RATIO, resized_size
from capeval.clip.video_containers import VideoContainerError, open_video_container
from capeval.demo.limits import DEFAULT_LIMITS, InputError, Limits


def upload_folder() -> Path:
    """Gradio's upload (cache) folder: the only place uploaded files are read from."""
    return Path(gr_utils.get_upload_folder()).resolve()


def _mb(n: int | float) -> str:
    return f"{n / (1024 * 1024):.1f} MB"


def check_uploaded_file(path: str | os.PathLike, max_bytes: int, what: str = "file") -> Path:
    """The resolved path of an uploaded file, refused unless it lies in Gradio's upload folder.

    Raises:
        InputError: a URL, a path outside the upload folder, not a regular file, or over ``max_bytes``.
    """
    text = os.fspath(path)
    if client_utils.is_http_url_like(text) or "://" in text:
        raise InputError(f"This demo does not fetch URLs: upload the {what} instead.")
    resolved = Path(text).resolve()
    root = upload_folder()
    if not resolved.is_relative_to(root):
        raise InputError(f"Only uploaded files are read: upload the {what} instead of naming a path.")
    if not resolved.is_file():
        raise InputError(f"The uploaded {what} is missing; upload it again.")
    size = resolved.stat().st_size
    if size > max_bytes:
        raise InputError(f"The {what} is {_mb(size)}; this demo accepts at most {_mb(max_bytes)}.")
    return resolved


def _megapixels(n: int) -> str:
    return f"{n / 1e6:,.1f} megapixels" if n >= 1_000_000 else f"{n:,} pixels"


def check_aspect_ratio(width: int, height: int, what: str = "image") -> None:
    """Refuse an image CLIP's preprocessing would stretch past capeval's ``MAX_ASPECT_RATIO``.

    Raises:
        InputError: its longer side is more than ``MAX_ASPECT_RATIO`` times its shorter side.
    """
    short, long = min(width, height), max(width, height)
    if long > MAX_ASPECT_RATIO * short:
        raise InputError(
            f"The {what} is {width}x{height}, an aspect ratio of {long / short:,.0f}:1; this demo accepts at most "
            f"{MAX_ASPECT_RATIO}:1 (the model scales the shorter side to its input size, so the longer side "
            f"would grow {long / short:,.0f} times as large). Crop it first."
        )


def check_resized(
    width: int, height: int, size: int, limits: Limits = DEFAULT_LIMITS, what: str = "image"
) -> int:
    """The pixels handled for one image read for a model of input ``size``: decoded plus resized.

    Raises:
        InputError: an aspect ratio past ``MAX_ASPECT_RATIO``, or a resized image (its shorter side scaled to
            ``size``) above ``limits.max_image_pixels``.
    """
    check_aspect_ratio(width, height, what)
    new_w, new_h = resized_size(width, height, size)
    if new_w * new_h > limits.max_image_pixels:
        raise InputError(
            f"The {what} is {width}x{height}: the model resizes it to {new_w}x{new_h} "
            f"({_megapixels(new_w * new_h)}) before cropping; this demo accepts at most "
            f"{_megapixels(limits.max_image_pixels)} per image."
        )
    return width * height + new_w * new_h


def check_request_pixels(pixels: int, limits: Limits = DEFAULT_LIMITS, what: str = "These frames") -> None:
    """Refuse a request whose images or sampled frames add up to more than ``limits.max_request_pixels``.

    Raises:
        InputError: naming the pixels needed and the limit.
    """
    if pixels > limits.max_request_pixels:
        raise InputError(
            f"{what} need {_megapixels(pixels)} of decoding and resizing (each distinct frame once); this "
            f"demo handles at most {_megapixels(limits.max_request_pixels)} per request: send fewer or smaller "
            "frames, or sample fewer."
        )


def check_image_header(
    path: Path | io.BytesIO, limits: Limits = DEFAULT_LIMITS, what: str = "image"
) -> tuple[int, int]:
    """(width, height) read from the header only, refused above ``limits.max_image_pixels`` or past the
    aspect ratio capeval resizes (``check_aspect_ratio``).

    Raises:
        InputError: not an image in an allowed raster format (the format named), too many pixels (a
            decompression bomb is refused before decoding), or an
            aspect ratio whose resize would be out of proportion to the file (a 1x25,000,000 strip).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with open_raster(path if isinstance(path, io.BytesIO) else str(path), f"The {what}") as img:
                width, height = img.size
    except ImageFileError as err:
        raise InputError(str(err)) from err
    except Image.DecompressionBombError as err:
        raise InputError(
            f"The {what} has too many pixels; this demo accepts at most "
            f"{limits.max_image_pixels / 1e6:.0f} megapixels."
        ) from err
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise InputError(f"The {what} is not a readable image file.") from err
    if width * height > limits.max_image_pixels:
        raise InputError(
            f"The {what} is {width}x{height} ({width * height / 1e6:.1f} megapixels); this demo accepts at most "
            f"{limits.max_image_pixels / 1e6:.0f} megapixels."
        )
    check_aspect_ratio(width, height, what)
    return width, height


def check_video_header(path: Path, limits: Limits = DEFAULT_LIMITS) -> float:
    """The video's length in seconds from its container, refused when too long, too large or unknown.

    Raises:
        InputError: not a video, no video stream, longer than ``limits.max_video_seconds``, frames larger
            than ``limits.max_video_pixels``, or a length the container does not state.
    """
    import av

    try:
        with open_video_container(av, path, "The file") as container:
            if not container.streams.video:
                raise InputError("The file has no video stream.")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            seconds = None
            if stream.duration is not None and stream.time_base is not None:
                seconds = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                seconds = container.duration / av.time_base
            elif stream.frames and stream.average_rate:
                seconds = stream.frames / float(stream.average_rate)
    except InputError:
        raise
    except VideoContainerError as err:
        raise InputError(str(err)) from err
    except (av.error.FFmpegError, OSError, ValueError) as err:
        raise InputError("The file is not a readable video.") from err
    if seconds is None or not math.isfinite(seconds):
        raise InputError("The video does not state its length; re-encode it (e.g. as MP4 or WebM).")
    if seconds > limits.max_video_seconds:
        raise InputError(
            f"The video is {seconds:.1f} s long; this demo accepts at most {limits.max_video_seconds:.0f} s."
        )
    if width * height > limits.max_video_pixels:
        raise InputError(
            f"The video is {width}x{height}; this demo accepts frames of at most "
            f"{limits.max_video_pixels / 1e6:.1f} megapixels."
        )
    if width and height:
        check_aspect_ratio(width, height, "video")
    return seconds


def video_frame_size(path: Path) -> tuple[int, int]:
    """(width, height) of a video's frames from its container (0, 0 when it does not say)."""
    import av

    try:
        with open_video_container(av, path, "The file") as container:
            codec = container.streams.video[0].codec_context
            return int(codec.width or 0), int(codec.height or 0)
    except VideoContainerError as err:
        raise InputError(str(err)) from err
    except (av.error.FFmpegError, OSError, ValueError, IndexError) as err:
        raise InputError("The file is not a readable video.") from err


def save_pasted_image(url: str, limits: Limits = DEFAULT_LIMITS) -> Path:
    """A pasted image (a ``data:`` URL holding the file base64-encoded), checked like an upload and written
    unchanged into the upload folder.

    Raises:
        InputError: not base64, over ``limits.max_file_size``, or not an image ``check_image_header`` accepts.
    """
    header, _, encoded = url.partition(",")
    if not header.endswith(";base64"):
        raise InputError("The pasted image is not base64-encoded; upload the file instead.")
    if len(encoded) * 3 // 4 > limits.max_file_size:
        raise InputError(
            f"The pasted image is {_mb(len(encoded) * 3 // 4)}; this demo accepts at most "
            f"{_mb(limits.max_file_size)}."
        )
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InputError("The pasted image is not valid base64; upload the file instead.") from err
    check_image_header(io.BytesIO(data), limits, "pasted image")
    with open_raster(io.BytesIO(data), "The pasted image") as img:  # within the pixel limit: checked above
        suffix = img.format.lower()
    folder = upload_folder() / "capeval-pasted"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()}.{suffix}"
    path.write_bytes(data)
    return path


# Gradio's component metaclass writes a typing stub (<module>.pyi) next to the source of every component
# class it creates; for these subclasses that would litter the package (and a read-only install) with a
# generated file. The stub only serves editors, so it is skipped while the classes below are created.
_write_stub = component_meta.create_or_modify_pyi
component_meta.create_or_modify_pyi = lambda *args, **kwargs: None


class _LocalOnly:
    """Refuses to download URLs into the cache and renders with the parent's front-end component."""

    _what = "file"
    _gradio_base: type = gr.File

    # The browser draws a component by its name and class id: those of the Gradio parent, whose
    # front-end is built in (another id makes the page look for a custom component and draw nothing).
    def get_block_name(self) -> str:
        return self._gradio_base.__name__.lower()

    def get_block_class(self) -> str:
        return self._gradio_base.__name__.lower()

    @classmethod
    def get_component_class_id(cls) -> str:
        return cls._gradio_base.get_component_class_id()

    def get_config(self, cls=None):
        return super().get_config(cls=cls or self._gradio_base)

    def _refuse_url(self, url_or_file_path) -> None:
        if url_or_file_path is not None and client_utils.is_http_url_like(str(url_or_file_path)):
            raise gr.Error(f"This demo does not fetch URLs: upload the {self._what} instead.")

    async def async_move_resource_to_block_cache(self, url_or_file_path):
        self._refuse_url(url_or_file_path)
        return await super().async_move_resource_to_block_cache(url_or_file_path)

    def move_resource_to_block_cache(self, url_or_file_path):
        self._refuse_url(url_or_file_path)
        return super().move_resource_to_block_cache(url_or_file_path)


def _as_gr_error(err: InputError) -> gr.Error:
    return gr.Error(str(err))


class UploadedImage(_LocalOnly, gr.Image):
    """``gr.Image`` giving the handler the path of an uploaded image, checked against the limits."""

    _what = "image"
    _gradio_base = gr.Image

    def __init__(self, *args, limits: Limits = DEFAULT_LIMITS, **kwargs) -> None:
        kwargs.setdefault("type", "filepath")
        kwargs.setdefault("sources", ["upload", "clipboard"])
        # The original file goes to capeval, which converts to RGB after the crop as CLIP's authors do.
        kwargs.setdefault("image_mode", None)
        super().__init__(*args, **kwargs)
        self.limits = limits

    def preprocess(self, payload):
        # Gradio's own preprocessing is never called: it opens the file with every PIL format and, for a
        # data: URL, decodes and re-saves the picture (running Ghostscript on EPS bytes).
        if payload is None:
            return None
        try:
            if (payload.url or "").startswith("data:"):
                return str(save_pasted_image(payload.url, self.limits))
            if not payload.path:
                raise InputError("The image upload is empty; upload it again.")
            path = check_uploaded_file(payload.path, self.limits.max_file_size, "image")
            check_image_header(path, self.limits)
        except InputError as err:
            raise _as_gr_error(err) from None
        return str(path)


class UploadedVideo(_LocalOnly, gr.Video):
    """``gr.Video`` giving the handler the path of an uploaded video within the length limit."""

    _what = "video"
    _gradio_base = gr.Video

    def __init__(self, *args, limits: Limits = DEFAULT_LIMITS, **kwargs) -> None:
        kwargs.setdefault("sources", ["upload"])
        # No server-side conversion: FFmpeg never runs on visitor files.
        kwargs.setdefault("format", None)
        kwargs.setdefault("include_audio", True)
        super().__init__(*args, **kwargs)
        self.limits = limits

    def preprocess(self, payload):
        if payload is None:
            return None
        try:
            path = check_uploaded_file(payload.path, self.limits.max_video_file_size, "video")
            check_video_header(path, self.limits)
        except InputError as err:
            raise _as_gr_error(err) from None
        return super().preprocess(payload)


class UploadedFrames(_LocalOnly, gr.File):
    """``gr.File`` for several uploaded frame images; gives the handler their checked paths in order."""

    _what = "frames"
    _gradio_base = gr.File

    def __init__(self, *args, limits: Limits = DEFAULT_LIMITS, **kwargs) -> None:
        kwargs.setdefault("file_count", "multiple")
        kwargs.setdefault("file_types", ["image"])
        kwargs.setdefault("type", "filepath")
        super().__init__(*args, **kwargs)
        self.limits = limits

    def preprocess(self, payload):
        value = super().preprocess(payload)
        if value is None:
            return None
        paths = value if isinstance(value, list) else [value]
        if len(paths) > self.limits.max_frames:
            raise gr.Error(f"{len(paths)} frames given; this demo accepts at most {self.limits.max_frames}.")
        try:
            for i, p in enumerate(paths):
                path = check_uploaded_file(p, self.limits.max_file_size, f"frame {i + 1}")
                check_image_header(path, self.limits, f"frame {i + 1}")
        except InputError as err:
            raise _as_gr_error(err) from None
        return paths


component_meta.create_or_modify_pyi = _write_stub
