"""Shards of web-scale corpora: WebDataset tars as img2dataset writes them, and Parquet files.

img2dataset (rom1504/img2dataset, ``img2dataset/writer.py``, ``WebDatasetSampleWriter``) writes each shard as
``NNNNN.tar`` holding, per sample, ``<key>.jpg`` (or the encode format), ``<key>.txt`` (the caption) and
``<key>.json`` (metadata), with ``NNNNN.parquet`` (the same metadata as a table) and ``NNNNN_stats.json``
beside. Those two side files are not shards: a folder with tars is read from its tars only. A folder of
Parquet files only (``ParquetSampleWriter``, or a ``datasets`` export) is read from those: an image column of
encoded bytes (``jpg``, ``image``; bytes or datasets' ``{"bytes", "path"}``) or of paths, a caption column.

Tars are read as a stream and never extracted: member names are only keys (``../x.jpg`` is refused, not
followed), a member larger than ``MAX_MEMBER_BYTES`` is refused by name, and a truncated member ends its
shard with an error row for its key. Every sample yields a row: one that cannot be scored carries ``error``
and keeps its key. A shard that cannot be opened at all raises ``ShardReadError`` naming it, which the
engines report per shard before going on.
"""

from __future__ import annotations

import glob
import json
import os
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from capeval.corpus.row_checks import caption_problem, key_problem, references_problem
from capeval.validation import has_visible_text

# The image extensions img2dataset writes (its --encode_format) and WebDataset's decoders read.
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
CAPTION_EXTENSION = "txt"  # img2dataset's caption member
IMAGE_COLUMNS = ("jpg", "image", "png", "webp", "img")
CAPTION_COLUMNS = ("caption", "txt", "text")
KEY_COLUMNS = ("key", "id")
PATH_COLUMNS = ("image_path", "path", "filepath", "url_path")
MAX_MEMBER_BYTES = 64 * 1024 * 1024  # a larger "image" is refused before it is read into memory


class ShardReadError(ValueError):
    """A shard that cannot be read at all (not a tar, unreadable Parquet); the message names the shard."""


@dataclass(frozen=True)
class Shard:
    """One input shard: ``name`` (the file stem, ``00000``) names its output file."""

    path: Path
    name: str
    kind: str  # "webdataset" or "parquet"


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


def _shard(path: Path) -> Shard:
    kind = "webdataset" if path.suffix == ".tar" else "parquet"
    return Shard(path=path, name=path.stem, kind=kind)


def is_shard_source(source) -> bool:
    """Whether ``source`` names shards: a ``.tar``/``.parquet`` file, a folder holding them, a glob, a list."""
    if isinstance(source, (list, tuple)):
        return bool(source) and all(is_shard_source(s) for s in source)
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = Path(source)
    if path.is_file():
        return path.suffix in (".tar", ".parquet")
    if path.is_dir():
        return any(path.glob("*.tar")) or (
            any(path.glob("*.parquet"))
            and not any(path.glob("*.jsonl"))
            and not (path / "state.json").exists()
        )
    matches = glob.glob(os.fspath(source)) if any(ch in os.fspath(source) for ch in "*?[") else []
    return bool(matches) and all(m.endswith((".tar", ".parquet")) for m in matches)


def list_shards(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Shard]:
    """The shards of ``source``, sorted by path: a folder, a glob, a file, or a list of files.

    Raises:
        ValueError: nothing to read, naming what the folder holds.
    """
    if isinstance(source, (list, tuple)):
        paths = [Path(p) for p in source]
    elif Path(source).is_dir():
        folder = Path(source)
        tars = sorted(folder.glob("*.tar"))
        # Beside tars, NNNNN.parquet is img2dataset's metadata of NNNNN.tar, not a shard.
        paths = tars or sorted(folder.glob("*.parquet"))
        if not paths:
            found = sorted({p.suffix or p.name for p in folder.iterdir()})
            raise ValueError(f"{folder} holds no .tar or .parquet shard (found: {found or 'nothing'})")
    elif Path(source).exists():
        paths = [Path(source)]
    else:
        paths = [Path(p) for p in sorted(glob.glob(os.fspath(source)))]
        if not paths:
            raise ValueError(f"no shard matches {os.fspath(source)!r}")
    shards = []
    for path in sorted(paths):
        if path.suffix not in (".tar", ".parquet"):
            raise ValueError(f"{path} is not a shard: expected a .tar (WebDataset) or .parquet file")
        if not path.is_file():
            raise ValueError(f"shard {path} does not exist or is not a regular file")
        shards.append(_shard(path))
    names = [s.name for s in shards]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"shards must have distinct file names (each names its output file): {twice} repeat")
    return shards


def read_shard(
    shard: Shard, caption_column: str | None = None, image_column: str | None = None
) -> list[ShardRow]:
    """Every sample of ``shard``, in the shard's order.

    Args:
        shard: from ``list_shards``.
        caption_column, image_column: Parquet columns (default: the first of ``CAPTION_COLUMNS`` /
            ``IMAGE_COLUMNS`` or ``PATH_COLUMNS`` present); a tar's are its ``.txt`` and image members.

    Raises:
        ShardReadError: the shard cannot be opened or parsed at all.
        ValueError: a Parquet shard lacks a caption or image column (the message lists its columns).
    """
    if shard.kind == "webdataset":
        return list(_read_tar(shard))
    return list(_read_parquet(shard, caption_column, image_column))


def _member_key(name: str) -> tuple[str, str]:
    """WebDataset's grouping: the key is the path up to the first dot of the file name, the rest its extension."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def _unsafe_name(name: str) -> str | None:
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        return f"member name {name!r} leaves the shard (absolute or '..')"
    return None


def _read_tar(shard: Shard) -> Iterator[ShardRow]:
    samples: dict[str, dict] = {}
    problems: dict[str, str] = {}
    try:
        archive = tarfile.open(shard.path, mode="r|")  # a stream: members are read in order, never extracted
    except (tarfile.TarError, OSError, EOFError) as err:
        raise ShardReadError(f"shard {shard.path} is not a readable tar file: {err}") from err
    try:
        for member in archive:
            key, ext = _member_key(member.name)
            sample = samples.setdefault(key, {})
            unsafe = _unsafe_name(member.name)
            if unsafe:
                problems.setdefault(key, unsafe)
                continue
            if not member.isfile():
                continue  # folders, links: nothing to read
            if member.size > MAX_MEMBER_BYTES:
                problems.setdefault(
                    key, f"member {member.name} is {member.size} bytes (limit {MAX_MEMBER_BYTES})"
                )
                continue
            if ext not in IMAGE_EXTENSIONS and ext not in (CAPTION_EXTENSION, "json"):
                continue  # other fields img2dataset or a user may add
            fh = archive.extractfile(member)
            data = fh.read() if fh is not None else b""
            if len(data) != member.size:
                problems[key] = f"tar member {member.name} is truncated ({len(data)} of {member.size} bytes)"
                break
            sample[ext] = data
    except (tarfile.TarError, OSError, EOFError) as err:
        if not samples:
            raise ShardReadError(f"shard {shard.path} is not a readable tar file: {err}") from err
        last = next(reversed(samples))
        problems.setdefault(last, f"tar ends inside a member ({err})")
    finally:
        archive.close()
    for index, (key, sample) in enumerate(samples.items()):
        yield _tar_row(shard, index, key, sample, problems.get(key))


def _tar_row(shard: Shard, index: int, key: str, sample: dict, problem: str | None) -> ShardRow:
    image = next((sample[e] for e in IMAGE_EXTENSIONS if e in sample), None)
    raw = sample.get(CAPTION_EXTENSION)
    caption = None
    if raw is not None:
        try:
            caption = raw.decode("utf-8")
        except UnicodeDecodeError:
            problem = problem or f"caption of {key} is not UTF-8"
    references = _references(sample.get("json"))
    if problem is None and image is None:
        problem = f"sample {key} has no image member (found: {sorted('.' + e for e in sample) or 'none'})"
    if problem is None and caption is None:
        problem = f"sample {key} has no caption (.txt)"
    if problem is None and not has_visible_text(caption):
        problem = f"sample {key} has an empty caption (.txt){_invisible(caption)}"
    return ShardRow(
        key=key,
        shard=shard.name,
        index=index,
        caption=caption,
        image=image,
        error=problem,
        references=references,
    )


def _invisible(caption: str | None) -> str:
    """Why a caption that is not blank still counts as empty (the metrics' input checks refuse it too)."""
    return " (only invisible characters)" if caption and caption.strip() else ""


def _references(metadata: bytes | None) -> list[str] | None:
    """The ``references`` list of a sample's ``.json`` member, if it has one (img2dataset's has none)."""
    if metadata is None:
        return None
    try:
        value = json.loads(metadata)
    except (ValueError, UnicodeDecodeError):
        return None
    refs = value.get("references") if isinstance(value, dict) else None
    if isinstance(refs, list) and all(isinstance(r, str) for r in refs):
        return refs
    return None


def _pick(columns: Sequence[str], wanted: str | None, choices: Sequence[str], what: str, shard: Shard) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise ValueError(
                f"shard {shard.path} has no {what} column {wanted!r}; its columns: {list(columns)}"
            )
        return wanted
    found = next((c for c in choices if c in columns), None)
    if found is None:
        raise ValueError(
            f"shard {shard.path} has no {what} column (looked for {list(choices)}); its columns: {list(columns)}"
        )
    return found


def choose_columns(
    shards: Sequence[Shard], caption_column: str | None, image_column: str | None
) -> dict[str, str | list[str] | None]:
    """The caption and image columns of a run's Parquet shards, decided once, from the first shard's footer.

    A column given is used as given; one not given is the first of ``CAPTION_COLUMNS`` / ``IMAGE_COLUMNS`` +
    ``PATH_COLUMNS`` present in the first readable Parquet shard, and that choice then holds for every shard
    (a later shard without it is reported, not read from another column). Run before any work, so a wrong
    column ends a run at once rather than failing every shard one by one.

    Returns:
        dict: ``caption``, ``image`` (None for tars, which have no columns) and ``automatic`` (the fields
        chosen here rather than given), as ``run.json`` and ``summary.json`` record them.

    Raises:
        ValueError: the column is missing from the first shard, naming the shard and the columns it has.
    """
    import pyarrow.parquet as pq

    choice: dict[str, str | list[str] | None] = {"caption": caption_column, "image": image_column}
    automatic: list[str] = []
    for shard in shards:
        if shard.kind != "parquet":
            continue
        try:
            columns = pq.read_schema(shard.path).names
        except Exception:  # pyarrow's errors for a damaged file are several types: the engines report it
            continue
        choice["caption"] = _pick(columns, caption_column, CAPTION_COLUMNS, "caption", shard)
        choice["image"] = _pick(columns, image_column, (*IMAGE_COLUMNS, *PATH_COLUMNS), "image", shard)
        automatic = [
            f for f, given in (("caption", caption_column), ("image", image_column)) if given is None
        ]
        break
    choice["automatic"] = automatic
    return choice


def _read_parquet(shard: Shard, caption_column: str | None, image_column: str | None) -> Iterator[ShardRow]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(shard.path)
    except Exception as err:  # pyarrow raises its own ArrowInvalid/OSError family for damaged files
        raise ShardReadError(f"shard {shard.path} is not a readable Parquet file: {err}") from err
    columns = table.column_names
    caption_col = _pick(columns, caption_column, CAPTION_COLUMNS, "caption", shard)
    image_col = _pick(columns, image_column, (*IMAGE_COLUMNS, *PATH_COLUMNS), "image", shard)
    key_col = next((c for c in KEY_COLUMNS if c in columns), None)
    captions = table.column(caption_col).to_pylist()
    images = table.column(image_col).to_pylist()
    keys = (
        table.column(key_col).to_pylist() if key_col else [f"{shard.name}/{i}" for i in range(len(captions))]
    )
    refs = table.column("references").to_pylist() if "references" in columns else [None] * len(captions)
    base = shard.path.parent
    for index, (key, caption, image, references) in enumerate(zip(keys, captions, images, refs, strict=True)):
        key, problem = key_problem(key, f"row {index} of column {key_col!r}")
        where = f"row {key if key is not None else index}"
        if isinstance(image, dict):  # datasets' Image struct
            image = image.get("bytes") or image.get("path")
        if isinstance(image, str) and not os.path.isabs(image):
            image = str(base / image)  # paths are relative to the shard, as in a JSONL corpus
        if problem is None and (image is None or image == b""):
            problem = f"{where} has no image in column {image_col!r}"
        caption_issue = caption_problem(caption, where)
        problem = problem or (caption_issue and f"{caption_issue} in column {caption_col!r}")
        references, refs_issue = references_problem(references, where)
        problem = problem or refs_issue
        yield ShardRow(
            key=key,
            shard=shard.name,
            index=index,
            caption=caption if isinstance(caption, str) else None,
            image=image,
            error=problem,
            references=references,
        )
