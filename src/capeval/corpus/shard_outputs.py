"""The files a shard run writes, whichever engine wrote them, and the rule by which a rerun trusts them.

``OUTPUT/`` holds:

- ``run.json``: the metrics, their signatures and options, the columns read, the source; a rerun with other
  settings or another source is refused (``capeval.corpus.run_folder.check_manifest``).
- ``run.lock``: one run per folder at a time (``capeval.corpus.lock``).
- ``scores/<shard>.parquet``: one per input shard, one row per sample: ``key``, ``shard``, ``index``,
  ``caption``, where the sample came from as img2dataset recorded it (``uid``, ``url``, ``width``, ``height``,
  ``original_width``, ``original_height``; null when unknown), one float64 column per score (``clipscore``, ``refclipscore``, ``clip_s``, ``pacscore``),
  ``error`` (null when scored), and with ``--save-embeddings`` ``image_embedding``/``text_embedding``
  (list<float16>, null on error rows). Written to a hidden temporary file and renamed, so a file that exists is whole; its footer
  records the row count and the input shard's identity (``capeval.corpus.file_identity``).
- ``summary.json`` and ``kept.jsonl`` (``capeval.corpus.shard_summary``).

A rerun skips a shard only when its output is whole, was written by capeval, and records the same input (a
file shard's size, modification time and sampled content hash; a row source's shard identity,
``capeval.corpus.row_sources``); an input that changed is scored again with a warning saying
what changed. A damaged output is set aside (renamed, never deleted) and the shard scored again.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capeval.corpus.file_identity import file_identity, identity_changes
from capeval.corpus.image_paths import changed_files
from capeval.corpus.output_files import write_atomically
from capeval.corpus.row_checks import ORIGIN_FIELDS, ORIGIN_SIZE_FIELDS, ORIGIN_TEXT_FIELDS
from capeval.diagnostics.categories import DamagedFileWarning, InputChangedWarning, user_stacklevel

FORMAT = "capeval-shard-scores-3"  # a folder written in another layout is refused, not resumed
_ROWS_KEY = b"capeval.rows"
_INPUT_KEY = b"capeval.input"
_IMAGE_FILES_KEY = b"capeval.image_files"  # the files rows named by path, as read (image_paths.file_record)
_TEMPORARY = re.compile(r"^\.(?P<shard>.+)\.parquet\.(?P<pid>\d+)\.capeval-tmp$")


def output_path(output_dir: str | os.PathLike, shard_name: str) -> Path:
    return Path(output_dir) / "scores" / f"{shard_name}.parquet"


def output_schema(score_columns: Sequence[str], embeddings: bool = False):
    """The pyarrow schema of a shard's output file."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("index", pa.int64()),
        pa.field("caption", pa.string()),
        *[pa.field(c, pa.string()) for c in ORIGIN_TEXT_FIELDS],
        *[pa.field(c, pa.int64()) for c in ORIGIN_SIZE_FIELDS],
        *[pa.field(c, pa.float64()) for c in score_columns],
        pa.field("error", pa.string()),
    ]
    if embeddings:
        fields += [
            pa.field("image_embedding", pa.list_(pa.float16())),
            pa.field("text_embedding", pa.list_(pa.float16())),
        ]
    return pa.schema(fields)


def input_record(shard) -> dict:
    """What an output records of its input shard: a row source's identity as listed, a file's resolved path and
    ``file_identity`` (a remote one's size and ETag, a command itself), and the image root its rows' paths were
    read in when the user gave one (the image files themselves are recorded as read, ``write_shard_output``)."""
    if shard.identity is not None:
        record = dict(shard.identity)
    elif shard.location is not None:
        record = shard.location.identity()
    else:
        record = {"path": str(Path(shard.path).resolve()), **file_identity(shard.path)}
    if getattr(shard, "image_root", None) is not None:
        record["image_root"] = shard.image_root
    return record


def changed_while_read(shard, record: dict) -> str | None:
    """Why a file shard's rows cannot be written under ``record`` (its ``input_record`` taken before it was read):
    the file, or the object, is no longer what it was (a download finishing over it, an overwrite), so its rows may
    mix two versions, and an output recording the old identity would be trusted by a rerun. None when unchanged,
    and for a row source, whose identity is its rows' bytes as listed."""
    if shard.identity is not None:
        return None
    try:
        now = input_record(shard)
    except OSError as err:
        return f"shard {shard.where} could not be checked after it was read ({err})"
    changes = identity_changes(record, now)
    if not changes:
        return None
    return f"shard {shard.where} changed while it was read ({', '.join(changes)}); it is not written: run again to score it"


def write_shard_output(
    output_dir: str | os.PathLike,
    shard_name: str,
    rows: dict[str, Any],
    score_columns: Sequence[str],
    embeddings: bool,
    source: dict,
    late_errors: dict[int, str] | None = None,
) -> Path:
    """Write one shard's rows (columns as ``RowScorer.score`` returns them, concatenated) atomically.

    Args:
        source: ``input_record`` of the shard, taken before it was read.
        late_errors: ``{row index: error}`` found once the whole shard was read (``reader.ShardRows``): those rows
            are written as error rows, their scores and embeddings null.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if late_errors:
        rows = _with_errors(rows, late_errors, score_columns)
    schema = output_schema(score_columns, embeddings)
    order = np.argsort(np.asarray(rows["index"]), kind="stable")
    # Each row's origin (a dict, JSON text from Ray, or None) as one column per field.
    origins = [_origin(o) for o in rows.get("origin", [None] * len(order))]
    rows = {**rows, **{f: [o.get(f) for o in origins] for f in ORIGIN_FIELDS}}
    arrays = []
    for field in schema:
        values = rows[field.name]
        if field.name in ("image_embedding", "text_embedding"):
            matrix = np.asarray(values, dtype=np.float16)[order]
            errors = [rows["error"][i] for i in order]
            # An error row has no embedding: null, never a vector of zeros an index would take as one.
            arrays.append(
                pa.array(
                    [None if e is not None else m for m, e in zip(matrix, errors, strict=True)],
                    type=field.type,
                )
            )
        elif isinstance(values, np.ndarray) and values.dtype != object:
            arrays.append(pa.array(values[order], type=field.type, from_pandas=True))
        else:
            arrays.append(pa.array([values[i] for i in order], type=field.type))
    files = [_image_file(f) for f in rows.get("image_file", [None] * len(order))]
    footer = {
        _ROWS_KEY: str(len(order)).encode(),
        _INPUT_KEY: json.dumps(source).encode(),
        _IMAGE_FILES_KEY: json.dumps([files[i] for i in order if files[i] is not None]).encode(),
    }
    table = pa.Table.from_arrays(arrays, schema=schema.with_metadata(footer))
    path = output_path(output_dir, shard_name)
    return write_atomically(
        path, lambda fh: pq.write_table(table, fh), "wb", inside=Path(output_dir), sync=False
    )


def _with_errors(
    rows: dict[str, Any], errors: dict[int, str], score_columns: Sequence[str]
) -> dict[str, Any]:
    """``rows`` with the rows of the indices in ``errors`` made error rows (their error set, their scores NaN)."""
    place = {int(index): p for p, index in enumerate(rows["index"])}
    error = list(rows["error"])
    scores = {c: np.array(rows[c], dtype=np.float64) for c in score_columns}
    for index, why in errors.items():
        error[place[index]] = why
        for values in scores.values():
            values[place[index]] = np.nan
    return {**rows, "error": error, **scores}


def _image_file(value) -> list | None:
    """A row's image file record: a list, JSON text from Ray, or None (NaN from Arrow for a column of nulls)."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return json.loads(value) if isinstance(value, str) else list(value)


def _origin(value) -> dict:
    if value is None or (
        isinstance(value, float) and value != value
    ):  # Arrow gives NaN for a column of nulls
        return {}
    return json.loads(value) if isinstance(value, str) else dict(value)


def remove_stale_temporaries(output_dir: str | os.PathLike) -> None:
    """Half-written files of a killed run: only names this module gives its temporaries are removed (the run
    holds the folder's lock, so no other run is writing them)."""
    folder = Path(output_dir) / "scores"
    for entry in folder.iterdir() if folder.is_dir() else ():
        if _TEMPORARY.match(entry.name) and entry.is_file():
            entry.unlink(missing_ok=True)


def _set_aside(path: Path) -> Path:
    """Rename a damaged output out of the way (``<name>.damaged``, ``<name>.damaged-2``, ...); never delete it."""
    target, n = path.with_name(path.name + ".damaged"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{n}")
    os.replace(path, target)
    return target


class _NotOurs(Exception):
    """A readable Parquet file without capeval's footer."""


def _recorded(path: Path) -> tuple[int, int, dict | None, list | None]:
    """(rows held, rows the footer records, the input recorded, the image files its rows read, or None where the
    footer does not record them) of an output file.

    Raises:
        _NotOurs: the footer is not capeval's (a file capeval did not write).
        Exception: pyarrow's errors for a file that cannot be read.
    """
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    footer = meta.metadata or {}
    if _ROWS_KEY not in footer:
        raise _NotOurs
    source = json.loads(footer[_INPUT_KEY]) if _INPUT_KEY in footer else None
    files = json.loads(footer[_IMAGE_FILES_KEY]) if _IMAGE_FILES_KEY in footer else None
    pq.read_table(path, columns=["key"])
    return meta.num_rows, int(footer[_ROWS_KEY]), source, files


def is_done(output_dir: str | os.PathLike, shard_name: str, source: dict) -> bool:
    """Whether the shard's output can be kept: whole, written by capeval, from the same input as now.

    A damaged output is renamed aside with a warning; an input that changed is reported with a warning. Either
    way the shard is to be scored again.

    Args:
        source: ``input_record`` of the shard as it is now.

    Raises:
        ValueError: ``scores/<shard>.parquet`` is a file capeval did not write (it is left alone).
    """
    path = output_path(output_dir, shard_name)
    if not path.exists():
        return False
    try:
        held, recorded, previous, files = _recorded(path)
        if held != recorded:
            raise OSError(f"it holds {held} rows, its footer says {recorded}")
    except _NotOurs:
        raise ValueError(
            f"{path} was not written by capeval (its footer has no capeval row count): move it away; capeval "
            "does not overwrite files it did not write"
        ) from None
    except Exception as err:  # pyarrow's errors for a damaged file are several types
        aside = _set_aside(path)
        warnings.warn(
            f"shard output {path} is damaged ({err}); it was renamed to {aside.name} and the shard is scored again",
            DamagedFileWarning,
            stacklevel=user_stacklevel(),
        )
        return False
    changes = identity_changes(previous or {}, source) or _image_file_changes(files)
    if changes:
        warnings.warn(
            f"input shard {shard_name} ({_where(source)}) changed since {path} was written ({', '.join(changes)}); "
            "the shard is scored again",
            InputChangedWarning,
            stacklevel=user_stacklevel(),
        )
        return False
    return True


def _image_file_changes(files: list | None) -> list[str]:
    """What changed among the image files a shard's rows read by path (``image_paths.changed_files``), in words."""
    if files is None:
        return ["its output does not record the image files its rows read (written by an older capeval)"]
    changed = changed_files(files)
    if not changed:
        return []
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return [f"{len(changed)} of the {len(files)} image file(s) its rows name changed ({shown})"]


def _where(record: dict) -> str:
    return str(
        record.get("path")
        or record.get("url")
        or record.get("command")
        or record.get("folder")
        or record.get("split")
        or "?"
    )
