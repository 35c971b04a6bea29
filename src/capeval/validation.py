"""Checks on user input, shared by every metric: errors name the offending item and its index."""

from __future__ import annotations

import unicodedata
import warnings
from collections.abc import Iterable, Sequence

# Unicode's Default_Ignorable_Code_Point characters outside the format controls (Cf): fillers, variation
# selectors and the code points reserved as ignorable, which render as nothing (DerivedCoreProperties.txt, 15.1).
_IGNORABLE = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2065, 0x3164, 0xFFA0]
    + list(range(0xFE00, 0xFE10))
    + list(range(0xFFF0, 0xFFF9))
    + list(range(0xE0000, 0xE1000))
)


def _invisible(ch: str) -> bool:
    # Cc control, Cf format (zero-width spaces and joiners, bidi marks, BOM, tags), Cs surrogate, Z* separators.
    return (
        ch.isspace()
        or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zs", "Zl", "Zp")
        or ord(ch) in _IGNORABLE
    )


def has_visible_text(text: str) -> bool:
    """Whether a caption holds anything but whitespace, control, format or other invisible characters."""
    return not all(_invisible(ch) for ch in text)


def _empty_reason(text: str) -> str | None:
    """Why a caption holds no visible text (``None`` when it does): empty, or only invisible characters."""
    if not text.strip():
        return ""
    if not has_visible_text(text):
        shown = ", ".join(sorted({f"U+{ord(ch):04X}" for ch in text})[:6])
        return f": it holds only invisible characters ({shown})"
    return None


def _is_sequence(x) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


def check_predictions(predictions) -> list[str]:
    """A non-empty list of non-empty strings.

    Raises:
        TypeError: not a list, or an item that is not a string.
        ValueError: a caption without visible text (empty, or only whitespace, control or format characters).
    """
    if isinstance(predictions, str) or not _is_sequence(predictions):
        raise TypeError(f"predictions must be a list of strings, got {type(predictions).__name__}")
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise TypeError(f"prediction {i} is {type(p).__name__} ({p!r:.60}), expected a string")
        reason = _empty_reason(p)
        if reason is not None:
            raise ValueError(f"prediction {i} is an empty caption{reason}")
    return list(predictions)


def check_references(references, n: int) -> list[list[str]]:
    """One non-empty list of non-empty reference strings per prediction.

    Raises:
        TypeError: not a list of lists of strings (a bare string instead of a list is refused).
        ValueError: length mismatch, an empty reference list or a reference without visible text.
    """
    if isinstance(references, str) or not _is_sequence(references):
        raise TypeError(f"references must be a list of lists of strings, got {type(references).__name__}")
    if len(references) != n:
        raise ValueError(f"got {len(references)} reference lists for {n} predictions")
    out = []
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            raise TypeError(
                f"references {i} is a string; expected a list of reference strings (wrap it: [{refs!r:.40}])"
            )
        if not _is_sequence(refs):
            raise TypeError(f"references {i} is {type(refs).__name__}, expected a list of strings")
        if len(refs) == 0:
            raise ValueError(
                f"references {i} is an empty list: every prediction needs at least one reference"
            )
        for j, r in enumerate(refs):
            if not isinstance(r, str):
                raise TypeError(f"reference {j} of item {i} is {type(r).__name__}, expected a string")
            reason = _empty_reason(r)
            if reason is not None:
                raise ValueError(f"reference {j} of item {i} is an empty string{reason}")
        out.append(list(refs))
    return out


def check_same_length(name: str, items, n: int) -> None:
    """``len(items) == n`` for a per-prediction keyword argument such as ``images``."""
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__len__"):
        raise TypeError(f"{name} must be a list with one entry per prediction, got {type(items).__name__}")
    if len(items) != n:
        raise ValueError(f"got {len(items)} {name} for {n} predictions")


def warn_empty(kind: str, indices: Iterable[int], consequence: str) -> None:
    """Report captions left without any in-vocabulary word (nothing is dropped silently)."""
    indices = list(indices)
    if indices:
        shown = ", ".join(map(str, indices[:10])) + (", ..." if len(indices) > 10 else "")
        label = "(prediction, reference)" if isinstance(indices[0], tuple) else "index"
        warnings.warn(
            f"{len(indices)} {kind} have no in-vocabulary word after stopword removal ({label} {shown}): "
            f"{consequence}",
            stacklevel=3,
        )
