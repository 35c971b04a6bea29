"""Shards of web-scale corpora: WebDataset tars as img2dataset writes them, and Parquet files.

img2dataset (rom1504/img2dataset, ``img2dataset/writer.py``, ``WebDatasetSampleWriter``) writes each shard as
``NNNNN.tar`` holding, per sample, ``<key>.jpg`` (or the encode format), ``<key>.txt`` (the caption) and
``<key>.json`` (metadata), with ``NNNNN.parquet`` (the same metadata as a table) and ``NNNNN_stats.json``
beside. Those two side files are not shards: a folder with tars is read from its tars only. A folder of
Parquet files only (``ParquetSampleWriter``, or a ``datasets`` export) is read from those: an image column of
encoded bytes (``jpg``, ``image``; bytes or datasets' ``{"bytes", "path"}``) or of paths, a caption column.

Tars are read in order and never extracted (``capeval.corpus.tar_members``): member names are only keys
(``../x.jpg`` is refused, not followed), a member larger than ``MAX_MEMBER_BYTES`` is refused by name, and a
member claiming more bytes than the file holds, a sparse member or an oversized extended header ends its shard.
Members are grouped into samples as WebDataset groups them (consecutive members sharing a key); a key used by
two samples of a shard, a field given twice and a sample with two pictures are error rows naming the members.
Every sample yields a row: one that cannot be scored carries ``error`` and keeps its key. Rows are yielded as they
are read (a tar one sample at a time, a Parquet file one row group at a time); a key's repetition, known only at
the tar's end, is given then as a late error (``read_file_shard``). A shard that cannot be read raises
``ShardReadError`` naming it, which the engines report per shard before going on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capeval.corpus.image_paths import ImagePaths, file_record
from capeval.corpus.locations import list_locations
from capeval.corpus.parquet_cells import CheckedParquet
from capeval.corpus.row_checks import (
    ORIGIN_FIELDS,
    caption_problem,
    key_problem,
    origin_fields,
    read_sidecar,
    references_problem,
    writable,
)
from capeval.corpus.tar_members import TarSample, TarUnreadable, tar_samples

# The image extensions img2dataset writes (its --encode_format) and WebDataset's decoders read.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
CAPTION_EXTENSION = "txt"  # img2dataset's caption member
IMAGE_COLUMNS = ("jpg", "image", "png", "webp", "img")
CAPTION_COLUMNS = ("caption", "txt", "text")
KEY_COLUMNS = ("key", "id")
PATH_COLUMNS = ("image_path", "path", "filepath", "url_path")
MAX_MEMBER_BYTES = 64 * 1024 * 1024  # a larger tar member or Parquet cell is refused before it is read


class ShardReadError(ValueError):
    """A shard that cannot be read at all (not a tar, unreadable Parquet); the message names the shard."""


@dataclass(frozen=True)
class Shard:
    """One input shard: a file of samples (``webdataset``, ``parquet``), or ``chunk_size`` consecutive rows of a row
    source (``jsonl``, ``csv``, ``image_folder``, ``datasets``: ``capeval.corpus.row_sources``).

    Attributes:
        path: the file read (the folder of an image folder; None for a ``datasets`` dataset).
        name: names the output file ``scores/<name>.parquet`` (a file shard's stem, ``00000``).
        kind: the reader (``webdataset``, ``parquet``, ``jsonl``, ``csv``, ``image_folder``, ``datasets``).
        span: the bytes (``jsonl``, ``csv``) or rows (``datasets``) of the source this shard holds.
        first_row: the source's line (``jsonl``: 1-based, of the span's first line) or row number at ``span``.
        fields: a CSV file's header; an image folder's image files (relative paths) in this shard.
        identity: what the output records of its input (row sources: made when listed; file shards: None,
            ``capeval.corpus.file_identity`` when the run starts).
        dataset: the ``datasets`` dataset (``datasets`` shards).
        location: where a file shard lives (``capeval.corpus.location_kinds``: a local file, an fsspec URL, a
            ``pipe:`` command).
        image_root: the folder the user allows its rows' image paths in (``capeval.corpus.image_paths``); None:
            its data file's folder only.
    """

    path: Path | None
    name: str
    kind: str
    span: tuple[int, int] | None = None
    first_row: int = 0
    fields: tuple[str, ...] = ()
    identity: dict | None = field(default=None, compare=False, hash=False)
    dataset: Any = field(default=None, compare=False, hash=False, repr=False)
    location: Any = field(default=None, compare=False, hash=False, repr=False)
    image_root: str | None = None

    @property
    def where(self) -> str:
        """The shard as a user names it: its path, URL or command."""
        return str(self.path) if self.path is not None else self.location.url if self.location else self.name

    def image_paths(self) -> ImagePaths:
        """The rule its rows' image paths are read by: inside the folder of its file (of the image folder), or
        inside ``image_root``."""
        base = None
        if self.path is not None:
            base = self.path if self.kind == "image_folder" else self.path.parent
        return ImagePaths(base, self.image_root)

    def open(self):
        """The shard's bytes (a file, a remote file, a command's output); the caller closes it."""
        return self.location.open() if self.location is not None else open(self.path, "rb")


@dataclass
class ShardRow:
    """One sample: what scoring needs, or ``error`` saying why it cannot be scored (the key is always kept)."""

    key: str | None  # None only for a Parquet row whose key cell is null (an error row)
    shard: str
    index: int
    caption: str | None
    image: bytes | str | None  # encoded bytes, or a path for Parquet path columns
    error: str | None = None
    references: list[str] | None = None  # a tar sample's .json "references", a Parquet "references" column
    origin: dict | None = None  # uid, url and sizes as img2dataset recorded them (row_checks.origin_fields)
    image_file: list | None = (
        None  # the image file a path names, as it was when read (image_paths.file_record)
    )


def list_shards(
    source: str | os.PathLike | Sequence[str | os.PathLike], allow_pipe: bool = False
) -> list[Shard]:
    """The shards of ``source``, sorted by URL (``capeval.corpus.locations.list_locations``).

    Args:
        allow_pipe: accept ``pipe:CMD`` given as ``source`` itself (never as an item of a list, from a list file or
            a listing).

    Raises:
        LocationError (a ValueError): nothing to read, naming the pattern and what was found.
    """
    return [
        Shard(path=location.path, name=location.name, kind=location.kind, location=location)
        for location in list_locations(source, allow_pipe=allow_pipe)
    ]


def read_file_shard(
    shard: Shard, columns: dict[str, Any], late: dict[int, str] | None = None
) -> Iterator[ShardRow]:
    """The samples of a tar or Parquet shard, one at a time, in the shard's order.

    A tar is read as it streams, one sample at a time; a Parquet file one row group at a time. Whether a tar's key
    names two samples is known only at its end: ``late`` (when given) then receives ``{row index: error}`` for the
    rows whose key another sample of the shard also has, which the caller applies to rows already yielded
    (``reader.ShardStream``).

    Args:
        shard: from ``list_shards``.
        columns: ``choose_columns``' choice: Parquet's ``caption``, ``image``, ``references`` and ``id`` columns (a
            tar's are its ``.txt`` and image members, and its ``.json`` sidecar's ``references``).
        late: filled with the errors found at the shard's end.

    Raises:
        ShardReadError: the shard cannot be opened or parsed at all.
        ValueError: a Parquet shard lacks a caption or image column (the message lists its columns).
    """
    if shard.kind == "webdataset":
        return _read_tar(shard, {} if late is None else late)
    return _read_parquet(shard, columns)


def _read_tar(shard: Shard, late: dict[int, str]) -> Iterator[ShardRow]:
    wanted = (*IMAGE_EXTENSIONS, CAPTION_EXTENSION, "json")
    # Per key: (row, its members, whether the row may take the repeated-key error): a few bytes per sample,
    # kept so that a key found again later refuses every row that has it.
    rows_of_key: dict[str, list[tuple[int, str, bool]]] = {}
    try:
        with shard.open() as fh:
            for index, sample in enumerate(tar_samples(fh, wanted, MAX_MEMBER_BYTES)):
                # A problem of the tar itself (a repeated field, a cut member) comes before the key's repetition,
                # the sample's own content after it.
                rows_of_key.setdefault(sample.key, []).append(
                    (index, _member_names(sample), sample.problem is None)
                )
                yield _sample_row(shard, index, sample)
    except TarUnreadable as err:
        raise ShardReadError(f"shard {shard.where} is not a readable tar file: {err}") from err
    except OSError as err:  # a file gone, a remote read or a pipe: command that failed
        raise ShardReadError(f"shard {shard.where} cannot be read: {err}") from err
    for key, rows in rows_of_key.items():
        if len(rows) > 1:
            indices = [index for index, _, _ in rows]
            for index, members, free in rows:
                if free:
                    late[index] = (
                        f"key {key} names {len(rows)} samples of this shard (rows {indices}; members {members}): "
                        "WebDataset reads each as a sample of its own, and scores are keyed by key, so none of "
                        "them is scored"
                    )


def _sample_row(shard: Shard, index: int, sample: TarSample) -> ShardRow:
    try:
        return _tar_row(shard, index, sample)
    except Exception as err:  # one sample's content never ends the run: its row says what happened
        problem = f"sample {sample.key} is unreadable ({type(err).__name__}: {err})"
        return ShardRow(
            key=sample.key, shard=shard.name, index=index, caption=None, image=None, error=problem
        )


def _member_names(sample: TarSample) -> str:
    return ", ".join(name for names in sample.members.values() for name in names)


def _tar_row(shard: Shard, index: int, sample: TarSample) -> ShardRow:
    key, fields = sample.key, sample.fields
    images = [name for ext, names in sample.members.items() if ext in IMAGE_EXTENSIONS for name in names]
    if len(images) > 1:
        sample.refuse(
            f"sample {key} has {len(images)} image members ({', '.join(images)}): which to score is unclear"
        )
    image = next((fields[e] for e in IMAGE_EXTENSIONS if e in fields), None)
    raw = fields.get(CAPTION_EXTENSION)
    caption = None
    if raw is not None:
        try:
            caption = raw.decode("utf-8")
        except UnicodeDecodeError:
            sample.refuse(f"caption of {key} is not UTF-8")
    references = origin = None
    if "json" in fields:
        member = sample.members["json"][0]
        sidecar, problem = read_sidecar(fields["json"], f"sample {key}", member)
        if sidecar is not None:
            where = f"sample {key} (sidecar {member})"
            references, problem = references_problem(sidecar.get("references"), where)
            origin, origin_issue = origin_fields(sidecar, where)
            problem = problem or origin_issue
        if problem:
            sample.refuse(problem)
    if image is None:
        sample.refuse(
            f"sample {key} has no image member (found: {sorted('.' + e for e in sample.members) or 'none'})"
        )
    if raw is None or caption is not None:
        problem = caption_problem(caption, f"sample {key}", " (.txt)")
        if problem:
            sample.refuse(problem)
    return ShardRow(
        key=key,
        shard=shard.name,
        index=index,
        caption=caption,
        image=image,
        error=sample.problem,
        references=references,
        origin=origin,
    )


def id_column(columns: Sequence[str], wanted: str | None) -> str | None:
    """The column or field that holds a row's key: ``wanted`` when the row has it, else the first of
    ``KEY_COLUMNS`` present, else None (the reader names the row by its place)."""
    if wanted is not None and wanted in columns:
        return wanted
    return next((c for c in KEY_COLUMNS if c in columns), None)


def pick_column(
    columns: Sequence[str], wanted: str | None, choices: Sequence[str], what: str, shard: Shard
) -> str:
    """``wanted`` when the shard has it, else the first of ``choices`` it has.

    Raises:
        ValueError: neither, naming the shard and the columns it has.
    """
    if wanted is not None:
        if wanted not in columns:
            raise ValueError(
                f"shard {shard.where} has no {what} column {wanted!r}; its columns: {list(columns)}"
            )
        return wanted
    found = next((c for c in choices if c in columns), None)
    if found is None:
        raise ValueError(
            f"shard {shard.where} has no {what} column (looked for {list(choices)}); its columns: {list(columns)}"
        )
    return found


def _read_parquet(shard: Shard, chosen: dict[str, Any]) -> Iterator[ShardRow]:
    try:
        fh = shard.open()
    except OSError as err:
        raise ShardReadError(f"shard {shard.where} cannot be read: {err}") from err
    with fh:  # open until every column is read
        yield from _parquet_rows(shard, chosen, fh)


def _parquet_rows(shard: Shard, chosen: dict[str, Any], fh) -> Iterator[ShardRow]:
    try:
        table = CheckedParquet(fh, MAX_MEMBER_BYTES)  # columns read when asked, sizes checked first
    except Exception as err:  # pyarrow raises its own ArrowInvalid/OSError family for damaged files
        raise ShardReadError(f"shard {shard.where} is not a readable Parquet file: {err}") from err
    columns = table.column_names
    caption_col = pick_column(columns, chosen.get("caption"), CAPTION_COLUMNS, "caption", shard)
    image_col = pick_column(columns, chosen.get("image"), (*IMAGE_COLUMNS, *PATH_COLUMNS), "image", shard)
    key_col = id_column(columns, chosen.get("id"))
    refs_col = chosen.get("references") or "references"
    # img2dataset's Parquet output: where each sample came from, and whether it was downloaded at all.
    extra = [c for c in (*ORIGIN_FIELDS, "status", "error_message") if c in columns]
    names = [
        caption_col,
        image_col,
        *([key_col] if key_col else []),
        *([refs_col] if refs_col in columns else []),
        *extra,
    ]
    fields = _ParquetFields(shard, caption_col, image_col, key_col, shard.image_paths())
    for start, group in table.row_groups(list(dict.fromkeys(names))):
        values = {name: column.to_pylist() for name, column in group.items()}
        count = len(values[caption_col])
        keys = values[key_col] if key_col else [f"{shard.name}/{start + i}" for i in range(count)]
        refs = values.get(refs_col, [None] * count)
        for i in range(count):
            index = start + i
            recorded = {c: values[c][i] for c in extra}
            row = fields.row(index, keys[i], values[caption_col][i], values[image_col][i], refs[i], recorded)
            if index in table.problems:
                row.error = f"row {row.key if row.key is not None else index}: {table.problems[index]}"
            yield row
        # Let go of this row group's values before the next is read: otherwise two row groups of Python values
        # are held at once, and three while a read buffer waits for a busy thread to free it.
        del values, keys, refs


@dataclass(frozen=True)
class _ParquetFields:
    """How one Parquet shard's cells make a row: its shard and the columns read."""

    shard: Shard
    caption_col: str
    image_col: str
    key_col: str | None
    paths: ImagePaths

    def row(
        self, index: int, key: Any, caption: Any, image: Any, references: Any, recorded: dict
    ) -> ShardRow:
        shard = self.shard
        key, problem = key_problem(key, f"row {index} of column {self.key_col!r}")
        where = f"row {key if key is not None else index}"
        if isinstance(image, dict):  # datasets' Image struct
            image = image.get("bytes") or image.get("path")
        image_file = None
        if isinstance(image, str) and image:
            image, refused = self.paths.resolve(image, where)
            problem = problem or refused
            image_file = file_record(image) if image is not None else None
        if problem is None and (image is None or image == b""):
            problem = f"{where} has no image in column {self.image_col!r}"
        problem = _download_problem(recorded, where) or problem
        problem = problem or caption_problem(caption, where, f" in column {self.caption_col!r}")
        references, refs_issue = references_problem(references, where)
        origin, origin_issue = origin_fields(recorded, where)
        return ShardRow(
            key=key,
            shard=shard.name,
            index=index,
            caption=writable(caption),
            image=image,
            error=problem or refs_issue or origin_issue,
            references=references,
            origin=origin,
            image_file=image_file,
        )


def _download_problem(recorded: dict[str, Any], where: str) -> str | None:
    """Why img2dataset wrote a row without an image: its own status and message (Parquet output keeps a row per
    URL, downloaded or not)."""
    status = recorded.get("status")
    if status is None or status == "success":
        return None
    message = recorded.get("error_message")
    return f"{where} was not downloaded by img2dataset: {status}" + (f" ({message})" if message else "")
