"""Row sources cut into shards: JSONL and CSV files, image folders, ``datasets`` datasets.

A corpus is shards of rows whatever its format. Files of samples (WebDataset tars, Parquet) are shards as they are
(``capeval.corpus.shards``); a source of rows is cut here into shards of ``chunk_size`` consecutive rows, each
named after its source and place (``captions.jsonl-00003``) and carrying its identity, so that the engine writes,
resumes and summarises them exactly as it does tars:

- a JSONL or CSV file: the bytes of ``chunk_size`` rows (lines; CSV records, which may span lines), identified by
  their SHA-256 and the line they start on (a row's default key names its line), a CSV shard also by its file's
  header (which names what each field means), so rows appended to a file leave its earlier shards done;
- an image folder (images with a same-named ``.txt`` caption, any depth, sorted by path): ``chunk_size`` images,
  identified by every image's and caption's path, size and modification time;
- a ``datasets.Dataset`` (in memory, or a ``save_to_disk`` folder): a range of rows, identified by the dataset's
  fingerprint and the range; a streamed ``IterableDataset`` is read once to count its rows and hash each shard's
  content (it has no fingerprint), then in order.

Listing reads a JSONL or CSV file once (to find its row boundaries and hash them); nothing is decoded.
"""

from __future__ import annotations

import csv
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from capeval.corpus.shards import Shard

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp", ".gif")
JSONL_EXTENSIONS = (".jsonl", ".ndjson", ".json")
CSV_EXTENSIONS = (".csv", ".tsv")
MAX_CSV_FIELD_BYTES = 64 * 1024 * 1024  # one CSV cell (the csv module's own limit is 128 KiB)
# One line of a JSONL or CSV file: a row holds a caption and references of at most 64 KiB each, so a longer line is
# no row (a 300 MB line took 1 GB to parse; a sparse or /dev/zero-like file is one endless line). A file holding
# one is refused at its listing, naming the line: reading on would mean reading the file through to find its end.
MAX_LINE_BYTES = 16 * 1024 * 1024
# What to do with files a corpus folder may hold but capeval does not read, by extension.
_UNREAD_HINTS = {
    ".arrow": "a save_to_disk folder needs its dataset_info.json; else load the files with datasets and pass them",
    ".json": "a .json file is read when given itself (one JSON object per line); a folder is searched for "
    ".jsonl/.ndjson/.csv files",
}


class EmptySourceError(ValueError):
    """The corpus source holds no row; the message says what was found in its place."""


def _shard_name(stem: str, n: int) -> str:
    return f"{stem}-{n:05d}"


def open_regular(path: Path, what: str) -> BinaryIO:
    """``path`` open for reading, refused unless it is a regular file: a FIFO blocked the run forever, a link to
    ``/dev/zero`` was read until memory ran out. Opened without blocking, then checked, so nothing waits on a FIFO.

    Raises:
        ValueError: not a regular file, naming it. OSError: it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise ValueError(f"{what} {path} is not a regular file ({kind}): only regular files are read")
    return os.fdopen(fd, "rb")


def bounded_lines(fh: BinaryIO, name: str, first_line: int = 1) -> Iterator[bytes]:
    """The lines of ``fh`` from where it is, each at most ``MAX_LINE_BYTES``.

    Raises:
        LineTooLong: a longer line, naming its file and line (nothing past the limit is read).
    """
    lineno = first_line
    while line := fh.readline(MAX_LINE_BYTES + 1):
        if len(line) > MAX_LINE_BYTES:
            raise LineTooLong(
                f"{name} line {lineno} is longer than {MAX_LINE_BYTES:,} bytes: no row is that long (a caption or "
                "a reference holds at most 64 KiB; capeval.corpus.row_sources.MAX_LINE_BYTES)"
            )
        yield line
        lineno += 1


class LineTooLong(OSError):
    """A line of a JSONL or CSV file over ``MAX_LINE_BYTES``: an OSError, so a shard meeting one (its file changed
    since it was listed) fails by name as a file that cannot be read."""


def jsonl_shards(path: Path, chunk_size: int) -> list[Shard]:
    """The shards of a JSONL file: ``chunk_size`` non-blank lines each (blank lines belong to no row).

    Raises:
        ValueError: the file is not a regular file, or holds a line over ``MAX_LINE_BYTES``, naming it.
    """
    shards: list[Shard] = []
    with open_regular(path, "JSONL file") as fh:
        start = offset = 0
        first_line = rows = 0
        digest = hashlib.sha256()
        try:
            for lineno, line in enumerate(bounded_lines(fh, path.name), 1):
                if line.strip():
                    if rows == 0:
                        start, first_line, digest = offset, lineno, hashlib.sha256()
                    rows += 1
                offset += len(line)
                if rows:
                    digest.update(line)
                if rows == chunk_size:
                    span = (start, offset)
                    shards.append(_byte_shard(path, "jsonl", len(shards), span, first_line, digest, rows))
                    rows = 0
        except LineTooLong as err:
            raise ValueError(str(err)) from None
        if rows:
            shards.append(_byte_shard(path, "jsonl", len(shards), (start, offset), first_line, digest, rows))
    return shards


def _byte_shard(
    path: Path, kind: str, n: int, span: tuple[int, int], first_row: int, digest, rows: int, header=()
) -> Shard:
    # Its rows' bytes, and what gives them meaning: the line a row's default key names, a CSV file's header.
    identity = {
        "path": str(path.resolve()),
        "bytes": list(span),
        "rows": rows,
        "sha256": digest.hexdigest(),
        "first_line": first_row,
    }
    if kind == "csv":
        identity["header"] = list(header)
    return Shard(
        path=path,
        name=_shard_name(path.name, n),
        kind=kind,
        span=span,
        first_row=first_row,
        fields=tuple(header),
        identity=identity,
    )


class _CountingLines:
    """A binary file's lines decoded for ``csv.reader``, counting and hashing the bytes handed out: the reader asks
    for exactly the lines of one record before returning it, so after each record ``offset`` is its end and
    ``digest`` has seen its bytes."""

    def __init__(self, fh, name: str) -> None:
        self.fh, self.name, self.offset, self.lineno = fh, name, 0, 0
        self.digest = hashlib.sha256()

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = self.fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            raise StopIteration
        if len(line) > MAX_LINE_BYTES:
            raise ValueError(
                f"{self.name} line {self.lineno + 1} is longer than {MAX_LINE_BYTES:,} bytes: no row is that long "
                "(capeval.corpus.row_sources.MAX_LINE_BYTES)"
            )
        self.offset += len(line)
        self.lineno += 1
        self.digest.update(line)
        try:
            return line.decode("utf-8-sig" if self.lineno == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{self.name} line {self.lineno} is not UTF-8 ({err.reason})") from None


def csv_dialect(path: Path) -> str:
    return "excel-tab" if path.suffix.lower() == ".tsv" else "excel"


def csv_records(lines: Iterator[str], path: Path):
    """``csv.reader`` over a CSV (or TSV) file's lines, with capeval's field limit: the one reader of CSV records,
    for the listing and for every process that reads rows (the limit is the ``csv`` module's, per process: set in
    the listing's process only, a Ray worker kept Python's 128 KiB and ended the run on a longer field)."""
    csv.field_size_limit(MAX_CSV_FIELD_BYTES)
    return csv.reader(lines, dialect=csv_dialect(path))


def csv_shards(path: Path, chunk_size: int) -> list[Shard]:
    """The shards of a CSV (or TSV) file with a header line: ``chunk_size`` records each.

    Raises:
        ValueError: the file is not UTF-8 or not CSV (naming the line).
    """
    shards: list[Shard] = []
    with open_regular(path, "CSV file") as fh:
        lines = _CountingLines(fh, path.name)
        reader = csv_records(lines, path)
        try:
            header = next(reader, None)
            if not header:
                return []
            start, first, rows = lines.offset, lines.lineno + 1, 0
            lines.digest = hashlib.sha256()
            for record in reader:
                rows += bool(record)  # a blank line is no record
                if rows == chunk_size:
                    span = (start, lines.offset)
                    shards.append(
                        _byte_shard(path, "csv", len(shards), span, first, lines.digest, rows, header)
                    )
                    start, first, rows = lines.offset, lines.lineno + 1, 0
                    lines.digest = hashlib.sha256()
        except csv.Error as err:
            raise ValueError(f"{path.name} line {lines.lineno} is not CSV: {err}") from None
        if rows:
            span = (start, lines.offset)
            shards.append(_byte_shard(path, "csv", len(shards), span, first, lines.digest, rows, header))
    return shards


def _sorted_images(folder: Path, above: tuple[str, ...] = ()) -> Iterator[Path]:
    """The images under ``folder`` by sorted path, one directory listing in memory at a time. A linked folder is
    followed unless it leads back to a folder above it (a loop, refused naming the link); an entry whose link
    cannot be followed at all is an image to report (its row says why) or, under another name, refused by name.

    Raises:
        ValueError: a link that loops, naming it and where it leads.
    """
    real = os.path.realpath(folder)
    above = (*above, real)
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        try:
            is_dir = entry.is_dir()
        except OSError as err:  # a link to itself (ELOOP), a folder this user cannot read
            if entry.name.lower().endswith(IMAGE_EXTENSIONS):
                yield Path(entry.path)
                continue
            raise ValueError(f"image folder entry {entry.path} cannot be followed ({err.strerror})") from None
        if is_dir:
            if entry.is_symlink() and os.path.realpath(entry.path) in above:
                raise ValueError(
                    f"image folder entry {entry.path} is a link to {os.readlink(entry.path)}, a folder above it: "
                    "following it would list the same images without end"
                )
            yield from _sorted_images(Path(entry.path), above)
        elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
            yield Path(entry.path)


def image_folder_shards(folder: Path, chunk_size: int) -> list[Shard]:
    """The shards of a folder of images with ``.txt`` captions: ``chunk_size`` images each, by sorted path."""
    shards: list[Shard] = []
    members: list[str] = []

    def close() -> None:
        digest = hashlib.sha256()
        for relative in members:
            for file in (folder / relative, (folder / relative).with_suffix(".txt")):
                st = file.stat() if file.exists() else None
                digest.update(
                    f"{file.relative_to(folder)}|{st and st.st_size}|{st and st.st_mtime_ns}\n".encode()
                )
        identity = {
            "folder": str(folder.resolve()),
            "images": len(members),
            "files_sha256": digest.hexdigest(),
        }
        shards.append(
            Shard(
                path=folder,
                name=_shard_name("images", len(shards)),
                kind="image_folder",
                first_row=len(shards) * chunk_size,
                fields=tuple(members),
                identity=identity,
            )
        )

    for image in _sorted_images(folder):
        members.append(str(image.relative_to(folder)))
        if len(members) == chunk_size:
            close()
            members = []
    if members:
        close()
    return shards


def dataset_shards(dataset: Any, chunk_size: int, image_column: str | None) -> list[Shard]:
    """The shards of a ``datasets`` dataset: row ranges of ``chunk_size``; images kept undecoded (their bytes or
    path are decoded by capeval's own reader, as every other source's)."""
    import datasets

    features = getattr(dataset, "features", None) or {}
    for name, feature in features.items():
        if isinstance(feature, datasets.Image) and feature.decode and (image_column in (None, name)):
            dataset = dataset.cast_column(name, datasets.Image(decode=False))
    contents: list[str] = []
    if isinstance(dataset, datasets.Dataset):
        total, fingerprint = len(dataset), dataset._fingerprint
    else:  # a stream: read once to count its rows and hash each shard's, then read in order
        fingerprint = None
        total, contents = _stream_contents(dataset, chunk_size)
    split = str(getattr(dataset, "split", None) or "rows")
    shards = []
    for n, start in enumerate(range(0, total, chunk_size)):
        span = (start, min(total, start + chunk_size))
        identity = {"fingerprint": fingerprint, "split": split, "rows": list(span)}
        if contents:  # a stream has no fingerprint: its rows' content is its identity
            identity["content_sha256"] = contents[n]
        shards.append(
            Shard(
                path=None,
                name=_shard_name(split, n),
                kind="datasets",
                span=span,
                first_row=start,
                identity=identity,
                dataset=dataset,
            )
        )
    return shards


def _stream_contents(stream: Any, chunk_size: int) -> tuple[int, list[str]]:
    """A stream's row count and the SHA-256 of each ``chunk_size`` rows' content (``_feed``), in one pass."""
    total, digests = 0, []
    digest = hashlib.sha256()
    for record in stream:
        _feed(digest, record)
        total += 1
        if total % chunk_size == 0:
            digests.append(digest.hexdigest())
            digest = hashlib.sha256()
    if total % chunk_size:
        digests.append(digest.hexdigest())
    return total, digests


def _feed(digest, value: Any) -> None:
    """``value`` into ``digest`` in a form that two equal values share and two different ones do not: a tag and a
    length before each part (so ``["ab"]`` and ``["a", "b"]`` differ), mappings by sorted key, pictures and arrays
    by their pixels or bytes with their shape. A value of another type goes in by its ``repr``, which may differ
    from one process to the next: the rows are then scored again, never kept wrongly."""
    import numpy as np
    from PIL import Image

    def part(tag: bytes, data: bytes) -> None:
        digest.update(tag + len(data).to_bytes(8, "little") + data)

    if value is None or isinstance(value, bool):
        part(b"c", repr(value).encode())
    elif isinstance(value, (int, float)):
        part(b"n", repr(value).encode())
    elif isinstance(value, str):
        part(b"s", value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        part(b"b", bytes(value))
    elif isinstance(value, dict):
        part(b"d", str(len(value)).encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        part(b"l", str(len(value)).encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, np.ndarray):
        part(b"a", f"{value.dtype.str}{value.shape}".encode())
        part(b"a", np.ascontiguousarray(value).tobytes())
    elif isinstance(value, Image.Image):
        part(b"p", f"{value.mode}{value.size}".encode())
        part(b"p", value.tobytes())
    else:
        part(b"r", f"{type(value).__qualname__}:{value!r}".encode("utf-8", "surrogatepass"))


def folder_contents_message(folder: Path) -> str:
    """What a folder that yields no row holds: its files counted by extension, with what to do about them."""
    counts: dict[str, int] = {}
    for _, _, names in os.walk(folder):
        for name in names:
            ext = Path(name).suffix.lower() or "(no extension)"
            counts[ext] = counts.get(ext, 0) + 1
    total = sum(counts.values())
    if not total:
        return (
            f"no rows to score: {folder} holds no file (give a .jsonl or .csv file, a folder of them, a folder of "
            "images with .txt captions, or WebDataset/Parquet shards)"
        )
    found = ", ".join(
        f"{n} *{ext}" if ext.startswith(".") else f"{n} {ext}"
        for ext, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
    )
    hints = "".join(f"; *{ext}: {_UNREAD_HINTS[ext]}" for ext in sorted(counts) if ext in _UNREAD_HINTS)
    return (
        f"no rows to score in {folder}: found {total} file{'s' if total != 1 else ''} ({found}), none of them "
        f".jsonl/.ndjson/.csv, a shard, or an image ({', '.join(IMAGE_EXTENSIONS)}) with a .txt caption{hints}"
    )


def empty_files_message(files: list[Path]) -> str:
    sizes = ", ".join(f"{f} ({f.stat().st_size} bytes)" for f in files[:5])
    more = f" and {len(files) - 5} more" if len(files) > 5 else ""
    what = "is empty or holds only blank lines" if len(files) == 1 else "are empty or hold only blank lines"
    return (
        f"no rows to score: {sizes}{more} {what} (a corpus file holds one row per line, CSV after a header)"
    )
