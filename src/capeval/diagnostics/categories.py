"""The warnings capeval emits: one category per kind, all under :class:`CapevalWarning`, each pointing at the
line of the caller's code that led to it.

Filter them with the standard machinery: ``warnings.filterwarnings("ignore", category=capeval.diagnostics.
EmptyCaptionWarning)``, or every capeval warning with ``category=CapevalWarning``; ``-W error::...`` turns them
into exceptions. A warning about items (captions, words, files) carries them (``items``), so the summary of a run
(:mod:`capeval.diagnostics.run_warnings`) counts each distinct item once however many calls met it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# Frames of these packages are skipped when a warning looks for the caller's line: capeval itself, and the
# libraries that call capeval on the user's behalf (evaluate and the modules it imports, Trainer, torch's
# decorators, context managers).
LIBRARY_PACKAGES = (
    "capeval",
    "evaluate",
    "evaluate_modules",
    "transformers",
    "accelerate",
    "torch",
    "contextlib",
)


def _in_library(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return any(name == p or name.startswith(p + ".") for p in LIBRARY_PACKAGES)


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the calling function that points at the first frame outside
    capeval and the libraries calling it (the outermost frame when there is none, as in a worker thread)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _in_library(frame):
        frame, level = frame.f_back, level + 1
    return level


class CapevalWarning(UserWarning):
    """Base of every warning capeval emits.

    Args:
        message: the sentence shown for this one call.
        what: for a warning about items, what they are, as a run's summary counts them
            (``"references have no in-vocabulary word after stopword removal"``).
        items: the items (caption texts, words, paths); a run's summary counts each distinct one once.
        first: where the first item is, in the caller's terms (``"prediction 3, reference 1"``).
        consequence: what happens to the items (``"they cannot be the best reference"``).
        count: how many items, when they are counted but not listed in ``items``.
        occurrences: how many warnings this one stands for (a summary of several).
    """

    def __init__(
        self,
        message: str,
        what: str | None = None,
        items: Sequence[str] = (),
        first: str | None = None,
        consequence: str | None = None,
        count: int | None = None,
        occurrences: int = 1,
    ) -> None:
        super().__init__(message)
        self.what = what
        self.items = tuple(items)
        self.first = first
        self.consequence = consequence
        self.count = len(self.items) if count is None else count
        self.occurrences = occurrences


class EmptyCaptionWarning(CapevalWarning):
    """A caption has no in-vocabulary word after stopword removal (WMD, WEmbSim): it scores 0 or is left out."""


class ZeroVectorWarning(CapevalWarning):
    """Words of a vectors file have all-zero vectors, which have no direction: they count as out of vocabulary."""


class TransportWarning(CapevalWarning):
    """The exact transport solver under WMD stopped before the optimum."""


class TruncationWarning(CapevalWarning):
    """Captions longer than the model's context were truncated (end-of-text kept)."""


class BatchSizeWarning(CapevalWarning):
    """The device ran out of memory: the batch size was lowered and the batch encoded again."""


class DamagedVideoWarning(CapevalWarning):
    """A video decodes to fewer frames than its header announces: the decoded frames are scored."""


class CheckpointWarning(CapevalWarning):
    """A checkpoint loaded, but something about it suggests the scores may not be what was meant."""


class ImageConstantsWarning(CapevalWarning):
    """A model folder's preprocessor config disagrees with (or cannot be read beside) the mean/std its known
    origin was trained with: the origin's constants are used."""


class HarmonicMeanWarning(CapevalWarning):
    """The two terms of a reference harmonic mean (RefCLIP-S, RefPAC-S) nearly cancel for some items."""


class DamagedFileWarning(CapevalWarning):
    """A damaged output part or cache entry was found, set aside and computed again."""


class InputChangedWarning(CapevalWarning):
    """An input (a corpus shard) changed since the output computed from it was written: it is computed again."""


class DuplicateKeyWarning(CapevalWarning):
    """Some sample keys of a corpus repeat, within a shard or across shards: rows are told apart by shard and
    index, and every one is kept."""
