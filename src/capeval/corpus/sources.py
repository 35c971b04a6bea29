"""Corpus rows, read lazily in a fixed order: JSONL files, image folders with captions, ``datasets`` datasets.

A ``Source`` yields the rows of each part of ``chunk_size`` rows, parsing only the parts a process scores
(the others are skipped line by line), which ``capeval.corpus.items`` turns into ``Item``s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".tiff", ".tif", ".bmp", ".webp", ".gif")


class Source:
    """Rows of a corpus in a fixed order, read lazily.

    ``parts(chunk_size, wanted)`` yields ``(part, rows)`` for every part, where ``rows`` is the list of
    ``(index, row)`` pairs when ``wanted(part)`` and ``None`` otherwise (those rows are skipped without being
    parsed); the last part yielded is the first with fewer than ``chunk_size`` rows (possibly none).
    """

    description: dict
    total: int | None = None

    def iter_rows(self) -> Iterator[tuple[bool, Any]]:
        """``(raw, row)`` pairs; ``raw`` rows are parsed by ``parse`` only when their part is wanted."""
        raise NotImplementedError

    def parse(self, raw: Any, index: int) -> dict:
        return raw

    def count(self) -> int | None:
        """Rows in the source, when it can tell (for the progress bar's ETA)."""
        return self.total

    def parts(self, chunk_size: int, wanted: Callable[[int], bool]) -> Iterator[tuple[int, list | None, int]]:
        part, start, count, rows = 0, 0, 0, [] if wanted(0) else None
        for raw in self.iter_rows():
            if rows is not None:
                rows.append((start + count, self.parse(raw, start + count)))
            count += 1
            if count == chunk_size:
                yield part, rows, count
                part, start, count = part + 1, start + chunk_size, 0
                rows = [] if wanted(part) else None
        yield part, rows, count


class JsonlSource(Source):
    """One JSON object per line (blank lines ignored); image paths relative to the file's folder."""

    def __init__(self, files: Sequence[Path]) -> None:
        if not files:
            raise ValueError("no .jsonl file to read")
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

    def iter_rows(self):
        for f in self.files:
            with open(f, "rb") as fh:
                for lineno, line in enumerate(fh, 1):
                    if line.strip():
                        yield (f, lineno, line)

    def parse(self, raw, index: int) -> dict:
        f, lineno, line = raw
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            return {"__error__": f"{f.name} line {lineno} is not valid JSON: {err}"}
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

    def parts(self, chunk_size, wanted):
        if not self.random_access:
            yield from super().parts(chunk_size, wanted)
            return
        n = len(self.dataset)
        part = 0
        while True:
            start = part * chunk_size
            stop = min(n, start + chunk_size)
            count = max(0, stop - start)
            rows = None
            if wanted(part) and count:
                block = self.dataset[start:stop]
                rows = [(start + k, {c: block[c][k] for c in block}) for k in range(count)]
            elif wanted(part):
                rows = []
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
        jsonl = sorted(p for p in path.iterdir() if p.suffix.lower() in (".jsonl", ".ndjson"))
        if jsonl:
            return JsonlSource(jsonl)
        return ImageFolderSource(path)
    if isinstance(source, str) and not source.startswith((".", "/", "~")):
        import datasets

        return DatasetSource(
            datasets.load_dataset(source, split=split or "train", streaming=True), image_column
        )
    raise ValueError(f"corpus source not found: {path}")
