"""Checks on user input, shared by every metric: errors name the offending item and its index."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence


def _is_sequence(x) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes))


def check_predictions(predictions) -> list[str]:
    """A non-empty list of non-empty strings.

    Raises:
        TypeError: not a list, or an item that is not a string.
        ValueError: an empty or whitespace-only caption.
    """
    if isinstance(predictions, str) or not _is_sequence(predictions):
        raise TypeError(f"predictions must be a list of strings, got {type(predictions).__name__}")
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise TypeError(f"prediction {i} is {type(p).__name__} ({p!r:.60}), expected a string")
        if not p.strip():
            raise ValueError(f"prediction {i} is an empty caption")
    return list(predictions)


def check_references(references, n: int) -> list[list[str]]:
    """One non-empty list of non-empty reference strings per prediction.

    Raises:
        TypeError: not a list of lists of strings (a bare string instead of a list is refused).
        ValueError: length mismatch, an empty reference list or an empty reference.
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
            if not r.strip():
                raise ValueError(f"reference {j} of item {i} is an empty string")
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
