"""Drawing the shapes world with PIL: one picture of a scene, other drawings of it, short clips.

CLIP preprocessing resizes the shorter side and centre-crops a square, so every shape is placed inside
the central square of the canvas, whatever its aspect ratio: a "left" shape survives the crop.
``capeval.shapes`` re-exports these names. This module needs only PIL (no torch).

>>> draw(Scene("green", "triangle", "top")).size
(128, 128)
"""

from __future__ import annotations

import math
from typing import Any

from PIL import Image, ImageDraw

from capeval.shapes.scenes import COLORS, Rand, Scene

DEFAULT_SIZE = (128, 128)
BACKGROUND = (255, 255, 255)
# Light backgrounds used by redraw_variant (and in training), so a pale canvas is not a cue.
VARIANT_BACKGROUNDS = ((255, 255, 255), (245, 245, 245), (250, 247, 238), (236, 241, 247), (242, 247, 238))

# Shape centre as a fraction of the central square (x, y), and the shape's half-size there.
_ANCHORS = {
    "left": (0.22, 0.5),
    "right": (0.78, 0.5),
    "top": (0.5, 0.22),
    "bottom": (0.5, 0.78),
    "center": (0.5, 0.5),
}
_HALF_SIZE = 0.15
_MARGIN = 0.02  # the shape stays this far (fraction of the square) inside the central square


def central_square(size: tuple[int, int]) -> tuple[float, float, float]:
    """(left, top, side) of the square that CLIP's centre crop keeps from a ``size`` = (W, H) canvas."""
    w, h = size
    side = min(w, h)
    return (w - side) / 2.0, (h - side) / 2.0, float(side)


def _shape_points(shape: str, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    if shape == "square":
        corners = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
        k = 0.85 * r  # a square of half-side 0.85 r has about the area of the circle of radius r
    else:
        corners = [(0.0, -1.0), (0.92, 0.72), (-0.92, 0.72)]
        k = 1.1 * r
    ca, sa = math.cos(angle), math.sin(angle)
    return [(cx + k * (x * ca - y * sa), cy + k * (x * sa + y * ca)) for x, y in corners]


def _jittered_color(rgb: tuple[int, int, int], r: Rand | None, amount: int = 14) -> tuple[int, int, int]:
    if r is None:
        return rgb
    return tuple(min(255, max(0, round(v + r.uniform(-amount, amount)))) for v in rgb)


def _place(
    scene: Scene, size: tuple[int, int], r: Rand | None, jitter: bool, scale: float, offset=(0.0, 0.0)
) -> tuple[float, float, float, float]:
    """Centre (x, y), radius and rotation (radians) of the shape on a ``size`` canvas."""
    left, top, side = central_square(size)
    ax, ay = _ANCHORS[scene.position]
    half = _HALF_SIZE * scale
    angle = 0.0
    if r is not None and jitter:
        half *= r.uniform(0.8, 1.2)
        ax += r.uniform(-0.06, 0.06)
        ay += r.uniform(-0.06, 0.06)
        if scene.shape != "circle":
            angle = math.radians(r.uniform(-15.0, 15.0))
    ax, ay = ax + offset[0], ay + offset[1]
    # Extent of the drawn shape around its centre, as a fraction of the square (triangle/square corners).
    reach = half * (1.25 if scene.shape != "circle" else 1.0)
    lo, hi = reach + _MARGIN, 1.0 - reach - _MARGIN
    if lo > hi:
        raise ValueError(f"scale={scale} draws a shape larger than the central square")
    ax, ay = min(max(ax, lo), hi), min(max(ay, lo), hi)
    return left + ax * side, top + ay * side, half * side, angle


def _render(
    scene: Scene,
    size: tuple[int, int],
    background,
    r: Rand | None,
    jitter: bool,
    scale: float,
    offset=(0.0, 0.0),
    fill: tuple[int, int, int] | None = None,
) -> Image.Image:
    if isinstance(size, int):
        size = (size, size)
    w, h = int(size[0]), int(size[1])
    if w < 8 or h < 8:
        raise ValueError(f"size must be at least 8x8 pixels, got {size}")
    img = Image.new("RGB", (w, h), tuple(background))
    pen = ImageDraw.Draw(img)
    cx, cy, rad, angle = _place(scene, (w, h), r, jitter, scale, offset)
    if fill is None:
        fill = _jittered_color(COLORS[scene.color], r if jitter else None)
    if scene.shape == "circle":
        pen.ellipse((cx - rad, cy - rad, cx + rad, cy + rad), fill=fill)
    else:
        pen.polygon(_shape_points(scene.shape, cx, cy, rad, angle), fill=fill)
    return img


def draw(
    scene: Scene,
    rng: Any = None,
    size: tuple[int, int] | int = DEFAULT_SIZE,
    jitter: bool = True,
    scale: float = 1.0,
    background: tuple[int, int, int] = BACKGROUND,
) -> Image.Image:
    """Draw a scene as an RGB PIL image.

    Args:
        scene: what to draw.
        rng: with an rng (and ``jitter``), the shape's size, offset, rotation and colour vary slightly;
            ``None`` draws the canonical, deterministic picture.
        size: (width, height) of the canvas, or one int for a square; the shape stays inside its
            central square, which CLIP's centre crop keeps.
        jitter: set False to draw the canonical geometry even when an rng is given.
        scale: shape size relative to the canonical size (about a quarter of the central square's side).
        background: RGB of the canvas.
    """
    return _render(scene, size, background, Rand(rng) if rng is not None else None, jitter, scale)


VARIANT_SIZES = ((128, 128), (96, 96), (160, 120), (120, 160), (128, 96), (224, 224), (200, 150))


def redraw_variant(scene: Scene, rng: Any = None) -> Image.Image:
    """Another drawing of the same scene: other canvas size, jitter, scale and background.

    PAC-S tests use it as the "generated image" paired with a real ``draw``.
    """
    r = Rand(rng)
    return _render(
        scene,
        r.choice(VARIANT_SIZES),
        r.choice(VARIANT_BACKGROUNDS),
        r,
        jitter=True,
        scale=r.uniform(0.85, 1.2),
    )


def draw_frames(
    scene: Scene,
    n_frames: int = 8,
    rng: Any = None,
    size: tuple[int, int] | int = DEFAULT_SIZE,
    amplitude: float = 0.06,
    background: tuple[int, int, int] = BACKGROUND,
) -> list[Image.Image]:
    """A short clip of the scene: the shape moves along a small circle around its position.

    Every frame still depicts ``scene`` (same colour, shape and position), so ``caption(scene)`` describes
    the whole clip. With an rng, the size, colour and the motion's phase are drawn once per clip;
    without one the clip is deterministic.
    """
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    r = Rand(rng) if rng is not None else None
    scale = r.uniform(0.85, 1.15) if r is not None else 1.0
    phase = r.uniform(0.0, 2 * math.pi) if r is not None else 0.0
    fill = _jittered_color(COLORS[scene.color], r)
    frames = []
    for i in range(n_frames):
        t = phase + 2 * math.pi * i / n_frames
        offset = (amplitude * math.cos(t), amplitude * math.sin(t))
        frames.append(_render(scene, size, background, None, False, scale, offset, fill=fill))
    return frames


def draw_sequence(
    scenes: list[Scene],
    frames_per_scene: int = 4,
    rng: Any = None,
    size: tuple[int, int] | int = DEFAULT_SIZE,
) -> list[Image.Image]:
    """Frames of several scenes one after the other (a clip whose content changes), for video metrics."""
    r = Rand(rng) if rng is not None else None
    out: list[Image.Image] = []
    for scene in scenes:
        out.extend(draw_frames(scene, frames_per_scene, Rand(r.index(2**31)) if r else None, size=size))
    return out
