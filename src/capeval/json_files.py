"""Every JSON file a user gives capeval is read here, one way, and refused by name when it is not what it seems.

Python's ``json`` keeps the last of two equal keys of an object, so ``{"im1": "a dog", "im1": "a cat"}`` would
score one caption silently; it recurses once per nesting level, so ``[[[[...]]]]`` ends in a bare
``RecursionError``; and its errors name neither the file nor (for bytes that are not UTF-8, or an integer over
Python's digit limit) the line. :func:`read_json_file` (a whole file) and :func:`parse_json` (one document, e.g.
a line of a JSON-lines file) refuse each of these with an :class:`InputFileError` naming the file and the line:

- a key repeated in one object (``cands.json: key "im1" appears twice (lines 3 and 7)``);
- arrays and objects nested deeper than :data:`MAX_JSON_DEPTH`, checked on the bytes before parsing;
- text that is not UTF-8 (a UTF-8 byte-order mark is allowed and skipped; UTF-16 and UTF-32 are named from their
  byte-order mark or their NUL bytes);
- an integer longer than Python converts (``sys.get_int_max_str_digits()``, 4300 digits by default).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from collections import Counter
from typing import Any

import numpy as np

# The deepest layout capeval reads (Karpathy's split file: object > images > image > sentences > sentence) nests
# 5 levels; 100 leaves room for any real file and keeps the parser far below Python's recursion limit (~1000).
MAX_JSON_DEPTH = 100

_WHITESPACE = re.compile(r"[ \t\n\r]*")
# Byte-order marks of the encodings a JSON file is most often saved in by mistake (UTF-32's before UTF-16's: they
# share their first two bytes).
_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32 (little-endian)"),
    (codecs.BOM_UTF32_BE, "UTF-32 (big-endian)"),
    (codecs.BOM_UTF16_LE, "UTF-16 (little-endian)"),
    (codecs.BOM_UTF16_BE, "UTF-16 (big-endian)"),
)


class InputFileError(ValueError):
    """A user's file that cannot be read as what it should hold (the message names the file and the problem)."""


class _DuplicateKey(Exception):
    def __init__(self, key: str, object_index: int):
        super().__init__(key)
        self.key = key
        self.object_index = (
            object_index  # in the order objects close, which is the order the parser ends them
        )


def read_json_file(path: str | os.PathLike, what: str = "JSON") -> Any:
    """The JSON document of a user's file, refused by name when it is malformed or hostile (module docstring).

    Args:
        path: the file.
        what: what the file holds, for messages (``"candidates"`` gives ``candidates file x.json: ...``).

    Raises:
        InputFileError: the file is missing, not UTF-8, not JSON, nested deeper than ``MAX_JSON_DEPTH``, has an
            integer over Python's digit limit, or repeats a key in an object (naming the key and its lines).
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError as err:
        raise InputFileError(f"{what} file not found: {os.fspath(path)}") from err
    return parse_json(data, f"{what} file {os.fspath(path)}")


def parse_json(document: str | bytes, where: str) -> Any:
    """One JSON document (a file's bytes, or one line of a JSON-lines file), checked as :func:`read_json_file`.

    Args:
        document: UTF-8 bytes (a leading UTF-8 byte-order mark is skipped) or text.
        where: names the document in messages, e.g. ``"rows.jsonl line 3"``.

    Raises:
        InputFileError: as :func:`read_json_file`; lines are counted from the document's first.
    """
    if isinstance(document, str):
        text = document
        data = document.encode("utf-8", "surrogatepass")
    else:
        data = document[len(codecs.BOM_UTF8) :] if document.startswith(codecs.BOM_UTF8) else document
        text = _utf8(data, where)
    _check_depth(data, where)
    seen = 0

    def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal seen
        seen += 1
        obj = dict(pairs)
        if len(obj) != len(pairs):
            repeated = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
            raise _DuplicateKey(repeated, seen - 1)
        return obj

    try:
        return json.loads(text, object_pairs_hook=unique_pairs)
    except _DuplicateKey as dup:
        raise InputFileError(_duplicate_message(data, text, dup, where)) from None
    except json.JSONDecodeError as err:
        raise InputFileError(f"{where} is not valid JSON: {err}") from None
    except ValueError as err:
        # json hands the digits of an integer to int(), which refuses more than sys.get_int_max_str_digits().
        raise InputFileError(_long_number_message(data, where) or f"{where} cannot be read: {err}") from None


def _at_line(data: bytes, offset: int, words: str = " at line") -> str:
    """`` at line 3`` for a document of several lines; nothing for one line (a JSON-lines row names its own)."""
    if b"\n" not in data.strip():
        return ""
    line = data.count(b"\n", 0, offset) + 1
    return f"{words} {line}"


def _utf8(data: bytes, where: str) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise InputFileError(
                f"{where} is {encoding} text (it starts with that byte-order mark), not UTF-8: save it as UTF-8"
            )
    # A JSON text starts with whitespace or a value, never with a NUL byte: NULs among the first two bytes are
    # UTF-16 without a byte-order mark (ASCII characters and NULs decode as UTF-8 and would read as bad JSON).
    if b"\x00" in data[:2]:
        order = "big-endian" if data[:1] == b"\x00" else "little-endian"
        raise InputFileError(
            f"{where} looks like UTF-16 ({order}) text, not UTF-8 (NUL bytes between its first characters): "
            "save it as UTF-8"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(
            f"{where} is not UTF-8 text: byte 0x{data[err.start]:02x}{_at_line(data, err.start)} ({err.reason}); "
            "save it as UTF-8"
        ) from None


def _string_quotes(b: np.ndarray) -> np.ndarray:
    """Offsets of the quotes that open or close strings: a quote after an odd run of backslashes is escaped."""
    quotes = np.flatnonzero(b == ord('"'))
    slashes = np.flatnonzero(b == ord("\\"))
    if not quotes.size or not slashes.size:
        return quotes
    starts_run = np.ones(slashes.size, dtype=bool)
    starts_run[1:] = np.diff(slashes) != 1
    run_start = slashes[starts_run][np.cumsum(starts_run) - 1]  # first backslash of each backslash's run
    k = np.minimum(np.searchsorted(slashes, quotes - 1), slashes.size - 1)
    after_slash = slashes[k] == quotes - 1
    run_length = np.where(after_slash, quotes - run_start[k], 0)
    return quotes[run_length % 2 == 0]


def _structure(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The brackets outside strings: their offsets, their bytes and the depth after each."""
    b = np.frombuffer(data, dtype=np.uint8)
    # "[" and "{", "]" and "}" differ only in the bit 0x20, which no other byte maps onto them.
    folded = b | 0x20
    opens = folded == ord("{")
    offsets = np.flatnonzero(opens | (folded == ord("}")))
    offsets = offsets[np.searchsorted(_string_quotes(b), offsets, side="right") % 2 == 0]
    depth = np.cumsum(np.where(opens[offsets], 1, -1))
    return offsets, b[offsets], depth


def _check_depth(data: bytes, where: str) -> None:
    # Fewer opening brackets than the limit cannot nest past it, whatever the strings hold: most documents stop here.
    if data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        return
    offsets, _, depth = _structure(data)
    too_deep = np.flatnonzero(depth > MAX_JSON_DEPTH)
    if too_deep.size:
        line = _at_line(data, int(offsets[too_deep[0]]), ", starting at line")
        raise InputFileError(
            f"{where} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep{line}; "
            f"capeval reads at most MAX_JSON_DEPTH = {MAX_JSON_DEPTH} (its layouts nest 5)"
        )


def _object_start(data: bytes, object_index: int) -> int:
    """Byte offset of the ``{`` of the object the parser ended ``object_index``-th (counting from 0)."""
    offsets, values, depth = _structure(data)
    close = np.flatnonzero(values == ord("}"))[object_index]
    # Its ``{`` is the last one before it that went one level deeper than the ``}`` comes back to.
    opens = np.flatnonzero((values[:close] == ord("{")) & (depth[:close] == depth[close] + 1))
    return int(offsets[opens[-1]])


def _key_offsets(text: str, start: int, key: str) -> list[int]:
    """Character offsets of ``key`` among the keys of the object whose ``{`` is at ``start``."""
    scan = json.JSONDecoder().scan_once
    found = []
    pos = _WHITESPACE.match(text, start + 1).end()
    while text.startswith('"', pos):
        name, end = json.decoder.scanstring(text, pos + 1)
        if name == key:
            found.append(pos)
        colon = _WHITESPACE.match(text, end).end()
        _, pos = scan(text, _WHITESPACE.match(text, colon + 1).end())
        pos = _WHITESPACE.match(text, pos).end()
        if not text.startswith(",", pos):
            break
        pos = _WHITESPACE.match(text, pos + 1).end()
    return found


def _listed(items: list) -> str:
    return f"{', '.join(map(str, items[:-1]))} and {items[-1]}"


def _duplicate_message(data: bytes, text: str, dup: _DuplicateKey, where: str) -> str:
    start = len(data[: _object_start(data, dup.object_index)].decode("utf-8", "surrogatepass"))
    offsets = _key_offsets(text, start, dup.key)
    lines = [text.count("\n", 0, p) + 1 for p in offsets]
    columns = [p - text.rfind("\n", 0, p) for p in offsets]
    if len(set(lines)) == len(lines):
        place = f"lines {_listed(lines)}"
    elif "\n" not in text.strip():
        place = f"columns {_listed(columns)}"
    else:
        place = _listed([f"line {n} column {c}" for n, c in zip(lines, columns, strict=True)])
    times = "twice" if len(offsets) == 2 else f"{len(offsets)} times"
    key = json.dumps(dup.key, ensure_ascii=False)
    try:
        key.encode("utf-8")
    except (
        UnicodeEncodeError
    ):  # a lone surrogate (a \ud800 escape): shown escaped, so the message can be written
        key = json.dumps(dup.key)
    return f"{where}: key {key} appears {times} in one object ({place}); each key may appear once"


def _long_number_message(data: bytes, where: str) -> str | None:
    limit = sys.get_int_max_str_digits()
    if not limit:
        return None
    quotes = _string_quotes(np.frombuffer(data, dtype=np.uint8))
    for match in re.finditer(rb"(?<![0-9.eE+-])-?[0-9]{%d,}(?![0-9.eE])" % (limit + 1), data):
        if np.searchsorted(quotes, match.start(), side="right") % 2 == 0:
            digits = len(match.group().lstrip(b"-"))
            return (
                f"{where} has a number of {digits} digits{_at_line(data, match.start())}, more than "
                f"Python converts (sys.get_int_max_str_digits() = {limit}); an id or score is never that long"
            )
    return None
