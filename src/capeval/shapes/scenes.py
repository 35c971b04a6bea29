"""The scenes of the drawn-shapes world and their captions: what a picture shows and how it is worded.

Each scene is a colour, a shape and a position (5 x 3 x 5 = 75 scenes). ``caption`` gives its canonical
English caption, ``paraphrase`` and ``paraphrases`` other wordings, ``mismatched`` the same scene with one
attribute wrong (the hard negatives). ``capeval.shapes`` re-exports these names.

``rng`` arguments accept a ``random.Random``, a ``numpy.random.Generator`` or an int seed (``Rand`` puts
one interface over the three).

>>> caption(Scene("red", "circle", "left"))
'a red circle on the left'
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields
from typing import Any

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (215, 38, 38),
    "green": (34, 160, 60),
    "blue": (35, 85, 215),
    "yellow": (240, 200, 30),
    "purple": (135, 55, 175),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
POSITIONS: tuple[str, ...] = ("left", "right", "top", "bottom", "center")

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


class Rand:
    """One interface over ``random.Random``, ``numpy.random.Generator`` and int seeds."""

    def __init__(self, rng: Any) -> None:
        if isinstance(rng, Rand):
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
    r = Rand(rng)
    return Scene(r.choice(tuple(COLORS)), r.choice(SHAPES), r.choice(POSITIONS))


def mismatched(scene: Scene, attribute: str, rng: Any = None) -> Scene:
    """The scene with one attribute (``"color"``, ``"shape"`` or ``"position"``) changed to another value.

    Gives the hard negatives of the shapes world: "a red circle on the left" vs "a blue circle on the left".
    """
    options = {"color": tuple(COLORS), "shape": SHAPES, "position": POSITIONS}
    if attribute not in options:
        raise ValueError(f"unknown attribute {attribute!r}: choose one of {[f.name for f in fields(Scene)]}")
    current = getattr(scene, attribute)
    other = Rand(rng).choice([v for v in options[attribute] if v != current])
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
    r = Rand(rng)
    template = r.choice(_TEMPLATES)
    shape_word = r.choice(_SHAPE_ALTERNATIVES[scene.shape])
    pos = r.choice((_POSITION_PHRASES[scene.position], *_POSITION_ALTERNATIVES[scene.position]))
    text = _fill(template, scene, shape_word, pos)
    if text == caption(scene):
        # The first template with the canonical position phrase reproduces the caption: use its variant.
        text = f"there is {text}"
    return text
