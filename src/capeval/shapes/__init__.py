"""A drawn-shapes world: one coloured shape per picture, its captions, and the tiny CLIP trained on it.

Tests, docs examples and demos need a CLIP whose scores mean something without any download. Each
scene is a colour, a shape and a position (5 x 3 x 5 = 75 scenes); ``draw`` renders it with PIL,
``caption`` gives its canonical English caption and ``paraphrase`` other wordings. The committed model
at ``shapes_clip_path()`` was trained on these drawings by ``scripts/train_shapes_clip.py``.

This package is the world's public face: the scenes and their wordings live in
``capeval.shapes.scenes``, the drawing in ``capeval.shapes.drawing``, the committed model's path and the
example folders built from the world in ``capeval.shapes.examples``; their names are imported from here on
first use.

``rng`` arguments accept a ``random.Random``, a ``numpy.random.Generator`` or an int seed. This module
needs only PIL (no torch).

>>> caption(Scene("red", "circle", "left"))
'a red circle on the left'
>>> draw(Scene("green", "triangle", "top")).size
(128, 128)
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "BACKGROUND": "capeval.shapes.drawing",
    "COLORS": "capeval.shapes.scenes",
    "DEFAULT_SIZE": "capeval.shapes.drawing",
    "POSITIONS": "capeval.shapes.scenes",
    "SHAPES": "capeval.shapes.scenes",
    "VARIANT_BACKGROUNDS": "capeval.shapes.drawing",
    "VARIANT_SIZES": "capeval.shapes.drawing",
    "Scene": "capeval.shapes.scenes",
    "all_captions": "capeval.shapes.scenes",
    "all_scenes": "capeval.shapes.scenes",
    "caption": "capeval.shapes.scenes",
    "central_square": "capeval.shapes.drawing",
    "draw": "capeval.shapes.drawing",
    "draw_frames": "capeval.shapes.drawing",
    "draw_sequence": "capeval.shapes.drawing",
    "example_items": "capeval.shapes.examples",
    "make_example_folder": "capeval.shapes.examples",
    "mismatched": "capeval.shapes.scenes",
    "paraphrase": "capeval.shapes.scenes",
    "paraphrases": "capeval.shapes.scenes",
    "random_scene": "capeval.shapes.scenes",
    "redraw_variant": "capeval.shapes.drawing",
    "shapes_clip_path": "capeval.shapes.examples",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
