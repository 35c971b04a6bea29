"""The metrics capeval ships, by name: their plain-API classes, the options and inputs each takes.

Everything that turns a metric name into a scorer (the corpus runs, the distributed scoring, the Trainer
hooks, the CLI, the benchmarks) goes through here, so a new metric is registered once.
"""

from __future__ import annotations

import inspect
from importlib import import_module
from typing import Any

# The evaluate modules shipped under metrics/ (and in the wheel), one per name.
METRICS = ("clipscore", "refclipscore", "pacscore", "wembsim", "wmd", "emscore")

# Metric name -> public class name in the capeval namespace (loaded lazily, so metrics landing later work).
METRIC_CLASSES = {
    "clipscore": "CLIPScore",
    "refclipscore": "RefCLIPScore",
    "pacscore": "PACScore",
    "wmd": "WMD",
    "wembsim": "WEmbSim",
    "emscore": "EMScore",
}
_MODULES = {
    "clipscore": "capeval.clipscore",
    "refclipscore": "capeval.clipscore",
    "pacscore": "capeval.pacscore",
    "wmd": "capeval.wmd",
    "wembsim": "capeval.wembsim",
    "emscore": "capeval.emscore",
}


def metric_class(name: str) -> type:
    """The plain-API class of a metric name (``"clipscore"`` -> ``capeval.CLIPScore``).

    Raises:
        ValueError: unknown name, or a metric this capeval installation does not provide.
    """
    if name not in METRIC_CLASSES:
        raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_CLASSES)}")
    import capeval

    cls_name = METRIC_CLASSES[name]
    try:
        return getattr(capeval, cls_name)
    except AttributeError:
        pass
    try:  # a metric not (yet) exported at the top level
        return getattr(import_module(_MODULES[name]), cls_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"metric {name!r} ({cls_name}) is not available in this capeval") from err


def accepted_options(cls: type) -> set[str]:
    """Keyword arguments a metric class's constructor takes, following ``*args, **kwargs`` up the MRO."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    names.discard("self")
    return names


def call_inputs(scorer: Any) -> set[str]:
    """Keyword inputs a scorer's ``__call__`` takes (``images``, ``references``, ``videos``, ...)."""
    params = inspect.signature(scorer.__call__).parameters
    return {n for n in params if n != "predictions"}


def build_scorer(name: str, **options) -> Any:
    """``metric_class(name)(**options)``; options the class does not take are an error naming them."""
    cls = metric_class(name)
    unknown = sorted(set(options) - accepted_options(cls))
    if unknown:
        raise TypeError(
            f"{name} does not take the option(s) {unknown}; it takes {sorted(accepted_options(cls))}"
        )
    return cls(**options)
