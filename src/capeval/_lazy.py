"""Lazy public names: a package lists ``name -> "module"`` (or ``"module:attribute"``) and each name is
imported from its module on first use, so ``import capeval`` (or ``capeval.clip``) loads no torch."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from importlib import import_module


def lazy_exports(
    package: str, table: dict[str, str], namespace: dict, requires: tuple[str, str] | None = None
) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for a package whose public names live in ``table``.

    ``__getattr__`` imports a public name from its module on first use, then a sub-module or sub-package of that
    name (``capeval.bench.run_benchmark`` after a bare ``import capeval``, as after ``import capeval.bench``).
    ``__dir__`` lists the public names and the module's dunders only: what the package imports for its own use, its
    private tables and the sub-modules imported so far are not part of what it offers.

    Args:
        package: the package's ``__name__``.
        table: public name -> ``"module"`` (the attribute of the same name) or ``"module:attribute"``.
        namespace: the package's ``globals()``, where each name is stored once imported.
        requires: ``(extra, what)``: the extra whose libraries the package's names need
            (``capeval.diagnostics.extras``), checked before any is imported, so a missing one is named.

    Returns:
        ``(__getattr__, __dir__)`` to assign at the package's top level.
    """

    def __getattr__(name: str):
        if name in table:
            if requires is not None:
                from capeval.diagnostics.extras import require_extra

                require_extra(*requires)
            module, _, attribute = table[name].partition(":")
            value = getattr(import_module(module), attribute or name)
            namespace[name] = value  # later lookups skip this function
            return value
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return import_module(f"{package}.{name}")  # importing sets it as an attribute of the package
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        dunders = (n for n in namespace if n.startswith("__") and n.endswith("__"))
        return sorted({*table, *dunders})

    return __getattr__, __dir__
