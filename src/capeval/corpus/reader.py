"""The one reader layer of corpus scoring: any source as a list of shards, any shard as rows.

``open_corpus`` turns a source (WebDataset tars or Parquet files: a folder, a glob, a list; a JSONL or CSV file or
a folder of them; an image folder with ``.txt`` captions; a ``save_to_disk`` folder, a ``datasets`` dataset or a
dataset name) into shards (``capeval.corpus.shards``, ``capeval.corpus.row_sources``); ``choose_columns`` decides
once which fields hold the caption, image, references and key; ``read_shard`` makes one shard's rows with the
checks of ``capeval.corpus.row_checks``. Both executors call these functions and nothing else to read, so the
same input gives the same rows, errors included, on each.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capeval.corpus.locations import names_shards
from capeval.corpus.record_rows import dataset_records, read_row_shard
from capeval.corpus.row_sources import (
    CSV_EXTENSIONS,
    JSONL_EXTENSIONS,
    EmptySourceError,
    bounded_lines,
    csv_shards,
    dataset_shards,
    empty_files_message,
    folder_contents_message,
    image_folder_shards,
    jsonl_shards,
    open_regular,
)
from capeval.corpus.shards import (
    CAPTION_COLUMNS,
    IMAGE_COLUMNS,
    PATH_COLUMNS,
    Shard,
    ShardReadError,
    ShardRow,
    id_column,
    list_shards,
    pick_column,
    read_file_shard,
)
from capeval.json_files import InputFileError, parse_json

ROW_SOURCE_KINDS = ("jsonl", "csv", "image_folder", "datasets")


@dataclass
class Corpus:
    """A source as shards: ``shards`` in order, ``description`` what ``run.json`` records of it, ``streamed``
    whether its rows can only be read in order (a streamed ``datasets`` dataset)."""

    shards: list[Shard]
    description: dict
    streamed: bool = False


def open_corpus(
    source: Any,
    chunk_size: int,
    split: str | None = None,
    image_column: str | None = None,
    allow_pipe: bool = False,
    image_root: str | os.PathLike | None = None,
) -> Corpus:
    """The shards of ``source``.

    Args:
        source: see the module docstring.
        chunk_size: rows per shard of a row source (files of samples are shards as they are).
        split: a ``DatasetDict``'s or a dataset name's split.
        image_column: a ``datasets`` image column to keep undecoded (default: every ``Image`` column).
        allow_pipe: run ``pipe:CMD`` given as ``source`` itself (``capeval.corpus.locations``); never an item of a
            list.
        image_root: the folder rows may read image paths in (``capeval.corpus.image_paths``); None: each row's
            data file's folder only.

    Raises:
        EmptySourceError: the source holds no row (saying what it holds instead).
        ValueError, TypeError: the source cannot be read as a corpus, named.
    """
    root = checked_image_root(image_root)
    corpus = _open(source, chunk_size, split, image_column, allow_pipe)
    if root is not None:
        corpus.shards = [replace(shard, image_root=root) for shard in corpus.shards]
    return corpus


def checked_image_root(image_root: str | os.PathLike | None) -> str | None:
    """``image_root`` as an absolute path, checked to be a folder.

    Raises:
        TypeError: not a path. ValueError: not a folder that exists.
    """
    if image_root is None:
        return None
    if not isinstance(image_root, (str, os.PathLike)):
        raise TypeError(f"image_root must be a folder's path, got {type(image_root).__name__}")
    root = os.path.abspath(os.path.expanduser(os.fspath(image_root)))
    if not os.path.isdir(root):
        raise ValueError(
            f"image_root {root} is not a folder (it is where rows may read the images they name)"
        )
    return root


def _open(
    source: Any, chunk_size: int, split: str | None, image_column: str | None, allow_pipe: bool
) -> Corpus:
    dataset = _as_dataset(source, split)
    if dataset is not None:
        return _dataset_corpus(dataset, chunk_size, image_column)
    if names_shards(source):
        return Corpus(list_shards(source, allow_pipe=allow_pipe), _description(source, "shards"))
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"a corpus source is a path or a datasets dataset, got {type(source).__name__}")
    path = Path(os.path.expanduser(os.fspath(source)))
    if path.is_file():
        return _files_corpus([path], source, chunk_size)
    if path.is_dir():
        if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
            import datasets

            return _open(datasets.load_from_disk(str(path)), chunk_size, split, image_column, False)
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in (*JSONL_EXTENSIONS, *CSV_EXTENSIONS))
        files = [p for p in files if p.suffix.lower() != ".json"]  # a folder's .json files are metadata
        if files:
            return _files_corpus(files, source, chunk_size)
        shards = image_folder_shards(path, chunk_size)
        if not shards:
            raise EmptySourceError(folder_contents_message(path))
        return Corpus(shards, _description(path, "image_folder"))
    if os.path.islink(path) and not path.exists():
        raise ValueError(f"corpus source {path} is a link to {os.readlink(path)}, which does not exist")
    if os.path.lexists(
        path
    ):  # neither a file nor a folder: a FIFO, a device or a socket, refused by its kind
        open_regular(path, "corpus source").close()
    if isinstance(source, str) and not looks_like_a_path(source):
        import datasets

        stream = datasets.load_dataset(source, split=split or "train", streaming=True)
        return _dataset_corpus(stream, chunk_size, image_column)
    raise ValueError(
        f"corpus source not found: {path} (no such file or folder; it is read as a local path, not a Hub dataset "
        "name, since it "
        + (
            "has a data file's extension"
            if Path(os.fspath(source)).suffix.lower() in DATA_FILE_EXTENSIONS
            else "looks like a path"
        )
        + ")"
    )


# The extensions of the files a corpus is read from: a source ending in one names a file, not a Hub dataset.
DATA_FILE_EXTENSIONS = (
    *JSONL_EXTENSIONS,
    *CSV_EXTENSIONS,
    ".tar",
    ".parquet",
    ".arrow",
    ".txt",
    ".gz",
    ".zip",
)


def looks_like_a_path(source: str) -> bool:
    """Whether ``source`` names a local file or folder rather than a Hub dataset: it starts with ``.``, ``/`` or
    ``~``, ends with ``/``, holds a glob or brace character, or ends in a data file's extension. Such a source that
    does not exist is refused at once by name, never looked up on the Hub (a typo took 51 s of retries there)."""
    return (
        source.startswith((".", "/", "~", os.sep))
        or source.endswith(("/", os.sep))
        or any(c in source for c in "*?[{")
        or Path(source).suffix.lower() in DATA_FILE_EXTENSIONS
    )


def _files_corpus(files: list[Path], source: Any, chunk_size: int) -> Corpus:
    """The shards of JSONL and CSV files (a file given itself may be ``.json``: one object per line)."""
    shards: list[Shard] = []
    for path in files:
        suffix = path.suffix.lower()
        if suffix in CSV_EXTENSIONS:
            shards += csv_shards(path, chunk_size)
        elif suffix in JSONL_EXTENSIONS:
            shards += jsonl_shards(path, chunk_size)
        else:
            raise ValueError(
                f"{path}: a corpus file is JSONL (one JSON object per line), CSV with a header, or a .tar/.parquet "
                "shard"
            )
    if not shards:
        raise EmptySourceError(empty_files_message(files))
    return Corpus(shards, _description(source, "files"))


def _as_dataset(source: Any, split: str | None):
    import datasets

    if isinstance(source, (datasets.Dataset, datasets.IterableDataset)):
        return source
    if isinstance(source, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split is None:
            raise ValueError(f"the dataset has splits {list(source)}: choose one (split=...)")
        if split not in source:
            raise ValueError(f"the dataset has no split {split!r}; its splits: {list(source)}")
        return source[split]
    return None


def _dataset_corpus(dataset: Any, chunk_size: int, image_column: str | None) -> Corpus:
    import datasets

    shards = dataset_shards(dataset, chunk_size, image_column)
    info = getattr(dataset, "info", None)
    description = {
        "kind": "datasets",
        "name": getattr(info, "dataset_name", None),
        "config": getattr(info, "config_name", None),
        "split": str(getattr(dataset, "split", None)),
        "fingerprint": getattr(dataset, "_fingerprint", None),
    }
    if not shards:
        name = f"{description['name']!r} " if description["name"] else ""
        raise EmptySourceError(
            f"no rows to score: the dataset {name}(split {description['split']}, fingerprint "
            f"{description['fingerprint']}) is empty"
        )
    return Corpus(shards, description, streamed=not isinstance(dataset, datasets.Dataset))


def _description(source: Any, kind: str) -> dict:
    """What ``run.json`` records of a source, so an output folder is not resumed from another corpus: a folder
    or a glob by its resolved path, files by their resolved paths (shards added to a folder later are the same
    source)."""
    if isinstance(source, (list, tuple)):
        return {"kind": kind, "files": [str(Path(p).resolve()) for p in source]}
    path = Path(os.fspath(source))
    if path.is_dir():
        return {"kind": kind, "folder": str(path.resolve())}
    if path.exists():
        return {"kind": kind, "files": [str(path.resolve())]}
    return {"kind": kind, "glob": str(Path(os.path.abspath(os.fspath(source))))}


def choose_columns(shards: Sequence[Shard], given: dict[str, str | None]) -> dict[str, Any]:
    """The fields holding each row's caption, image, references and key, decided once, from the first shard.

    A field given is used as given; one not given is the first of ``CAPTION_COLUMNS`` / ``IMAGE_COLUMNS`` +
    ``PATH_COLUMNS`` the first readable shard has (a Parquet footer, a CSV header, a JSONL file's first object, a
    dataset's columns), and that choice then holds for every shard (a later shard without it is reported, not
    read from another field). A tar's fields are its members. Run before any work, so a wrong field ends a run
    at once rather than failing every shard one by one.

    Args:
        given: ``caption``, ``image``, ``references``, ``id`` as the caller named them (None: not named).

    Returns:
        dict: the four fields and ``automatic`` (those chosen here rather than given), as ``run.json`` and
        ``summary.json`` record them.

    Raises:
        ValueError: a field is missing from the first shard, naming the shard and the fields it has.
    """
    choice: dict[str, Any] = {k: given.get(k) for k in ("caption", "image", "references", "id")}
    automatic: list[str] = []
    for shard in shards:
        names = _field_names(shard)
        if names is None:
            continue
        choice["caption"] = pick_column(names, given.get("caption"), CAPTION_COLUMNS, "caption", shard)
        choice["image"] = pick_column(
            names, given.get("image"), (*IMAGE_COLUMNS, *PATH_COLUMNS), "image", shard
        )
        if choice["id"] is None:
            choice["id"] = id_column(names, None)
        if choice["references"] is None and "references" in names:
            choice["references"] = "references"
        automatic = [
            f for f in ("caption", "image", "references", "id") if given.get(f) is None and choice[f]
        ]
        break
    choice["automatic"] = automatic
    return choice


def _field_names(shard: Shard) -> list[str] | None:
    """The fields of a shard's rows, or None where there are none to choose from (a tar, a damaged file)."""
    if shard.kind == "parquet":
        import pyarrow.parquet as pq

        try:
            with shard.open() as fh:
                return pq.read_schema(fh).names
        except Exception:  # pyarrow's errors for a damaged file are several types: the engines report it
            return None
    if shard.kind == "csv":
        return list(shard.fields)
    if shard.kind == "image_folder":
        return ["caption", "image"]
    if shard.kind == "datasets":
        names = getattr(shard.dataset, "column_names", None)
        return list(names) if names else None
    if shard.kind == "jsonl":
        with open_regular(shard.path, "JSONL file") as fh:
            fh.seek(shard.span[0])
            for line in bounded_lines(fh, shard.path.name):
                if line.strip():
                    try:
                        record = parse_json(line, shard.path.name)
                    except InputFileError:
                        return None
                    return list(record) if isinstance(record, dict) else None
    return None


@dataclass
class ShardRows:
    """One shard's rows as they are read, for an executor to score as they come.

    Attributes:
        rows: the rows in order, read as they are iterated (once); an error while reading raises
            ``ShardReadError`` naming the shard (the rows already given are then not to be kept).
        late_errors: ``{row index: error}`` known only once the last row is read (a tar key that names two
            samples), to apply to the rows already scored: complete once ``rows`` is exhausted.
    """

    rows: Iterator[ShardRow]
    late_errors: dict[int, str]


def stream_shard(shard: Shard, columns: dict[str, Any] | None = None, records=None) -> ShardRows:
    """The rows of ``shard`` as they are read (an error row for each sample or record that cannot be scored).

    ``columns`` is ``choose_columns``' choice (None: each field chosen from this shard's own); ``records``, a
    streamed dataset's records of this shard read in order by the caller (``read_shards``). Nothing is read until
    the rows are iterated.
    """
    if columns is None:
        columns = choose_columns([shard], {})
    late: dict[int, str] = {}
    if shard.kind in ROW_SOURCE_KINDS:
        rows = read_row_shard(shard, columns, records)
    else:
        rows = read_file_shard(shard, columns, late)
    return ShardRows(_named_failures(shard, rows), late)


def _named_failures(shard: Shard, rows: Iterator[ShardRow]) -> Iterator[ShardRow]:
    """``rows``, with an OS error while reading them (or text that stopped being UTF-8 since it was listed) raised
    as the shard's ``ShardReadError``, as when the shard was read whole."""
    try:
        yield from rows
    except (OSError, UnicodeDecodeError) as err:
        raise ShardReadError(f"shard {shard.name} ({shard.where}) cannot be read: {err}") from err


def read_shard(shard: Shard, columns: dict[str, Any] | None = None) -> list[ShardRow]:
    """Every row of ``shard``, in order, its late errors applied (``stream_shard``, held whole: for tests and
    small shards; the executors stream).

    Raises:
        ShardReadError: the shard cannot be read at all, naming it.
        ValueError: a Parquet shard lacks a chosen column.
    """
    stream = stream_shard(shard, columns)
    rows = list(stream.rows)
    for index, error in stream.late_errors.items():
        rows[index].error = error
    return rows


def rows_or_why(shard: Shard, columns: dict[str, Any], records=None) -> tuple[ShardRows | None, str | None]:
    """``(rows, None)``, or ``(None, why)`` for a shard that cannot be read or holds no sample: what both executors
    report of a shard, in the same words. Only the first row is read here; the rest are read as iterated.

    Args:
        records: a streamed dataset's records of this shard, read in order (``read_shards``).
    """
    stream = stream_shard(shard, columns, records)
    try:
        first = next(stream.rows)
    except StopIteration:
        return None, f"shard {shard.where} holds no sample"
    except ValueError as err:  # ShardReadError, or a Parquet shard without the columns
        return None, str(err)
    return ShardRows(itertools.chain([first], stream.rows), stream.late_errors), None


def read_shards(
    shards: Sequence[Shard], columns: dict[str, Any], streamed: bool = False
) -> Iterator[tuple[Shard, ShardRows | None, str | None]]:
    """``(shard, rows, None)``, or ``(shard, None, why)`` for a shard that cannot be read (``rows_or_why``), in
    order; each shard's rows are to be read before the next shard is asked for.

    A streamed dataset's shards are read from one pass over the stream (each shard's rows where the previous
    one's ended) instead of from the stream's start each time.
    """
    cursor = _StreamCursor() if streamed else None
    for shard in shards:
        yield shard, *rows_or_why(shard, columns, cursor.records(shard) if cursor is not None else None)


class _StreamCursor:
    """One iterator over a streamed dataset, advanced to each shard's range in turn."""

    def __init__(self) -> None:
        self.iterator = None
        self.position = 0

    def records(self, shard: Shard) -> Iterator[dict]:
        """The records of ``shard``'s range, read as iterated (a range before the cursor restarts the stream)."""
        start, stop = shard.span
        if self.iterator is None or start < self.position:
            self.iterator, self.position = iter(shard.dataset), 0
        for record in self.iterator:
            self.position += 1
            if self.position > start:
                yield record
            if self.position >= stop:
                return


__all__ = [
    "Corpus",
    "EmptySourceError",
    "ShardReadError",
    "ShardRows",
    "choose_columns",
    "dataset_records",
    "open_corpus",
    "read_shard",
    "read_shards",
    "rows_or_why",
    "stream_shard",
]
