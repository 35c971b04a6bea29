"""WebDataset's brace patterns (``shards/{00000..00099}.tar``, ``{a,b}``, several braces), expanded by the
``braceexpand`` package as webdataset's ``shardlists.expand_urls`` expands them, and the words of an error when the
names they give do not exist. webdataset also splits a string on ``::`` and substitutes ``WDS_`` variables; those
are not done here."""

from __future__ import annotations

from collections.abc import Callable

MAX_EXPANDED_NAMES = 1_000_000  # names one pattern may expand to (a typo like {0..99999999} is refused)
SHOWN_NAMES = 5  # missing names quoted in an error


class PatternError(ValueError):
    """A brace pattern that expands to too many names."""


def count_names(pattern: str) -> int:
    """How many names braceexpand gives ``pattern``, counted from its braces without expanding any: the same walk as
    braceexpand's ``parse_pattern`` (its own range patterns, its depth counting, a brace it reads as text counted as
    text), with a product of counts where it builds a product of names, a sum where it chains alternatives.

    Raises:
        PatternError: braces that do not balance, or nest too deeply to walk.
    """
    try:
        return _pattern_count(pattern)
    except RecursionError:
        raise PatternError(f"{pattern!r:.200} nests its braces too deeply") from None


def _pattern_count(pattern: str) -> int:
    count, start, pos, depth = 1, 0, 0, 0
    while pos < len(pattern):
        c = pattern[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            if depth == 0 and pos > start:
                start = pos
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                expression = pattern[start + 1 : pos]
                inner = _expression_count(expression)
                count *= _pattern_count(expression) if inner is None else inner
                start = pos + 1
        pos += 1
    if depth != 0:
        raise PatternError(f"{pattern!r:.200} has braces that do not balance")
    return count


def _expression_count(expression: str) -> int | None:
    """The names of one brace's content: a range's length, an alternation's sum; None where it is neither."""
    from braceexpand import alphabet, char_range_re, int_range_re

    if match := int_range_re.match(expression):
        first, last, step = match.groups()
        step = (int(step) or 1) if step else 1
        first, last = int(first), int(last)
        return len(range(first, last + 1, step) if first < last else range(first, last - 1, -step))
    if match := char_range_re.match(expression):
        first, last, step = match.groups()
        step = (int(step) or 1) if step else 1
        first, last = alphabet.index(first), alphabet.index(last)
        return len(
            alphabet[first : last + 1 : step]
            if first < last
            else alphabet[first : (last or -len(alphabet)) - 1 : -step]
        )
    alternatives, start, pos, depth = [], 0, 0, 0
    while pos < len(expression):
        c = expression[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            alternatives.append(expression[start:pos])
            start = pos + 1
        pos += 1
    if depth != 0 or not alternatives:
        return None
    return sum(_pattern_count(part) for part in [*alternatives, expression[start:]])


def expand(pattern: str) -> list[str]:
    """The names of ``pattern`` in its order (``{00000..00002}`` keeps its zero padding).

    Raises:
        PatternError: more than ``MAX_EXPANDED_NAMES`` names, or braces that do not balance.
    """
    from braceexpand import braceexpand

    # braceexpand builds ranges before the first name (a 10**8 range took 27 s) and alternations one product at a
    # time (x{a,b} 20 times: 158 s before a refusal): the names are counted first, from the braces alone.
    count = count_names(pattern)
    if count > MAX_EXPANDED_NAMES:
        raise PatternError(f"{pattern!r:.200} expands to {count:,} names (limit {MAX_EXPANDED_NAMES:,})")
    return list(braceexpand(pattern))


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
