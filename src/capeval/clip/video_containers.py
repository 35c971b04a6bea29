"""The video containers capeval opens: FFmpeg demuxers chosen by capeval, never guessed by FFmpeg.

Left to itself, FFmpeg picks a demuxer from a file's content, and some demuxers read other files or URLs named
inside the file: an HLS playlist (``#EXTM3U``), an ``ffconcat`` script, an ``image2`` pattern. A video upload or
a video path could so make capeval read a local file or fetch a URL. Every video capeval decodes (the metrics,
the evaluate modules, the CLI and the Spaces' uploads) is opened here instead: its first bytes must show one
of ``VIDEO_CONTAINERS``, that demuxer is named to FFmpeg explicitly, the path goes through FFmpeg's ``file:``
protocol (a name like ``concat:a|b`` is just a file name) and only the ``file`` protocol is allowed. Anything
else is refused by name before FFmpeg reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

VIDEO_CONTAINERS = {
    "mov": "MP4/QuickTime",
    "matroska": "Matroska/WebM",
    "avi": "AVI",
    "mpegts": "MPEG transport stream",
    "ogg": "Ogg",
}
"""FFmpeg demuxer -> the containers it reads. None of them follows a reference to another file: the MP4/MOV
demuxer would only with its ``enable_drefs`` option, which is off by default and never set here."""

_HEAD_BYTES = 1024
_MP4_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"uuid")
_TS_PACKET = 188

_REFUSED = (
    (b"#EXTM3U", "an HLS playlist (#EXTM3U)"),
    (b"ffconcat", "an FFmpeg concat script"),
    (b"[playlist]", "a PLS playlist"),
    (b"<?xml", "an XML file (a DASH manifest or SMIL playlist?)"),
    (b"#!", "a script"),
    (b"ID3", "an MP3 audio file: it has no video stream"),
    (b"fLaC", "a FLAC audio file: it has no video stream"),
)


class VideoContainerError(ValueError):
    """A file that is not one of ``VIDEO_CONTAINERS``; the message names what its first bytes show."""


def detect_container(head: bytes) -> str | None:
    """The FFmpeg demuxer of ``VIDEO_CONTAINERS`` that a file's first bytes show, or ``None``."""
    if head[4:8] in _MP4_BOXES:
        return "mov"
    if head.startswith(b"\x1a\x45\xdf\xa3"):  # EBML: Matroska and WebM
        return "matroska"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if head.startswith(b"OggS"):
        return "ogg"
    if len(head) > 2 * _TS_PACKET and head[0] == head[_TS_PACKET] == head[2 * _TS_PACKET] == 0x47:
        return "mpegts"
    return None


def _what_it_is(head: bytes) -> str:
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    for magic, name in _REFUSED:
        if stripped.startswith(magic):
            return name
    if not head:
        return "an empty file"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "a WAV audio file: it has no video stream"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "no container capeval opens"
    return "a text file"


def open_video_container(av, path: str | os.PathLike, what: str):
    """``av.open`` with the demuxer chosen from the file's first bytes, ``file:`` protocol only.

    Args:
        av: the imported PyAV module.
        path: a video file.
        what: how messages name the video (``"video 2 ('clip.mp4')"``).

    Raises:
        VideoContainerError: not one of ``VIDEO_CONTAINERS`` (a playlist, a script, text, another format).
        av.error.FFmpegError: the chosen demuxer cannot read it (the caller words it).
    """
    resolved = Path(os.fspath(path)).resolve()
    with open(resolved, "rb") as fh:
        head = fh.read(_HEAD_BYTES)
    demuxer = detect_container(head)
    if demuxer is None:
        raise VideoContainerError(
            f"{what} is not a readable video file: it is {_what_it_is(head)}; capeval opens only "
            f"{', '.join(VIDEO_CONTAINERS.values())} videos (capeval.clip.video_containers.VIDEO_CONTAINERS) "
            "and refuses other formats unread: re-encode it, e.g. as MP4"
        )
    return av.open(f"file:{resolved}", format=demuxer, options={"protocol_whitelist": "file"})
