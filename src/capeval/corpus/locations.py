"""Where shards live: local files, brace patterns, fsspec URLs and WebDataset's ``pipe:CMD``, listed as
``ShardLocation``s (``capeval.corpus.location_kinds``) that the readers open and the resume rule identifies.

A source is a folder, a file, a glob, a brace pattern, a URL or a list of them. A URL with a protocol goes through
fsspec (``capeval.corpus.remote_listing``: ``s3://``, ``gs://``, ``hf://``, ``memory://``; ``file://`` is a local
path); anything else is a local path. Brace patterns are WebDataset's (``capeval.corpus.brace_patterns``) and name
files exactly: each name must exist, and an error names the pattern, the names missing and what their folder
holds. A folder holding tars is read from its tars only (``NNNNN.parquet`` beside ``NNNNN.tar`` is img2dataset's
metadata, not a shard), else from its Parquet files. Shards come back sorted by URL; two with one file name are
refused (the name names the output file).

``pipe:CMD`` runs ``CMD`` in a shell and reads its standard output as a WebDataset tar (braces in it expand, as in
webdataset). It is accepted only as the source itself with ``allow_pipe=True``: what the user typed as the command
line's source argument, or an explicit opt-in in Python. An item of a list (which a caller's code may have read from
a file), a list file, a glob or a listing never runs one, and a file named ``pipe:...`` that a glob or a listing
finds is refused.
"""

from __future__ import annotations

import glob
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from capeval.corpus.brace_patterns import PatternError, expand, missing_names_message
from capeval.corpus.location_kinds import (
    KINDS,
    PIPE_PREFIX,
    LocalShard,
    LocationError,
    PipeShard,
    ShardLocation,
    refuse_pipe_name,
)

_GLOB_CHARS = "*?["
_LOCAL_PROTOCOLS = ("file", "local")


def list_locations(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    allow_pipe: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> list[ShardLocation]:
    """The shards of ``source``, sorted by URL.

    Args:
        source: a folder, file, glob, brace pattern, fsspec URL or ``pipe:CMD``, or a list of them.
        allow_pipe: accept ``pipe:CMD`` as ``source`` itself (what the user typed as a command-line argument, or an
            explicit opt-in in Python); a ``pipe:`` item of a list is refused whatever this says.
        storage_options: passed to fsspec for every URL (``{"client_kwargs": {"endpoint_url": ...}}``, keys);
            without them fsspec's own configuration and the environment apply.

    Raises:
        LocationError: nothing to read, a name a pattern gives that does not exist, a file that is no shard, a
            ``pipe:`` refused, two shards with one name; the message names the pattern and what was found.
    """
    many = isinstance(source, (list, tuple))
    items = list(source) if many else [source]
    if not items:
        raise LocationError("no shard given: the list of shards is empty")
    where = [f" (item {i} of the list)" if many else "" for i in range(len(items))]
    return _located(zip(items, where, strict=True), allow_pipe and not many, dict(storage_options or {}))


def list_file_locations(
    list_file: str | os.PathLike, *, storage_options: Mapping[str, Any] | None = None
) -> list[ShardLocation]:
    """The shards a text file lists, one location per line (blank lines and ``#`` comments skipped); a relative
    path is relative to the list file. ``pipe:`` is refused: a file is no command line.

    Raises:
        LocationError: as ``list_locations``, naming the line. OSError: the list file cannot be read.
    """
    list_file = Path(list_file)
    items = []
    for number, line in enumerate(list_file.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if not text.startswith(PIPE_PREFIX) and not _protocol(text) and not os.path.isabs(text):
            text = str(list_file.parent / text)
        items.append((text, f" (line {number} of {list_file})"))
    if not items:
        raise LocationError(f"{list_file} lists no shard (every line is blank or a comment)")
    return _located(items, False, dict(storage_options or {}))


def names_shards(source) -> bool:
    """Whether ``source`` names shards rather than another corpus layout: a ``pipe:`` command, a URL, a brace
    pattern, a ``.tar``/``.parquet`` file, a glob of them, a folder holding tars (or Parquet files and no
    ``.jsonl`` or ``state.json`` of a JSONL corpus), or a list of such. Lists nothing remote."""
    if isinstance(source, (list, tuple)):
        return bool(source) and all(names_shards(s) for s in source)
    if not isinstance(source, (str, os.PathLike)):
        return False
    text = os.fspath(source)
    protocol = _protocol(text)
    if text.startswith(PIPE_PREFIX) or (protocol and protocol not in _LOCAL_PROTOCOLS):
        return True
    path = Path(_local(text))
    if path.is_file():
        return path.suffix in KINDS
    if path.is_dir():
        jsonl_corpus = any(path.glob("*.jsonl")) or (path / "state.json").exists()
        return any(path.glob("*.tar")) or (any(path.glob("*.parquet")) and not jsonl_corpus)
    try:
        names = expand(text) if "{" in text else [text]
        names = names if names != [text] else glob.glob(text) if _is_glob(text) else []
    except PatternError:
        return True  # a brace pattern all the same: listing it says what is wrong
    return bool(names) and all(Path(n).suffix in KINDS for n in names)


def _located(items: Iterable[tuple[Any, str]], allow_pipe: bool, options: dict) -> list[ShardLocation]:
    found: list[ShardLocation] = []
    for item, where in items:
        if not isinstance(item, (str, os.PathLike)):
            raise LocationError(f"a shard location is a path or URL string{where}; got {type(item).__name__}")
        try:
            found += _locations_of(os.fspath(item), where, allow_pipe, options)
        except PatternError as err:
            raise LocationError(f"{err}{where}") from None
    found.sort(key=lambda location: location.url)
    by_name: dict[str, list[str]] = {}
    for location in found:
        by_name.setdefault(location.name, []).append(location.url)
    twice = {name: urls for name, urls in by_name.items() if len(urls) > 1}
    if twice:
        raise LocationError(
            f"shards must have distinct file names (each names its output file); these repeat: {twice}"
        )
    return found


def _locations_of(text: str, where: str, allow_pipe: bool, options: dict) -> list[ShardLocation]:
    if text.startswith(PIPE_PREFIX):
        if not allow_pipe:
            raise LocationError(
                f"{text!r}{where} is a pipe: location, which runs a shell command: it is accepted only as the "
                "command line's own source argument (in Python: the source itself, with allow_pipe=True), never "
                "as an item of a list, from a list file, a glob or a listing"
            )
        return [_pipe_shard(command) for command in expand(text)]
    protocol = _protocol(text)
    if protocol and protocol not in _LOCAL_PROTOCOLS:
        from capeval.corpus.remote_listing import remote_locations

        return remote_locations(text, where, options)
    return _local_locations(_local(text), where)


def _local_locations(text: str, where: str) -> list[ShardLocation]:
    path = Path(text)
    if path.is_dir():
        return [_local_shard(p, where, f"in folder {text!r}") for p in _folder_shards(path, where)]
    if path.exists():
        return [_local_shard(path, where)]
    names = expand(text) if "{" in text else [text]
    if names != [text]:
        missing = [n for n in names if not Path(n).is_file()]
        if missing:
            raise LocationError(missing_names_message(text, where, names, missing, _folder_holds))
        return [_local_shard(Path(n), where) for n in names]
    if _is_glob(text):
        matches = sorted(glob.glob(text))
        if not matches:
            raise LocationError(f"no file matches {text!r}{where}{_folder_holds(text)}")
        return [_local_shard(Path(m), where, f"by glob {text!r}") for m in matches]
    raise LocationError(f"shard {text!r}{where} does not exist{_folder_holds(text)}")


def _folder_shards(folder: Path, where: str) -> list[Path]:
    tars = sorted(p for p in folder.glob("*.tar") if p.is_file())
    shards = tars or sorted(p for p in folder.glob("*.parquet") if p.is_file())
    if not shards:
        found = sorted({p.suffix or p.name for p in folder.iterdir()})
        raise LocationError(f"{folder}{where} holds no .tar or .parquet shard (found: {found or 'nothing'})")
    return shards


def _local_shard(path: Path, where: str, found_by: str | None = None) -> LocalShard:
    if found_by is not None:
        refuse_pipe_name(path.name, found_by)
    kind = KINDS.get(path.suffix)
    if kind is None:
        raise LocationError(f"{path}{where} is not a shard: expected a .tar (WebDataset) or .parquet file")
    if not path.is_file():
        raise LocationError(f"shard {path}{where} is not a regular file")
    return LocalShard(url=str(path.resolve()), name=path.stem, kind=kind)


def _pipe_shard(text: str) -> PipeShard:
    """``pipe:CMD``, named after the last word of the command that is a ``.tar`` file (a URL's query dropped)."""
    command = text[len(PIPE_PREFIX) :]
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: the shell will say so when it runs; the words still name the file
        words = command.split()
    named = [f for f in (PurePosixPath(w.split("?", 1)[0]) for w in words) if f.suffix in KINDS]
    if not named:
        raise LocationError(
            f"cannot name the output of {text!r}: no word of the command ends in .tar (the shard's file name "
            "names its output file)"
        )
    if named[-1].suffix == ".parquet":
        raise LocationError(
            f"{text!r} names a Parquet file: Parquet is read where its footer says and needs a file that can "
            "seek, and a pipe: gives a stream; give its path or URL instead"
        )
    return PipeShard(url=text, name=named[-1].stem, kind="webdataset")


def _folder_holds(text: str) -> str:
    """The nearest folder above ``text`` that exists and what it holds, for an error message."""
    folder = Path(text).parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        found = sorted({p.suffix or p.name for p in folder.iterdir()})
    except OSError:
        return ""
    return f"; {folder} holds {found if found else 'nothing'}"


def _is_glob(text: str) -> bool:
    return any(c in text for c in _GLOB_CHARS)


def _protocol(text: str) -> str | None:
    head, sep, _ = text.partition("://")
    return head if sep and head and all(c.isalnum() or c in "+-." for c in head) else None


def _local(text: str) -> str:
    """A ``file://`` URL as a local path; any other text as it is."""
    protocol = _protocol(text)
    return text[len(protocol) + 3 :] if protocol in _LOCAL_PROTOCOLS else text
