"""The kinds of shard location (a local file, a file reached through fsspec, a ``pipe:`` command), what each
opens, and the identity a rerun compares (``capeval.corpus.locations`` lists them from what the user names).

A local file's identity is ``capeval.corpus.file_identity`` with its resolved path, as
``shard_outputs.input_record`` records it; a remote file's is its size plus its ETag (S3, GCS), or, where the
filesystem reports none, its modification time, or else fsspec's checksum of what the filesystem reports about it
(``checked_by`` says which); a ``pipe:`` shard's is its command: its output cannot be checked without running it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from capeval.corpus.file_identity import file_identity

PIPE_PREFIX = "pipe:"
KINDS = {".tar": "webdataset", ".parquet": "parquet"}


class LocationError(ValueError):
    """A source that names no shard, or a location refused; the message names the pattern and what was found."""


@dataclass(frozen=True)
class ShardLocation:
    """One input shard: ``name`` (its file stem, ``00000``) names its output; ``kind`` is "webdataset" or
    "parquet"; ``url`` is an absolute path, a URL with its protocol, or ``pipe:CMD``."""

    url: str
    name: str
    kind: str

    @property
    def path(self) -> Path | None:
        """The local file, or None for a remote or ``pipe:`` shard."""
        return None

    def open(self) -> BinaryIO:
        """A binary file object open for reading at the shard's first byte; the caller closes it."""
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """What a shard's output records of its input, for ``file_identity.identity_changes`` on a rerun."""
        raise NotImplementedError


@dataclass(frozen=True)
class LocalShard(ShardLocation):
    @property
    def path(self) -> Path:
        return Path(self.url)

    def open(self) -> BinaryIO:
        return open(self.url, "rb")

    def identity(self) -> dict[str, Any]:
        return {"path": self.url, **file_identity(self.url)}


@dataclass(frozen=True)
class RemoteShard(ShardLocation):
    """A file reached through fsspec; ``storage_options`` are the filesystem's (endpoint, credentials)."""

    storage_options: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def filesystem(self):
        """``(fsspec filesystem, path within it)``."""
        import fsspec

        return fsspec.core.url_to_fs(self.url, **dict(self.storage_options))

    def open(self) -> BinaryIO:
        fs, path = self.filesystem()
        return fs.open(path, "rb")

    def identity(self) -> dict[str, Any]:
        fs, path = self.filesystem()
        fs.invalidate_cache(path)  # a listing this process cached must not hide an overwrite
        info = fs.info(path)
        record: dict[str, Any] = {"url": self.url, "size": info.get("size")}
        etag = info.get("ETag") or info.get("etag")
        if etag:
            return {**record, "etag": str(etag).strip('"'), "checked_by": "etag"}
        try:
            return {**record, "mtime": fs.modified(path).isoformat(), "checked_by": "mtime"}
        except (NotImplementedError, AttributeError, KeyError, TypeError, ValueError):
            return {**record, "checksum": str(fs.checksum(path)), "checked_by": "checksum of the file's info"}


@dataclass(frozen=True)
class PipeShard(ShardLocation):
    """``pipe:CMD``: the command's standard output, read once, forward."""

    @property
    def command(self) -> str:
        return self.url[len(PIPE_PREFIX) :]

    def open(self) -> BinaryIO:
        from capeval.corpus.pipe_stream import PipeStream

        return PipeStream(self.command)

    def identity(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "checked_by": "nothing: a command's output cannot be checked without running it",
        }


def refuse_pipe_name(name: str, found_by: str) -> None:
    """Refuse a file named ``pipe:...`` that a glob or a listing found: only a command-line argument is a command.

    Raises:
        LocationError: the name starts with ``pipe:``.
    """
    if name.startswith(PIPE_PREFIX):
        raise LocationError(
            f"{name!r} was found {found_by} and its name starts with 'pipe:': pipe: locations are accepted only "
            "as command-line arguments, so a file named so is refused rather than risk being taken for a command"
        )
