"""Signatures: one string naming everything that changes a metric's numbers.

``name|key=value|...|capeval=X|transformers=Y|torch=Z``. It is printed with every result and is the
cache key of stored per-item scores and embeddings, so two numbers with the same signature are comparable.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache  # read once per process: a signature is built for every result, a corpus batch's included
def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "none"


def library_versions(*packages: str) -> dict[str, str]:
    """Installed versions of capeval and the given libraries (``"none"`` when absent)."""
    from capeval import __version__

    return {"capeval": __version__, **{p: _version(p) for p in packages}}


def build_signature(
    name: str, options: dict[str, object], libraries: tuple[str, ...] = ("transformers", "torch")
) -> str:
    """``name|k=v|...`` with the options in the given order, then the library versions.

    Args:
        name: the metric name (``clipscore``).
        options: every option that changes a number, e.g. ``{"model": "openai/clip-vit-base-patch32@3d74acf"}``.
        libraries: packages whose versions are appended after capeval's.
    """
    for key, value in options.items():
        if "|" in str(value) or "|" in key:
            raise ValueError(f"signature field {key}={value!r} may not contain '|'")
    fields = [f"{k}={v}" for k, v in options.items()]
    fields += [f"{k}={v}" for k, v in library_versions(*libraries).items()]
    return "|".join([name, *fields])


def parse_signature(signature: str) -> tuple[str, dict[str, str]]:
    """Inverse of ``build_signature``: the name and an ordered dict of fields."""
    name, *fields = signature.split("|")
    return name, dict(f.split("=", 1) for f in fields)
