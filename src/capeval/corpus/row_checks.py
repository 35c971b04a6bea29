"""The checks that make a shard sample a row, the same for every shard format and every executor.

A tar's members and a Parquet file's cells are read into Python values by their own reader; from then on, the
values pass through these checks, so a caption, a key or a references value means the same whatever file it
came from, and the local and Ray engines receive the same rows (an error row where the checks refuse a value,
with the key and the reason). Text is kept exactly as given (no stripping of spaces or NULs).
"""

from __future__ import annotations

from typing import Any

from capeval.json_files import InputFileError, parse_json
from capeval.validation import has_visible_text, too_many_references

MAX_CAPTION_BYTES = 64 * 1024
"""Longest caption a shard row may hold, in UTF-8 bytes. CLIP reads at most its context (77 tokens; 248 for
long-text models), so a longer caption only costs memory on its way to the tokenizer: a 4 MB caption in a batch of
64 would take 1 GiB as fixed-width text. Longer ones are error rows."""


def unicode_problem(text: str) -> str | None:
    """Why ``text`` is not Unicode that can be written (a lone surrogate, which JSON's ``\\ud800`` escape gives and
    no UTF-8 file, Parquet column or tokenizer takes), naming the character; None when it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"is not valid Unicode (a lone surrogate, {text[err.start]!r}, at character {err.start})"
    return None


def writable(text: Any) -> str | None:
    """``text`` when it is a string that can be written to an output, else None (an error row keeps no such text)."""
    return text if isinstance(text, str) and unicode_problem(text) is None else None


def key_problem(key: Any, where: str) -> tuple[str | None, str | None]:
    """A sample's key as text, and why it is not one (``None`` when it is).

    Integers (a Parquet ``int64`` key column) are written in decimal; a missing key (null), text that is not valid
    Unicode or any other type is refused, so no key is invented (``str(None)`` would read as the key ``"None"``).
    """
    if isinstance(key, str):
        problem = unicode_problem(key)
        if problem is not None:
            return None, f"{where} has a key that {problem}"
        return key, None
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key), None
    if key is None:
        return None, f"{where} has no key (null)"
    return None, f"{where} has a key of type {type(key).__name__} ({key!r:.60}), not text"


def caption_problem(caption: Any, where: str, field: str = "") -> str | None:
    """Why a caption cannot be scored: missing, not text, empty or invisible, or over ``MAX_CAPTION_BYTES``.

    Args:
        where: the row (``"row 00012"``, ``"sample 00012"``).
        field: where the caption was read, for the message (``" in column 'caption'"``, ``" (.txt)"``).
    """
    if caption is None:
        return f"{where} has no caption{field}"
    if not isinstance(caption, str):
        # Not str(caption): a number is no caption.
        return f"{where} has a caption of type {type(caption).__name__} ({caption!r:.60}){field}"
    problem = unicode_problem(caption)
    if problem is not None:
        return f"{where} has a caption that {problem}{field}"
    size = len(caption.encode("utf-8"))
    if size > MAX_CAPTION_BYTES:
        return (
            f"{where} has a caption of {size:,} bytes{field}; capeval reads at most {MAX_CAPTION_BYTES:,} "
            "(capeval.corpus.row_checks.MAX_CAPTION_BYTES)"
        )
    if not has_visible_text(caption):
        invisible = " (only invisible characters)" if caption.strip() else ""
        return f"{where} has an empty caption{field}{invisible}"
    return None


def references_problem(references: Any, where: str) -> tuple[list[str] | None, str | None]:
    """A sample's references as a list of strings (``None``: it has none), and why they cannot be (else ``None``).

    A single string is refused rather than read as a list of its characters; so are bytes, mappings, lists
    holding anything but strings, and more than ``capeval.validation.MAX_REFERENCES`` of them.
    """
    if references is None:
        return None, None
    if isinstance(references, str):
        return None, f"{where} has references given as one string ({references!r:.60}), not a list of strings"
    if isinstance(references, (bytes, bytearray, memoryview)):
        return (
            None,
            f"{where} has references stored as binary ({len(references)} bytes), not a list of strings",
        )
    if not isinstance(references, (list, tuple)):
        return None, f"{where} has references of type {type(references).__name__}, not a list of strings"
    too_many = too_many_references(len(references))
    if too_many:
        return None, f"{where} has {too_many}"
    for j, ref in enumerate(references):
        if not isinstance(ref, str):
            return None, (
                f"{where} has references that are not all text: reference {j} is "
                f"{type(ref).__name__} ({ref!r:.60})"
            )
        problem = unicode_problem(ref)
        if problem is not None:
            return None, f"{where} has a reference ({j}) that {problem}"
        size = len(ref.encode("utf-8"))
        if size > MAX_CAPTION_BYTES:
            return None, (
                f"{where} has a reference ({j}) of {size:,} bytes; capeval reads at most {MAX_CAPTION_BYTES:,} "
                "per reference, as per caption (capeval.corpus.row_checks.MAX_CAPTION_BYTES)"
            )
    return list(references), None


ORIGIN_TEXT_FIELDS = (
    "uid",
    "url",
)  # img2dataset's .json / parquet (uid with --save_additional_columns '["uid"]')
ORIGIN_SIZE_FIELDS = ("width", "height", "original_width", "original_height")
ORIGIN_FIELDS = (*ORIGIN_TEXT_FIELDS, *ORIGIN_SIZE_FIELDS)


def origin_fields(record: Any, where: str) -> tuple[dict[str, Any] | None, str | None]:
    """Where a sample came from, as img2dataset records it (``uid``, ``url``, written and original sizes), passed
    through to the outputs: ``(fields, None)`` (None when the record has none of them), or ``(None, why)`` for a
    uid or url that is not text, or a size that is not a non-negative integer, naming the field."""
    if not isinstance(record, dict) or not any(record.get(name) is not None for name in ORIGIN_FIELDS):
        return None, None
    for name in ORIGIN_TEXT_FIELDS:
        value = record.get(name)
        if value is not None and not isinstance(value, str):
            return None, f"{where} has a {name} of type {type(value).__name__} ({value!r:.60}), not text"
        problem = unicode_problem(value) if value is not None else None
        if problem is not None:
            return None, f"{where} has a {name} that {problem}"
    for name in ORIGIN_SIZE_FIELDS:
        value = record.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return None, f"{where} has {name} = {value!r:.60}, not a size in pixels"
    return {name: record.get(name) for name in ORIGIN_FIELDS}, None


def read_sidecar(metadata: bytes, where: str, member: str) -> tuple[dict | None, str | None]:
    """A sample's ``.json`` sidecar as an object, read by capeval's one JSON reader (duplicate keys, deep nesting
    and other encodings refused), or why it cannot be."""
    try:
        value = parse_json(metadata, f"the sidecar {member} of {where}")
    except InputFileError as err:
        return None, str(err)
    if not isinstance(value, dict):
        return None, f"the sidecar {member} of {where} is a JSON {type(value).__name__}, not an object"
    return value, None
