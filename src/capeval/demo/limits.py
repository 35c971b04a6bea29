"""Safety limits of the public demos, and the checks on typed text that enforce them.

A Space is open to anyone: every input is bounded before any model sees it, so one visitor cannot hold
the machine (huge uploads, decompression bombs, hour-long videos, thousands of captions) and the queue
keeps a bounded number of scoring runs at once. The numbers are class defaults of ``Limits``; a Space
may pass its own.
"""

from __future__ import annotations

from dataclasses import dataclass


class InputError(ValueError):
    """Input refused by a demo limit or check; its message is shown to the visitor as is."""


@dataclass(frozen=True)
class Limits:
    """Bounds applied by every demo.

    Attributes:
        max_file_size: largest upload Gradio accepts (its ``launch(max_file_size=...)``), in bytes.
        max_video_file_size: the same for the video demo (videos are bigger than images).
        max_image_pixels: width x height of an uploaded image or frame, read from its header before decoding,
            and of the image the model's preprocessing resizes it to (its shorter side to the model's input
            size), so that neither the decoding nor the resize of one image handles more pixels.
        max_request_pixels: pixels handled in one request, summed over the distinct images or sampled frames
            it reads once each: decoded (or converted) plus resized.
        max_video_seconds: length of an uploaded video, read from its container.
        max_video_pixels: width x height of a video's frames.
        max_frames: frames per video given as images, and the largest ``num_frames`` option.
        max_captions: candidate captions per request.
        max_references: references per request.
        max_caption_chars: characters per caption or reference.
        concurrency: scoring runs at the same time (all events share one limit).
        queue_size: requests waiting in the queue; more are refused with "queue full".
    """

    max_file_size: int = 10 * 1024 * 1024
    max_video_file_size: int = 20 * 1024 * 1024
    max_image_pixels: int = 25_000_000
    max_request_pixels: int = 400_000_000  # 16 frames at the per-image limit: tens of seconds on 2 cores
    max_video_seconds: float = 30.0
    max_video_pixels: int = 3840 * 2160
    max_frames: int = 32
    max_captions: int = 16
    max_references: int = 16
    max_caption_chars: int = 500
    concurrency: int = 1
    queue_size: int = 16


DEFAULT_LIMITS = Limits()


def split_lines(text: str | None) -> list[str]:
    """Non-blank lines of a text box, stripped (one caption per line)."""
    if not text:
        return []
    return [line.strip() for line in str(text).splitlines() if line.strip()]


def check_texts(texts: list[str], what: str, limit: int, limits: Limits, required: bool = True) -> list[str]:
    """Refuse an empty list (when required), too many items or an over-long item, naming it.

    Args:
        texts: the lines typed by the visitor.
        what: ``"caption"`` or ``"reference"``, for messages.
        limit: most items allowed.
        limits: gives the per-item character limit.
        required: whether at least one item is needed.

    Raises:
        InputError: with a message fit for the visitor.
    """
    if required and not texts:
        raise InputError(f"Type at least one {what} (one per line).")
    if len(texts) > limit:
        raise InputError(f"{len(texts)} {what}s given; this demo scores at most {limit} per request.")
    for i, text in enumerate(texts):
        if len(text) > limits.max_caption_chars:
            raise InputError(
                f"{what} {i + 1} has {len(text)} characters; this demo accepts at most "
                f"{limits.max_caption_chars} per {what}."
            )
    return texts
