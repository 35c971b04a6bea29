"""The models, checkpoints and word vectors a demo offers, chosen by key from a fixed list.

Visitors pick from a dropdown whose values are short keys; the server maps a key to a model id or folder.
Nothing a visitor types becomes a path or a Hub id, so the demo never reads a server path or downloads a
repository a visitor names. The operator configures the list with environment variables:

- ``CAPEVAL_DEMO_MODEL``: the CLIP the demo starts with (Hub id or local folder). Unset: the paper's model
  (``openai/clip-vit-base-patch32``) when it is cached or the Hub serves it, else the shapes CLIP shipped with
  capeval (``capeval.demo.models`` decides, once, when the Space starts).
- ``CAPEVAL_DEMO_CHECKPOINT``: PAC-S weights (file, converted folder or Hub repo) for the pacscore demo.
- ``CAPEVAL_DEMO_VECTORS``: word vectors for wmd/wembsim (default: the packaged GloVe-6B-50d).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MODEL_ENV = "CAPEVAL_DEMO_MODEL"
CHECKPOINT_ENV = "CAPEVAL_DEMO_CHECKPOINT"
VECTORS_ENV = "CAPEVAL_DEMO_VECTORS"
SHAPES_KEY = "shapes-clip"


@dataclass(frozen=True)
class Choice:
    """One dropdown entry: ``key`` travels to the browser, ``spec`` (model id, folder...) stays on the server."""

    key: str
    label: str
    spec: str | None


def shapes_clip() -> str | None:
    """Folder of the tiny CLIP trained on drawn shapes (ships with capeval), ``None`` if it is missing."""
    from capeval.shapes import shapes_clip_path

    path = shapes_clip_path()
    return str(path) if (path / "config.json").is_file() else None


def same_folder(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def label_of(spec: str) -> str:
    path = Path(os.path.expanduser(spec))
    return path.name if path.is_dir() else spec


def checkpoint_choices() -> list[Choice]:
    """PAC-S weights offered: the configured ones, if any (PAC-S has no public Hub default)."""
    configured = os.environ.get(CHECKPOINT_ENV)
    if not configured:
        return []
    return [Choice("configured", label_of(configured), configured)]


def vector_choices() -> list[Choice]:
    """Word vectors offered, the default first."""
    from capeval.text.vectors import DEFAULT_VECTORS

    out: list[Choice] = []
    configured = os.environ.get(VECTORS_ENV)
    if configured and configured != DEFAULT_VECTORS:
        out.append(Choice("configured", label_of(configured), configured))
    out.append(Choice("glove", f"{DEFAULT_VECTORS} (packaged GloVe, 50-d)", None))
    return out


def resolve(choices: list[Choice], key: str | None, what: str) -> Choice:
    """The choice with this key; anything else is refused (a visitor cannot name another model)."""
    from capeval.demo.limits import InputError

    for choice in choices:
        if choice.key == key:
            return choice
    raise InputError(f"unknown {what} {key!r}: choose one from the list")
