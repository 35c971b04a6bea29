"""WebDataset's brace patterns (``shards/{00000..00099}.tar``, ``{a,b}``, several braces), expanded by the
``braceexpand`` package as webdataset's ``shardlists.expand_urls`` expands them, and the words of an error when the
names they give do not exist. webdataset also splits a string on ``::`` and substitutes ``WDS_`` variables; those
are not done here."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

MAX_EXPANDED_NAMES = 1_000_000  # names one pattern may expand to (a typo like {0..99999999} is refused)
SHOWN_NAMES = 5  # missing names quoted in an error
_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?\}")


class PatternError(ValueError):
    """A brace pattern that expands to too many names."""


def expand(pattern: str) -> list[str]:
    """The names of ``pattern`` in its order (``{00000..00002}`` keeps its zero padding).

    Raises:
        PatternError: more than ``MAX_EXPANDED_NAMES`` names.
    """
    from braceexpand import braceexpand

    # braceexpand builds its ranges before the first name (a 10**8 range took 27 s): count them first.
    sizes = [
        abs(int(b) - int(a)) // max(abs(int(step or 1)), 1) + 1 for a, b, step in _RANGE.findall(pattern)
    ]
    if math.prod(sizes) > MAX_EXPANDED_NAMES:
        raise PatternError(
            f"{pattern!r} expands to {math.prod(sizes):,} names or more (limit {MAX_EXPANDED_NAMES:,})"
        )
    names = []
    for name in braceexpand(pattern):
        names.append(name)
        if len(names) > MAX_EXPANDED_NAMES:
            raise PatternError(f"{pattern!r} expands to more than {MAX_EXPANDED_NAMES:,} names")
    return names


def missing_names_message(
    pattern: str, where: str, names: list[str], missing: list[str], holds: Callable[[str], str]
) -> str:
    """Why ``pattern`` is refused: none of its names exists (with ``holds(first missing)``, what the nearest
    folder holds), or which of them do not."""
    shown = ", ".join(missing[:SHOWN_NAMES])
    if len(missing) > SHOWN_NAMES:
        shown += f" and {len(missing) - SHOWN_NAMES} more"
    if len(missing) == len(names):
        return (
            f"brace pattern {pattern!r}{where} matches no file: none of its {len(names)} names exists "
            f"({shown}){holds(missing[0])}"
        )
    return (
        f"brace pattern {pattern!r}{where} names {len(names)} files and {len(missing)} of them do not exist: "
        f"{shown}"
    )
