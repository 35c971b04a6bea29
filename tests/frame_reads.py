"""Frames written as image files, and a count of the frames the video reader decodes and resizes, for the tests
that prove each distinct frame is read once."""

from __future__ import annotations

import numpy as np
from PIL import Image


def write_frame(path, size=(40, 30), seed=0):
    """A noise frame of ``size`` saved at ``path``; its path as a string."""
    Image.fromarray(np.random.RandomState(seed).randint(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
        path
    )
    return str(path)


def count_frame_reads(monkeypatch) -> list:
    """Counts the frames the video reader decodes and resizes."""
    import capeval.clip.video as video

    reads = []
    real = video.resize_and_crop
    monkeypatch.setattr(video, "resize_and_crop", lambda img, size: reads.append(img.size) or real(img, size))
    return reads
