"""A drawn-shapes world: one coloured shape per picture, its captions, and the tiny CLIP trained on it.

Tests, docs examples and demos need a CLIP whose scores mean something without any download. Each
scene is a colour, a shape and a position (5 x 3 x 5 = 75 scenes); ``draw`` renders it with PIL,
``caption`` gives its canonical English caption and ``paraphrase`` other wordings. The committed model
at ``shapes_clip_path()`` was trained on these drawings by ``scripts/train_shapes_clip.py``.

CLIP preprocessing resizes the shorter side and centre-crops a square, so every shape is placed inside
the central square of the canvas, whatever its aspect ratio: a "left" shape survives the crop.

``rng`` arguments accept a ``random.Random``, a ``numpy.random.Generator`` or an int seed. This module
needs only PIL (no torch).

>>> caption(Scene("red", "circle", "left"))
'a red circle on the left'
>>> draw(Scene("green", "triangle", "top")).size
(128, 128)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (215, 38, 38),
    "green": (34, 160, 60),
    "blue": (35, 85, 215),
    "yellow": (240, 200, 30),
    "purple": (135, 55, 175),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
POSITIONS: tuple[str, ...] = ("left", "right", "top", "bottom", "center")

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

_POSITION_PHRASES = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "center": "in the center",
}
# Other wordings of each position, used by paraphrase().
_POSITION_ALTERNATIVES = {
    "left": ("to the left", "on the left side", "on the left-hand side", "at the left", "in the left part"),
    "right": (
        "to the right",
        "on the right side",
        "on the right-hand side",
        "at the right",
        "in the right part",
    ),
    "top": (
        "near the top",
        "at the top of the picture",
        "in the upper part",
        "up at the top",
        "towards the top",
    ),
    "bottom": (
        "near the bottom",
        "at the bottom of the picture",
        "in the lower part",
        "down at the bottom",
        "towards the bottom",
    ),
    "center": (
        "in the middle",
        "in the centre",
        "in the middle of the picture",
        "right in the middle",
        "at the center",
    ),
}
_SHAPE_ALTERNATIVES = {
    "circle": ("circle", "disc", "round dot"),
    "square": ("square",),
    "triangle": ("triangle",),
}
# Templates of paraphrase(): {a} article + colour + shape ("a red circle"), {c} colour, {s} shape, {p} position.
_TEMPLATES = (
    "{a} {p}",
    "there is {a} {p}",
    "{ac} {s}, {c}, {p}",
    "{p}, {a}",
    "a picture of {a} {p}",
    "a drawing of {a} {p}",
    "{a} drawn {p}",
    "one {c} {s} {p}",
    "{ac} {s} that is {c}, {p}",
    "{c} {s} {p}",
    "a simple {c} {s} {p}",
    "a single {c} {s} {p} on a plain background",
)


@dataclass(frozen=True)
class Scene:
    """One picture of the shapes world: a ``color`` shape of kind ``shape`` at ``position``."""

    color: str
    shape: str
    position: str

    def __post_init__(self) -> None:
        for name, allowed in (("color", tuple(COLORS)), ("shape", SHAPES), ("position", POSITIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}: choose one of {list(allowed)}")


def all_scenes() -> list[Scene]:
    """Every scene of the attribute grid (colour-major, then shape, then position): 75 scenes."""
    return [Scene(c, s, p) for c in COLORS for s in SHAPES for p in POSITIONS]


class _Rand:
    """One interface over ``random.Random``, ``numpy.random.Generator`` and int seeds."""

    def __init__(self, rng: Any) -> None:
        if isinstance(rng, _Rand):
            rng = rng._rng
        if rng is None or isinstance(rng, int):
            rng = random.Random(rng)
        self._rng = rng
        self._numpy = not isinstance(rng, random.Random) and hasattr(rng, "integers")
        if not self._numpy and not isinstance(rng, random.Random):
            raise TypeError(
                f"rng must be a random.Random, a numpy Generator or an int, got {type(rng).__name__}"
            )

    def uniform(self, lo: float, hi: float) -> float:
        return float(self._rng.uniform(lo, hi))

    def index(self, n: int) -> int:
        return int(self._rng.integers(n)) if self._numpy else self._rng.randrange(n)

    def choice(self, seq):
        return seq[self.index(len(seq))]


def random_scene(rng: Any = None) -> Scene:
    """A scene drawn uniformly from the grid."""
    r = _Rand(rng)
    return Scene(r.choice(tuple(COLORS)), r.choice(SHAPES), r.choice(POSITIONS))


def mismatched(scene: Scene, attribute: str, rng: Any = None) -> Scene:
    """The scene with one attribute (``"color"``, ``"shape"`` or ``"position"``) changed to another value.

    Gives the hard negatives of the shapes world: "a red circle on the left" vs "a blue circle on the left".
    """
    options = {"color": tuple(COLORS), "shape": SHAPES, "position": POSITIONS}
    if attribute not in options:
        raise ValueError(f"unknown attribute {attribute!r}: choose one of {[f.name for f in fields(Scene)]}")
    current = getattr(scene, attribute)
    other = _Rand(rng).choice([v for v in options[attribute] if v != current])
    values = {f.name: getattr(scene, f.name) for f in fields(Scene)}
    values[attribute] = other
    return Scene(**values)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def caption(scene: Scene) -> str:
    """The canonical caption, e.g. ``"a red circle on the left"``, ``"a green triangle at the top"``."""
    return f"{_article(scene.color)} {scene.color} {scene.shape} {_POSITION_PHRASES[scene.position]}"


def all_captions() -> list[str]:
    """The canonical caption of every scene, in ``all_scenes()`` order."""
    return [caption(s) for s in all_scenes()]


def _fill(template: str, scene: Scene, shape_word: str, position: str) -> str:
    return template.format(
        a=f"{_article(scene.color)} {scene.color} {shape_word}",
        ac=_article(shape_word),
        c=scene.color,
        s=shape_word,
        p=position,
    )


def paraphrases(scene: Scene) -> list[str]:
    """Every other wording of the scene that ``paraphrase`` can return (the canonical caption excluded)."""
    canonical = caption(scene)
    out: list[str] = []
    for template in _TEMPLATES:
        for shape_word in _SHAPE_ALTERNATIVES[scene.shape]:
            for pos in (_POSITION_PHRASES[scene.position], *_POSITION_ALTERNATIVES[scene.position]):
                text = _fill(template, scene, shape_word, pos)
                if text != canonical and text not in out:
                    out.append(text)
    return out


def paraphrase(scene: Scene, rng: Any = None) -> str:
    """Another wording of the same scene, e.g. ``"a circle, red, to the left"`` (never the canonical caption)."""
    r = _Rand(rng)
    template = r.choice(_TEMPLATES)
    shape_word = r.choice(_SHAPE_ALTERNATIVES[scene.shape])
    pos = r.choice((_POSITION_PHRASES[scene.position], *_POSITION_ALTERNATIVES[scene.position]))
    text = _fill(template, scene, shape_word, pos)
    if text == caption(scene):
        # The first template with the canonical position phrase reproduces the caption: use its variant.
        text = f"there is {text}"
    return text


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


def _jittered_color(rgb: tuple[int, int, int], r: _Rand | None, amount: int = 14) -> tuple[int, int, int]:
    if r is None:
        return rgb
    return tuple(min(255, max(0, round(v + r.uniform(-amount, amount)))) for v in rgb)


def _place(
    scene: Scene, size: tuple[int, int], r: _Rand | None, jitter: bool, scale: float, offset=(0.0, 0.0)
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
    r: _Rand | None,
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
    return _render(scene, size, background, _Rand(rng) if rng is not None else None, jitter, scale)


VARIANT_SIZES = ((128, 128), (96, 96), (160, 120), (120, 160), (128, 96), (224, 224), (200, 150))


def redraw_variant(scene: Scene, rng: Any = None) -> Image.Image:
    """Another drawing of the same scene: other canvas size, jitter, scale and background.

    PAC-S tests use it as the "generated image" paired with a real ``draw``.
    """
    r = _Rand(rng)
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
    r = _Rand(rng) if rng is not None else None
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
    r = _Rand(rng) if rng is not None else None
    out: list[Image.Image] = []
    for scene in scenes:
        out.extend(draw_frames(scene, frames_per_scene, _Rand(r.index(2**31)) if r else None, size=size))
    return out


def shapes_clip_path() -> Path:
    """Folder of the committed shapes CLIP (a transformers ``CLIPModel`` folder with its tokenizer).

    Pass ``str(shapes_clip_path())`` as ``model=`` to any capeval metric.
    """
    return Path(__file__).resolve().parent / "assets" / "shapes-clip"


def example_items(n_images: int = 12, seed: int = 0, size: tuple[int, int] = (160, 120)) -> dict[str, dict]:
    """The drawn scenes of an example folder, with their candidate and reference captions (nothing written).

    Half the candidates describe their image (canonical caption or a paraphrase); the other half get one
    attribute wrong (colour, shape or position, in turn) or, every fourth, all three. Scenes are distinct.
    References are 2 to 5 paraphrases of the true scene, never its canonical caption.

    Returns:
        ``{image_id: {"scene", "image" (PIL), "candidate", "references", "correct" (bool),
        "wrong" ("color", "shape", "position", "all" or None)}}``, in id order.
    """
    grid = all_scenes()
    if not 1 <= n_images <= len(grid):
        raise ValueError(f"n_images must be between 1 and {len(grid)} (distinct scenes), got {n_images}")
    r = _Rand(seed)
    order = list(range(len(grid)))
    for i in range(len(order) - 1, 0, -1):  # Fisher-Yates through _Rand, so the folder depends on seed only
        j = r.index(i + 1)
        order[i], order[j] = order[j], order[i]
    wrong_kinds = ("color", "shape", "position", "all")
    items: dict[str, dict] = {}
    for k in range(n_images):
        scene = grid[order[k]]
        image = draw(scene, r, size=size)
        if k % 2 == 0:
            text = caption(scene) if k % 4 == 0 else paraphrase(scene, r)
            wrong = None
        else:
            wrong = wrong_kinds[(k // 2) % len(wrong_kinds)]
            other = scene
            for attr in ("color", "shape", "position") if wrong == "all" else (wrong,):
                other = mismatched(other, attr, r)
            text = caption(other)
        refs: list[str] = []
        n_refs = 2 + r.index(4)
        while len(refs) < n_refs:
            ref = paraphrase(scene, r)
            if ref not in refs:
                refs.append(ref)
        items[f"shapes{k:02d}"] = {
            "scene": scene,
            "image": image,
            "candidate": text,
            "references": refs,
            "correct": wrong is None,
            "wrong": wrong,
        }
    return items


def make_example_folder(
    folder: str | Path, n_images: int = 12, seed: int = 0, size: tuple[int, int] = (160, 120)
) -> dict[str, dict]:
    """Write ``example_items`` as a folder in the layout of the CLIPScore authors' script.

    Layout: ``images/<image_id>.png``, ``candidates.json`` (``{image_id: caption}``) and ``references.json``
    (``{image_id: [captions]}``). The same seed writes byte-identical files.

    Returns:
        the items, as ``example_items`` returns them.
    """
    import json

    items = example_items(n_images, seed, size)
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for image_id, item in items.items():
        item["image"].save(folder / "images" / f"{image_id}.png", optimize=True)
    candidates = {image_id: item["candidate"] for image_id, item in items.items()}
    references = {image_id: item["references"] for image_id, item in items.items()}
    (folder / "candidates.json").write_text(json.dumps(candidates, indent=2) + "\n")
    (folder / "references.json").write_text(json.dumps(references, indent=2) + "\n")
    return items
