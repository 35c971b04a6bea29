"""Checks on user input, shared by every metric: errors name the offending item and its index.

The inputs (predictions, references, per-prediction lists) are checked when a metric is called; the options
every metric shares (``batch_size``, ``device``, ``w``, ``prefix``, ...) by ``check_options``, in one place,
when a metric is built and before any model or file is loaded.
"""

from __future__ import annotations

import math
import numbers
import os
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence, Set

import numpy as np

from capeval.diagnostics.categories import EmptyCaptionWarning, user_stacklevel

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


MAX_REFERENCES = 1000
"""References of one prediction capeval scores: capeval's bound, for every path that takes references (the metrics,
the evaluate modules, corpus rows and shard rows alike).

Each reference is encoded and compared with its caption, so the work grows with their number: 20,000 references
in one shard row took 138 s on a tiny CLIP. The human-reference sets of the benchmarks hold at most 50 per image
(PASCAL-50S, ABSTRACT-50S); 1,000 leaves room for any collected set.
"""


def too_many_references(count: int) -> str | None:
    """What is wrong with ``count`` references of one prediction (``None`` within ``MAX_REFERENCES``)."""
    if count <= MAX_REFERENCES:
        return None
    return f"{count} references, over the limit of {MAX_REFERENCES} (capeval.validation.MAX_REFERENCES)"


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
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes, bytearray))


def _shown(value) -> str:
    return f"{type(value).__name__} ({value!r:.60})"


def check_predictions(predictions) -> list[str]:
    """A non-empty list of non-empty strings.

    Raises:
        TypeError: not a list, or an item that is not a string.
        ValueError: a caption without visible text (empty, or only whitespace, control or format characters).
    """
    if isinstance(predictions, (str, bytes)):
        raise TypeError(
            f"predictions must be a list of strings, got {_shown(predictions)}: a bare string is not a list of "
            "captions (wrap one caption in a list)"
        )
    if not _is_sequence(predictions):
        raise TypeError(f"predictions must be a list of strings, got {_shown(predictions)}")
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise TypeError(f"prediction {i} is {type(p).__name__} ({p!r:.60}), expected a string")
        reason = _empty_reason(p)
        if reason is not None:
            raise ValueError(f"prediction {i} is an empty caption{reason}")
    return list(predictions)


def check_reference_list(refs, index: int | None = None, allow_empty: bool = False) -> list[str]:
    """One prediction's references: a list of non-empty strings (``index`` names it in errors; ``None`` for the
    single ``reference`` of evaluate's ``add``).

    Raises:
        TypeError: a bare string instead of a list, or an item that is not a string.
        ValueError: an empty list (unless ``allow_empty``), more than ``MAX_REFERENCES`` or an empty reference.
    """
    label = "reference" if index is None else f"references {index}"
    if isinstance(refs, str):
        raise TypeError(
            f"{label} is a string; expected a list of reference strings (wrap it: [{refs!r:.40}])"
        )
    if not _is_sequence(refs):
        raise TypeError(f"{label} is {type(refs).__name__}, expected a list of strings")
    if len(refs) == 0 and not allow_empty:
        raise ValueError(f"{label} is an empty list: every prediction needs at least one reference")
    too_many = too_many_references(len(refs))
    if too_many:
        raise ValueError(f"{label} holds {too_many}")
    for j, r in enumerate(refs):
        where = f"item {j} of reference" if index is None else f"reference {j} of item {index}"
        if not isinstance(r, str):
            raise TypeError(f"{where} is {type(r).__name__}, expected a string")
        reason = _empty_reason(r)
        if reason is not None:
            raise ValueError(f"{where} is an empty string{reason}")
    return list(refs)


def check_references(references, n: int, allow_empty: bool = False) -> list[list[str]]:
    """One list of non-empty reference strings per prediction (non-empty unless ``allow_empty``).

    Raises:
        TypeError: not a list of lists of strings (a bare string instead of a list is refused).
        ValueError: length mismatch, an empty reference list or a reference without visible text.
    """
    if not _is_sequence(references):
        raise TypeError(f"references must be a list of lists of strings, got {_shown(references)}")
    if len(references) != n:
        raise ValueError(f"got {len(references)} reference lists for {n} predictions")
    return [check_reference_list(refs, i, allow_empty) for i, refs in enumerate(references)]


def check_same_length(name: str, items, n: int) -> None:
    """``len(items) == n`` for a per-prediction keyword argument such as ``images``.

    Raises:
        TypeError: a string or bytes (one item where a list belongs), a mapping or a set (no order to pair
            with the predictions), or anything without a length and indexing (a generator).
        ValueError: a length other than ``n``.
    """
    if (
        isinstance(items, (str, bytes, bytearray, Mapping, Set))
        or not hasattr(items, "__len__")
        or not hasattr(items, "__getitem__")
    ):
        raise TypeError(
            f"{name} must be a list with one entry per prediction, got {_shown(items)}"
            + (": a bare string would be one item, not a list" if isinstance(items, (str, bytes)) else "")
        )
    if len(items) != n:
        raise ValueError(f"got {len(items)} {name} for {n} predictions")


def warn_empty(kind: str, indices: Iterable, consequence: str, texts: Sequence[str] = ()) -> None:
    """Report captions left without any in-vocabulary word (nothing is dropped silently), as an
    ``EmptyCaptionWarning`` pointing at the caller's line.

    Args:
        kind: ``"predictions"`` or ``"references"``.
        indices: prediction indices, or (prediction, reference) pairs.
        consequence: what happens to them.
        texts: the captions themselves, in the order of ``indices`` (the first is quoted; a run's summary counts
            each distinct text once).
    """
    indices = list(indices)
    if indices:
        shown = ", ".join(map(str, indices[:10])) + (", ..." if len(indices) > 10 else "")
        pair = isinstance(indices[0], tuple)
        label = "(prediction, reference)" if pair else "index"
        first = f"prediction {indices[0][0]}, reference {indices[0][1]}" if pair else f"index {indices[0]}"
        quoted = f"; first: {texts[0]!r}" if texts else ""
        what = f"{kind} have no in-vocabulary word after stopword removal"
        warnings.warn(
            EmptyCaptionWarning(
                f"{len(indices)} {what} ({label} {shown}{quoted}): {consequence}",
                what=what,
                items=texts,
                first=first,
                consequence=consequence,
                count=len(indices),
            ),
            stacklevel=user_stacklevel(),
        )


# -- options ---------------------------------------------------------------------------------------------------


def check_positive_number(name: str, value) -> float:
    """A finite real number > 0 (``sigma``; ``w`` through :func:`check_weight`): NaN and inf would make every score NaN or 0, and a weight
    of 0 or below erases or inverts the ranking the metric exists to give.

    Raises:
        TypeError: not a real number (a string, a bool, ``None``).
        ValueError: NaN, inf, 0 or negative.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {_shown(value)}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be a positive number (finite, > 0), got {number}")
    return number


# The largest rescaling weight ``w``: the authors use 2.5 (CLIP-S) and 2.0 (PAC-S), and w only stretches the scale,
# while the scores are float32 (inf past 3.4e38) and their sums float64; 1e6 is far above any use and keeps every
# score, sum and difference finite.
MAX_W = 1e6


def check_weight(name: str, value) -> float:
    """The rescaling weight ``w``: a positive number (:func:`check_positive_number`) no larger than :data:`MAX_W`.

    Raises:
        TypeError: not a real number.
        ValueError: NaN, inf, 0, negative, or above ``MAX_W``.
    """
    number = check_positive_number(name, value)
    if number > MAX_W:
        raise ValueError(
            f"{name} must be at most {MAX_W:g} (capeval.validation.MAX_W), got {number:g}: "
            "a larger weight makes float32 scores inf"
        )
    return number


def check_finite_number(name: str, value) -> float:
    """A finite real number, of any sign (``threshold``): NaN compares false with every score.

    Raises:
        TypeError: not a real number.
        ValueError: NaN or inf.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {_shown(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number}")
    return number


def check_count(name: str, value, optional: bool = False) -> int | None:
    """An int >= 1 (``batch_size``, ``num_workers``); ``None`` too when ``optional`` (chosen automatically).

    Raises:
        TypeError: not an int (a string such as ``"64"``, a float, a bool).
        ValueError: 0 or negative.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        expected = "an int >= 1 or None" if optional else "an int >= 1"
        raise TypeError(f"{name} must be {expected}, got {_shown(value)}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_flag(name: str, value, optional: bool = False) -> bool | None:
    """``True`` or ``False`` (``None`` too when ``optional``): ``bool("no")`` is ``True``, so nothing else is
    taken for a flag.

    Raises:
        TypeError: anything but a bool (numpy's included) or, when ``optional``, ``None``.
    """
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    expected = "True, False or None" if optional else "True or False"
    raise TypeError(f"{name} must be {expected}, got {_shown(value)}")


def check_signature_text(name: str, value):
    """A string or path option that goes into the signature (``model``, ``checkpoint``, ``vectors``): not empty,
    and without ``|``, the signature's field separator. Other values (``None``, loaded objects) pass unchanged.

    Raises:
        ValueError: an empty name, or a ``|`` in it.
    """
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and not text.strip():
            # Path("") is the current folder: an empty name would load whatever happens to be there.
            raise ValueError(f"{name} is an empty string")
        if "|" in str(text):
            raise ValueError(f"{name} {text!r} contains '|', the separator of result signatures: rename it")
    return value


def check_prefix(prefix) -> str | None:
    """The prompt joined before every caption: a string without ``|`` (it is written into the signature), or
    ``None`` for the model family's default (``capeval.clip.families.Family.default_prefix``).

    Raises:
        TypeError: not a string.
        ValueError: a ``|`` in it.
    """
    if prefix is None:
        return None
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, got {_shown(prefix)}")
    if "|" in prefix:
        raise ValueError(f"prefix {prefix!r} contains '|', the separator of result signatures")
    return prefix


def _check_device(device):
    from capeval.clip.backbones import resolve_device

    resolve_device(device)
    return device


def _check_dtype(dtype):
    from capeval.clip.backbones import resolve_dtype

    resolve_dtype(dtype)
    return dtype


def _check_placement(placement):
    from capeval.clip.devices import resolve_placement

    device, dtype = placement
    return resolve_placement(device, dtype)


def _check_num_frames(num_frames):
    from capeval.clip.video import check_num_frames

    return check_num_frames(num_frames)


# Every option two or more metrics share, by name, with its rule. Each metric checks its options here first.
_OPTION_RULES: dict[str, Callable] = {
    "model": lambda v: check_signature_text("model", v),
    "checkpoint": lambda v: check_signature_text("checkpoint", v),
    "vectors": lambda v: check_signature_text("vectors", v),
    "device": _check_device,
    "dtype": _check_dtype,
    # (device, dtype) resolved together into the Placement load_backbone takes, so neither is resolved twice.
    "placement": _check_placement,
    "batch_size": lambda v: check_count("batch_size", v),
    "num_workers": lambda v: check_count("num_workers", v, optional=True),
    "num_frames": _check_num_frames,
    "prefix": check_prefix,
    "w": lambda v: check_weight("w", v),
    "sigma": lambda v: check_positive_number("sigma", v),
    "progress": lambda v: check_flag("progress", v, optional=True),
    "clip_reference_cosine": lambda v: check_flag("clip_reference_cosine", v),
    "normalize_vectors": lambda v: check_flag("normalize_vectors", v),
    "absolute_cosine": lambda v: check_flag("absolute_cosine", v),
    "prune": lambda v: check_flag("prune", v),
}

OPTION_RULE_NAMES = frozenset(_OPTION_RULES)  # the options check_options has a rule for


def check_options(**options) -> dict:
    """The shared options of a metric, each checked by its rule; returns them normalised (``batch_size`` an
    int, ``w`` a float, ``placement=(device, dtype)`` the ``capeval.clip.devices.Placement`` for ``load_backbone``,
    ...). Called first in every metric's constructor, so a bad option is refused before any model, checkpoint or
    vectors file is read.

    Raises:
        TypeError: an option of the wrong type (named, with the value).
        ValueError: an option out of range: ``w=nan``, ``w=1e308``, ``batch_size=0``, ``device="meta"``, a ``|`` in ``prefix``.
        KeyError: an option this module has no rule for (a programming error in the caller).
    """
    return {name: _OPTION_RULES[name](value) for name, value in options.items()}


def cli_type(name: str, parse: Callable[[str], object], check: Callable[[str, object], object]) -> Callable:
    """An argparse ``type=`` that parses a command-line value and checks it by one of the rules above, so the
    command refuses it before any work, in one line naming the option (``argument --w: w must be ...``)."""
    import argparse

    def convert(text: str):
        try:
            return check(name, parse(text))
        except (TypeError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = name
    return convert
