"""The panel of each metric, by name."""

from __future__ import annotations

from importlib import import_module

from capeval.demo.limits import DEFAULT_LIMITS, Limits
from capeval.demo.panel import Panel

# metric -> "module:Class"; imported on demand so one Space loads only what it shows.
PANELS = {
    "clipscore": "capeval.demo.panels_image:CLIPScorePanel",
    "refclipscore": "capeval.demo.panels_image:RefCLIPScorePanel",
    "pacscore": "capeval.demo.panels_image:PACScorePanel",
    "wmd": "capeval.demo.panels_text:WMDPanel",
    "wembsim": "capeval.demo.panels_text:WEmbSimPanel",
    "emscore": "capeval.demo.panels_video:EMScorePanel",
}


def get_panel(metric: str, limits: Limits = DEFAULT_LIMITS) -> Panel:
    """The panel of ``metric`` with these limits.

    Raises:
        ValueError: a metric without a demo panel.
    """
    if metric not in PANELS:
        raise ValueError(f"no demo panel for {metric!r}; panels exist for {', '.join(PANELS)}")
    module, cls = PANELS[metric].split(":")
    return getattr(import_module(module), cls)(limits)
