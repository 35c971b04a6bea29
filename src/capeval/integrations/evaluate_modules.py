"""Finding and loading the packaged evaluate modules (``capeval.load("clipscore")``)."""

from __future__ import annotations

from pathlib import Path


def _module_roots() -> list[Path]:
    package = Path(__file__).resolve().parents[1]
    # Wheels carry the modules inside the package; an editable install or a clone reads the repo's metrics/.
    return [package / "_modules", package.parents[1] / "metrics"]


def module_path(name: str) -> Path:
    """Folder of the evaluate module ``name`` (holding ``<name>.py`` and its metric card).

    Raises:
        ValueError: unknown metric name, or a module not shipped with this installation.
    """
    # Looked up by its folder, so that loading one module imports no other metric's code.
    if isinstance(name, str) and name.isidentifier():
        for root in _module_roots():
            folder = root / name
            if (folder / f"{name}.py").is_file():
                return folder
    from capeval.registry import shipped_metrics

    if name not in shipped_metrics():
        raise ValueError(f"unknown metric {name!r}; capeval ships {', '.join(shipped_metrics())}")
    raise ValueError(
        f"metric {name!r} is not part of this capeval installation (looked in {_module_roots()})"
    )


def load(name: str, **kwargs):
    """``evaluate.load`` on the packaged module folder: works offline and from any directory.

    Args:
        name: one of ``capeval.METRICS``.
        **kwargs: passed to ``evaluate.load``: its own (``config_name``, ``num_process``, ``process_id``, ...)
            and the module's options (``capeval.load("clipscore", model=..., device="cuda")``), which the module
            keeps and uses under those given to ``compute``; an option it does not have is a ``TypeError``.
    """
    import evaluate

    return evaluate.load(str(module_path(name)), **kwargs)
