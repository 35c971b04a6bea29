"""The panel of each metric, by name: found in the panel module of the metric's inputs.

Images, videos and word-vector metrics each have a module of panels (``panels_image``, ``panels_video``,
``panels_text``); a metric's panel is the ``Panel`` there whose ``metric`` is its name. Only that module is
imported, so one Space loads only what it shows.
"""

from __future__ import annotations

import inspect
from importlib import import_module

from capeval.demo.limits import DEFAULT_LIMITS, Limits
from capeval.demo.panel import Panel


def _panel_module(metric: str) -> str:
    from capeval.registry import spec

    declared = spec(metric)
    if declared.reads("videos"):
        return "capeval.demo.panels_video"
    return "capeval.demo.panels_image" if declared.reads("images") else "capeval.demo.panels_text"


def panel_class(metric: str) -> type[Panel]:
    """The ``Panel`` class of ``metric``.

    Raises:
        ValueError: an unknown metric, or one without a demo panel.
    """
    module = import_module(_panel_module(metric))
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if issubclass(cls, Panel) and getattr(cls, "metric", None) == metric:
            return cls
    raise ValueError(f"no demo panel for {metric!r} in {module.__name__}")


def get_panel(metric: str, limits: Limits = DEFAULT_LIMITS) -> Panel:
    """The panel of ``metric`` with these limits.

    Raises:
        ValueError: a metric without a demo panel.
    """
    return panel_class(metric)(limits)
