"""The shared Gradio demo of every capeval metric (the Spaces are a few lines over it).

>>> from capeval.demo import build_demo, launch
>>> demo = build_demo("clipscore")          # doctest: +SKIP
>>> launch(demo, server_name="127.0.0.1")   # doctest: +SKIP

The model is chosen from a fixed list (``capeval.demo.choices``); the one a Space starts with is decided once,
at start-up, by ``capeval.demo.models`` (``CAPEVAL_DEMO_MODEL``, else the paper's CLIP when cached or served by
the Hub, else the shapes CLIP shipped with capeval, under a banner). Safety limits live in ``capeval.demo.limits``.
"""

from __future__ import annotations

from capeval.demo.builder import build_demo, launch, read_card
from capeval.demo.limits import DEFAULT_LIMITS, InputError, Limits
from capeval.demo.panel import Panel, Scored
from capeval.demo.panels import get_panel, panel_class

__all__ = [
    "DEFAULT_LIMITS",
    "InputError",
    "Limits",
    "Panel",
    "Scored",
    "build_demo",
    "get_panel",
    "launch",
    "panel_class",
    "read_card",
]
