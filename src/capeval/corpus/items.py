"""Corpus rows to items: a row's caption, image and references checked and picked, or why it cannot be scored.

``to_item`` never raises: a row without a caption, image or (for RefCLIPScore) references becomes an ``Item`` with
its ``error`` set, reported in ``errors.jsonl``. ``Item.row`` is a JSON-safe copy of the row's fields for
``kept.jsonl`` (image bytes and decoded pictures replaced by their path, or left out).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from capeval.validation import has_visible_text, too_many_references

_DROP = object()


def _json_safe(value: Any) -> Any:
    """Row fields as JSON: image bytes and decoded pictures are replaced by their path, or left out."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        if set(value) == {"bytes", "path"}:  # a datasets Image value
            return value["path"] if value["path"] else _DROP
        safe = {k: _json_safe(v) for k, v in value.items()}
        return {k: v for k, v in safe.items() if v is not _DROP}
    if isinstance(value, (list, tuple)):
        return [v for v in (_json_safe(x) for x in value) if v is not _DROP]
    if isinstance(value, np.generic):
        return value.item()
    return _DROP


def _resolve_image(value: Any, base: str | None) -> Any:
    if isinstance(value, str) and base and not os.path.isabs(os.path.expanduser(value)):
        return os.path.join(base, value)
    if isinstance(value, dict) and value.get("bytes") is None and value.get("path") and base:
        if not os.path.isabs(value["path"]):
            return {"bytes": None, "path": os.path.join(base, value["path"])}
    return value


@dataclass
class Columns:
    """The row fields scoring reads."""

    caption: str
    image: str
    references: str | None
    id: str | None


@dataclass
class Item:
    """One row ready to score (``error`` is None), or the reason it cannot be; ``row`` is its JSON-safe fields."""

    index: int
    id: Any
    caption: str | None = None
    image: Any = None
    references: list[str] | None = None
    error: str | None = None
    content: bytes | None = None
    row: dict | None = None


def to_item(index: int, row: dict, columns: Columns, needs_refs: bool) -> Item:
    """Check a row and pick its fields; a problem is recorded on the item, never raised."""
    base = row.pop("__base__", None)
    item = Item(index=index, id=row.get(columns.id) if columns.id else None)
    item.row = _json_safe({k: v for k, v in row.items() if k != "__error__"})
    if "__error__" in row:
        item.error = row["__error__"]
        return item
    caption = row.get(columns.caption)
    if not isinstance(caption, str) or not has_visible_text(caption):
        item.error = f"caption ({columns.caption!r}) is missing or empty (no visible text)"
        return item
    item.caption = caption
    image = row.get(columns.image)
    if image is None:
        item.error = f"no image ({columns.image!r})"
        return item
    item.image = _resolve_image(image, base)
    if columns.references is not None:
        refs = row.get(columns.references)
        refs = [refs] if isinstance(refs, str) else refs
        if (
            not isinstance(refs, list)
            or not refs
            or not all(isinstance(r, str) and has_visible_text(r) for r in refs)
        ):
            if needs_refs:
                item.error = (
                    f"references ({columns.references!r}) must be a non-empty list of non-empty strings"
                )
                return item
        elif too_many_references(len(refs)):
            item.error = f"references ({columns.references!r}): {too_many_references(len(refs))}"
        else:
            item.references = list(refs)
    elif needs_refs:
        item.error = "this metric needs references: give references_column"
    return item
