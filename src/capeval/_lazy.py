"""Lazy public names: a package lists ``name -> "module"`` (or ``"module:attribute"``) and each name is
imported from its module on first use, so ``import capeval`` (or ``capeval.clip``) loads no torch."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, table: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for a package whose public names live in ``table``."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = table[name].partition(":")
        value = getattr(import_module(module), attribute or name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
