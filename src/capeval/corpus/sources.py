"""Corpus rows, read lazily in a fixed order: JSONL files, image folders with captions, ``datasets`` datasets.

A ``Source`` yields the rows of each part of ``chunk_size`` rows, parsing only the parts a process scores
(the others are skipped line by line), which ``capeval.corpus.items`` turns into ``Item``s.

A source that yields no row is an error that says what the path holds (``EmptySourceError``): a folder of
WebDataset shards, say, is refused by name instead of "succeeding" with zero rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from capeval.json_files import InputFileError, parse_json

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp", ".gif")
JSONL_EXTENSIONS = (".jsonl", ".ndjson")
_END = object()  # what next() returns on a source without rows
# What to do with files a corpus folder may hold but capeval does not read, by extension.
_UNREAD_HINTS = {
    ".arrow": "a save_to_disk folder needs its dataset_info.json; else load the files with datasets and pass them",
    ".csv": "load CSV files with datasets.load_dataset('csv', data_files=...) and pass the dataset",
    ".json": "a .json file is read when given itself (one JSON object per line); a folder is searched for "
    ".jsonl/.ndjson files only",
}


class EmptySourceError(ValueError):
    """The corpus source holds no row; the message says what was found in its place."""


class Source:
    """Rows of a corpus in a fixed order, read lazily.

    ``parts(chunk_size, wanted)`` yields ``(part, rows)`` for every part, where ``rows`` is the list of
    ``(index, row)`` pairs when ``wanted(part)`` and ``None`` otherwise (those rows are skipped without being
    parsed); the last part yielded is the first with fewer than ``chunk_size`` rows (possibly none).
    """

    description: dict
    total: int | None = None

    def iter_rows(self) -> Iterator[Any]:
        """Raw rows, in order; each is parsed by ``parse`` only when its part is wanted."""
        raise NotImplementedError

    def parse(self, raw: Any, index: int) -> dict:
        return raw

    def count(self) -> int | None:
        """Rows in the source, when it can tell (for the progress bar's ETA)."""
        return self.total

    def empty_message(self) -> str:
        """Why the source yields no row: what its path holds instead."""
        return f"the corpus source {self.description} holds no rows"

    def check_not_empty(self) -> None:
        """Read up to the first row, before a run writes anything.

        Raises:
            EmptySourceError: the source yields no row (the message says what was found).
        """
        if next(iter(self.iter_rows()), _END) is _END:
            raise EmptySourceError(self.empty_message())

    def parts(
        self, chunk_size: int, wanted: Callable[[int, int], bool]
    ) -> Iterator[tuple[int, list | None, int]]:
        """``(part, rows, count)`` for every part; ``wanted(part, count)`` decides once the part's size is known.

        The raw rows of one part are held until then (no more than a scored part holds), so a caller can tell a
        finished part from one whose file disagrees with the source.

        Raises:
            EmptySourceError: the source yields no row at all.
        """
        part, raws = 0, []
        for raw in self.iter_rows():
            raws.append(raw)
            if len(raws) == chunk_size:
                yield part, self._parsed(part, chunk_size, raws, wanted), chunk_size
                part, raws = part + 1, []
        if part == 0 and not raws:
            raise EmptySourceError(self.empty_message())
        yield part, self._parsed(part, chunk_size, raws, wanted), len(raws)

    def _parsed(
        self, part: int, chunk_size: int, raws: list, wanted: Callable[[int, int], bool]
    ) -> list | None:
        if not wanted(part, len(raws)):
            return None
        start = part * chunk_size
        return [(start + k, self.parse(raw, start + k)) for k, raw in enumerate(raws)]


class JsonlSource(Source):
    """One JSON object per line (blank lines ignored); image paths relative to the file's folder."""

    def __init__(self, files: Sequence[Path]) -> None:
        if not files:
            raise EmptySourceError("no .jsonl file to read")
        self.files = [Path(f) for f in files]
        self.description = {
            "kind": "jsonl",
            "files": [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in self.files],
        }
        self.total = None

    def count(self) -> int:
        n = 0
        for f in self.files:
            with open(f, "rb") as fh:
                n += sum(1 for line in fh if line.strip())
        return n

    def empty_message(self) -> str:
        sizes = ", ".join(f"{f} ({f.stat().st_size} bytes)" for f in self.files[:5])
        more = f" and {len(self.files) - 5} more" if len(self.files) > 5 else ""
        what = (
            "is empty or holds only blank lines"
            if len(self.files) == 1
            else "are empty or hold only blank lines"
        )
        return f"no rows to score: {sizes}{more} {what} (a corpus file holds one JSON object per line)"

    def iter_rows(self):
        for f in self.files:
            with open(f, "rb") as fh:
                for lineno, line in enumerate(fh, 1):
                    if line.strip():
                        yield (f, lineno, line)

    def parse(self, raw, index: int) -> dict:
        f, lineno, line = raw
        try:
            row = parse_json(line, f"{f.name} line {lineno}")
        except InputFileError as err:
            return {"__error__": str(err)}
        if not isinstance(row, dict):
            return {"__error__": f"{f.name} line {lineno} is not a JSON object"}
        row["__base__"] = str(f.parent)
        return row


def _sorted_walk(folder: Path) -> Iterator[Path]:
    # One directory listing in memory at a time, in a stable order.
    entries = sorted(os.scandir(folder), key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir():
            yield from _sorted_walk(Path(entry.path))
        elif entry.name.lower().endswith(IMAGE_EXTENSIONS):
            yield Path(entry.path)


class ImageFolderSource(Source):
    """Image files (any depth, sorted by path) each with a same-named ``.txt`` caption beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.total = None
        self.description = {"kind": "image_folder", "folder": str(self.folder.resolve())}

    def count(self) -> int:
        return sum(1 for _ in _sorted_walk(self.folder))

    def iter_rows(self):
        return _sorted_walk(self.folder)

    def empty_message(self) -> str:
        return folder_contents_message(self.folder)

    def parse(self, path: Path, index: int) -> dict:
        row: dict[str, Any] = {"id": str(path.relative_to(self.folder).with_suffix("")), "image": str(path)}
        text = path.with_suffix(".txt")
        try:
            row["caption"] = text.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            row["__error__"] = f"no caption file {text.name} beside {path.name}"
        return row


class DatasetSource(Source):
    """A ``datasets.Dataset`` (read by slices) or ``IterableDataset`` (streamed); images kept undecoded."""

    def __init__(self, dataset, image_column: str) -> None:
        import datasets

        features = getattr(dataset, "features", None) or {}
        if isinstance(features.get(image_column), datasets.Image):
            # Bytes and paths are hashed as they are; pixels are decoded only for images not in the cache.
            dataset = dataset.cast_column(image_column, datasets.Image(decode=False))
        self.dataset = dataset
        self.random_access = isinstance(dataset, datasets.Dataset)
        fingerprint = getattr(dataset, "_fingerprint", None)
        self.total = len(dataset) if self.random_access else None
        if not self.random_access:
            info = getattr(dataset, "info", None)
            splits = getattr(info, "splits", None)
            split = getattr(dataset, "split", None)
            if splits and split in splits and splits[split].num_examples:
                self.total = int(splits[split].num_examples)
        info = getattr(dataset, "info", None)
        self.description = {
            "kind": "datasets",
            "name": getattr(info, "dataset_name", None),
            "config": getattr(info, "config_name", None),
            "split": str(getattr(dataset, "split", None)),
            "fingerprint": fingerprint,
            "rows": self.total,
        }

    def iter_rows(self):
        return iter(self.dataset)

    def empty_message(self) -> str:
        d = self.description
        name = f"{d['name']!r} " if d["name"] else ""
        return f"no rows to score: the dataset {name}(split {d['split']}, fingerprint {d['fingerprint']}) is empty"

    def check_not_empty(self) -> None:
        if self.random_access:
            if len(self.dataset) == 0:
                raise EmptySourceError(self.empty_message())
            return
        super().check_not_empty()  # a streaming dataset: read up to its first row

    def parts(self, chunk_size, wanted):
        if not self.random_access:
            yield from super().parts(chunk_size, wanted)
            return
        n = len(self.dataset)
        if n == 0:
            raise EmptySourceError(self.empty_message())
        part = 0
        while True:
            start = part * chunk_size
            stop = min(n, start + chunk_size)
            count = max(0, stop - start)
            rows = None
            if wanted(part, count):  # once: it checks the part's file on disk
                block = self.dataset[start:stop] if count else {}
                rows = [(start + k, {c: block[c][k] for c in block}) for k in range(count)]
            yield part, rows, count
            if count < chunk_size:
                return
            part += 1


def open_source(source: Any, image_column: str = "image", split: str | None = None) -> Source:
    """A ``Source`` for a path (JSONL file, folder of JSONL, image folder, ``save_to_disk`` folder), a
    ``datasets`` dataset, or a dataset name for ``datasets.load_dataset(name, split=..., streaming=True)``."""
    if isinstance(source, Source):
        return source
    try:
        import datasets

        if isinstance(source, (datasets.Dataset, datasets.IterableDataset)):
            return DatasetSource(source, image_column)
        if isinstance(source, (datasets.DatasetDict, datasets.IterableDatasetDict)):
            if split is None:
                raise ValueError(f"the dataset has splits {list(source)}: choose one (split=...)")
            return DatasetSource(source[split], image_column)
    except ImportError:  # pragma: no cover - datasets is a dependency
        pass
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"corpus source must be a path or a datasets dataset, got {type(source).__name__}")
    path = Path(os.path.expanduser(os.fspath(source)))
    if path.is_file():
        if path.suffix.lower() not in (".jsonl", ".json", ".ndjson"):
            raise ValueError(f"{path}: a corpus file must be JSONL (one JSON object per line)")
        return JsonlSource([path])
    if path.is_dir():
        if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
            import datasets

            return open_source(datasets.load_from_disk(str(path)), image_column, split)
        jsonl = sorted(p for p in path.iterdir() if p.suffix.lower() in JSONL_EXTENSIONS)
        if jsonl:
            return JsonlSource(jsonl)
        return ImageFolderSource(path)
    if isinstance(source, str) and not source.startswith((".", "/", "~")):
        import datasets

        return DatasetSource(
            datasets.load_dataset(source, split=split or "train", streaming=True), image_column
        )
    raise ValueError(f"corpus source not found: {path}")


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
            f"no rows to score: {folder} holds no file (give a .jsonl file, a folder of them, or a folder of "
            "images with .txt captions)"
        )
    found = ", ".join(
        f"{n} *{ext}" if ext.startswith(".") else f"{n} {ext}"
        for ext, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
    )
    hints = "".join(f"; *{ext}: {_UNREAD_HINTS[ext]}" for ext in sorted(counts) if ext in _UNREAD_HINTS)
    return (
        f"no rows to score in {folder}: found {total} file{'s' if total != 1 else ''} ({found}), none of them "
        f".jsonl/.ndjson or an image ({', '.join(IMAGE_EXTENSIONS)}) with a .txt caption{hints}"
    )
