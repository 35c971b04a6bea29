"""The shared Gradio demo of every capeval metric (the Spaces are a few lines over it).

>>> from capeval.demo import build_demo, launch
>>> demo = build_demo("clipscore")          # doctest: +SKIP
>>> launch(demo, server_name="127.0.0.1")   # doctest: +SKIP

The model is chosen from a fixed list (``capeval.demo.choices``); the one a Space starts with is decided once,
at start-up, by ``capeval.demo.models`` (``CAPEVAL_DEMO_MODEL``, else the paper's CLIP when cached or served by
the Hub, else the shapes CLIP shipped with capeval, under a banner). Safety limits live in ``capeval.demo.limits``.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "DEFAULT_LIMITS": "capeval.demo.limits",
    "InputError": "capeval.demo.limits",
    "Limits": "capeval.demo.limits",
    "Panel": "capeval.demo.panel",
    "Scored": "capeval.demo.panel",
    "build_demo": "capeval.demo.builder",
    "get_panel": "capeval.demo.panels",
    "launch": "capeval.demo.builder",
    "panel_class": "capeval.demo.panels",
    "read_card": "capeval.demo.builder",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(
    __name__, _PUBLIC, globals(), requires=("spaces", "the demo (capeval.demo)")
)
