"""A run's capeval warnings, counted and shown once at its end.

A benchmark run, a corpus run or a command calls the metrics many times; the same warning would come once per
call ("4 references have no in-vocabulary word ..." for every reference draw of every benchmark). Inside
:func:`summarised_warnings` the capeval warnings are collected instead of shown; when the block ends, each kind
is emitted once through ``warnings.warn_explicit``, at the line of its first occurrence, so the filters in force
(``ignore``, ``error``, pytest's capture) apply to the summary as to any warning. Other warnings pass through
unchanged, when they happen.

The collection swaps the process-wide ``warnings.showwarning`` (as ``warnings.catch_warnings`` does): use it
around a whole run in one thread, not around calls that run concurrently in several threads.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

from capeval.diagnostics.categories import CapevalWarning


@dataclass
class _Kind:
    first: CapevalWarning
    filename: str
    lineno: int
    occurrences: int = 0
    items: dict[str, None] = field(default_factory=dict)  # distinct items, in the order met
    unlisted: int = 0  # items counted by warnings that do not list them


class WarningTally:
    """The capeval warnings of one run, grouped by kind (category and what they say)."""

    def __init__(self) -> None:
        self._kinds: dict[tuple, _Kind] = {}

    @staticmethod
    def _key(message: CapevalWarning) -> tuple:
        if message.what is not None:
            return (type(message), message.what, message.consequence)
        return (type(message), str(message))

    def add(self, message: Warning | str, category: type[Warning], filename: str, lineno: int) -> None:
        """Count one warning (``warnings.showwarning``'s arguments)."""
        if not isinstance(message, CapevalWarning):
            message = category(str(message))
        kind = self._kinds.setdefault(self._key(message), _Kind(message, filename, lineno))
        kind.occurrences += message.occurrences
        kind.items.update(dict.fromkeys(message.items))
        kind.unlisted += 0 if message.items else message.count

    @property
    def occurrences(self) -> int:
        """How many capeval warnings the run emitted, all kinds together."""
        return sum(k.occurrences for k in self._kinds.values())

    def summaries(self) -> list[tuple[CapevalWarning, str, int]]:
        """One warning per kind, with the file and line of its first occurrence: the first warning itself when
        it came once, else a summary counting the distinct items (or the repetitions) of the whole run."""
        out = []
        for kind in self._kinds.values():
            first = kind.first
            if kind.occurrences == 1:
                out.append((first, kind.filename, kind.lineno))
                continue
            times = f"[{kind.occurrences} warnings of this kind in this run, shown once]"
            if first.what is not None:
                items = list(kind.items)
                where = ", ".join(x for x in (first.first, repr(items[0]) if items else None) if x)
                text = f"{len(items) + kind.unlisted} {first.what}" + (f" (first: {where})" if where else "")
                text += (f": {first.consequence}" if first.consequence else "") + f" {times}"
            else:
                text = f"{first} {times}"
            summary = type(first)(
                text,
                first.what,
                kind.items,
                first.first,
                first.consequence,
                count=len(kind.items) + kind.unlisted,
                occurrences=kind.occurrences,
            )
            out.append((summary, kind.filename, kind.lineno))
        return out


def _one_line_format(message, category, filename, lineno, line=None) -> str:
    return f"capeval: warning: {message} ({category.__name__})\n"


@contextlib.contextmanager
def summarised_warnings(one_line: bool = False) -> Iterator[WarningTally]:
    """Collect the capeval warnings of the block; at its end, emit each kind once (see the module docstring).

    Args:
        one_line: show the summaries as ``capeval: warning: <message> (<Category>)`` lines (commands), instead
            of Python's ``file:line: Category: message`` with the source line.

    Yields:
        The :class:`WarningTally` being filled.
    """
    tally = WarningTally()
    try:
        with warnings.catch_warnings():  # puts showwarning and the filters back as it exits
            # Every occurrence reaches the tally; the filters in force decide about the summaries afterwards.
            warnings.simplefilter("always", CapevalWarning)
            passed_on = warnings.showwarning

            def collect(message, category, filename, lineno, file=None, line=None):
                if issubclass(category, CapevalWarning):
                    tally.add(message, category, filename, lineno)
                else:
                    passed_on(message, category, filename, lineno, file, line)

            warnings.showwarning = collect
            yield tally
    finally:
        _emit(tally, one_line)


def _emit(tally: WarningTally, one_line: bool) -> None:
    previous = warnings.formatwarning
    if one_line:
        warnings.formatwarning = _one_line_format
    try:
        for message, filename, lineno in tally.summaries():
            warnings.warn_explicit(message, type(message), filename, lineno)
    finally:
        warnings.formatwarning = previous
