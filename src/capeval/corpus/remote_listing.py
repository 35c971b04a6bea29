"""Shards behind an fsspec URL (``s3://``, ``gs://``, ``hf://``, ``memory://``, ...): a file, a folder listed, a
glob matched, a brace pattern whose names are checked with one listing per folder; an error names the URL and the
nearest folder that exists, with what it holds, or says that the bucket itself does not exist."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from capeval.corpus.brace_patterns import expand, missing_names_message
from capeval.corpus.location_kinds import KINDS, LocationError, RemoteShard, refuse_pipe_name

_GLOB_CHARS = "*?["
_LISTED = 20  # entries of a folder quoted in an error


# fsspec's filesystems over another filesystem or a file (a prefix, a cache, an archive, a reference set): a URL
# alone cannot say what they wrap, and they failed with errors naming nothing.
WRAPPER_PROTOCOLS = (
    "dir",
    "reference",
    "filecache",
    "simplecache",
    "blockcache",
    "cached",
    "zip",
    "tar",
    "libarchive",
)


def remote_locations(url: str, where: str, options: dict[str, Any]) -> list[RemoteShard]:
    """The shards ``url`` names, through fsspec with ``options``.

    Raises:
        LocationError: nothing there, a name missing, a file that is no shard, a filesystem that cannot be used
            (unknown, a wrapper, a library missing, refused or unreachable); naming the URL and what was found.
    """
    protocol = url.split("://", 1)[0]
    if protocol in ("s3", "s3a"):
        from capeval.diagnostics.extras import require_extra

        require_extra("remote", f"{protocol}:// shards")
    if protocol in WRAPPER_PROTOCOLS:
        raise LocationError(
            f"{url!r}{where}: {protocol}:// is a filesystem over another one (fsspec's), which a URL alone cannot "
            "set up: give the URL of the files themselves (s3://..., gs://..., a local path)"
        )
    try:
        return _remote_locations(url, where, options)
    except LocationError:
        raise
    except (
        Exception
    ) as err:  # fsspec's filesystems fail in their own ways: unknown, a library missing, unreachable
        raise LocationError(
            f"{url!r}{where} cannot be listed through fsspec's {protocol}:// filesystem "
            f"({type(err).__name__}: {err})"
        ) from err


def _remote_locations(url: str, where: str, options: dict[str, Any]) -> list[RemoteShard]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **options)
    names = expand(url) if "{" in url else [url]
    if names != [url]:
        return _named(fs, url, names, where, options)
    if any(c in path for c in _GLOB_CHARS):
        matches = sorted(
            p for p, info in fs.glob(path, detail=True).items() if info.get("type") != "directory"
        )
        if not matches:
            raise LocationError(f"no file matches {url!r}{where}{_holds(fs, path)}")
        return [_shard(fs, p, options, where, f"by glob {url!r}") for p in matches]
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise LocationError(f"shard {url!r}{where} does not exist{_holds(fs, path)}") from None
    if info.get("type") == "directory":
        return _listed(fs, path, url, where, options)
    return [_shard(fs, path, options, where)]


def _named(fs, pattern: str, names: list[str], where: str, options) -> list[RemoteShard]:
    """The shards of a brace pattern: each name must exist; each folder is listed once, not each name asked."""
    paths = [fs._strip_protocol(name) for name in names]
    present: dict[str, set[str]] = {}
    for parent in dict.fromkeys(fs._parent(p) for p in paths):
        try:
            present[parent] = {_bare(entry) for entry in fs.ls(parent, detail=False)}
        except FileNotFoundError:
            present[parent] = set()
    missing = [name for name, p in zip(names, paths, strict=True) if _bare(p) not in present[fs._parent(p)]]
    if missing:
        raise LocationError(
            missing_names_message(pattern, where, names, missing, lambda n: _holds(fs, fs._strip_protocol(n)))
        )
    return [_shard(fs, p, options, where) for p in paths]


def _listed(fs, path: str, url: str, where: str, options) -> list[RemoteShard]:
    entries = [e for e in fs.ls(path, detail=True) if e.get("type") != "directory"]
    names = sorted(e["name"] for e in entries)
    tars = [n for n in names if n.endswith(".tar")]
    shards = tars or [n for n in names if n.endswith(".parquet")]
    if not shards:
        raise LocationError(
            f"{url}{where} holds no .tar or .parquet shard (found: {_summary(fs, path) or 'nothing'})"
        )
    return [_shard(fs, p, options, where, f"in the listing of {url!r}") for p in shards]


def _shard(fs, path: str, options, where: str, found_by: str | None = None) -> RemoteShard:
    name = PurePosixPath(path).name
    if found_by is not None:
        refuse_pipe_name(name, found_by)
    suffix = PurePosixPath(name).suffix
    url = fs.unstrip_protocol(path)
    if suffix not in KINDS:
        raise LocationError(f"{url}{where} is not a shard: expected a .tar (WebDataset) or .parquet file")
    return RemoteShard(url=url, name=PurePosixPath(name).stem, kind=KINDS[suffix], storage_options=options)


def _holds(fs, path: str) -> str:
    """The nearest folder above ``path`` that exists and what it holds, or that the top of the path (an S3 or
    GCS bucket) does not exist, for an error message."""
    chain = []
    parent = fs._parent(path)
    while parent and parent not in chain and parent.strip("/"):
        chain.append(parent)
        parent = fs._parent(parent)
    for folder in chain:
        try:
            exists = fs.exists(folder)
        except PermissionError as err:
            return f"; {fs.unstrip_protocol(folder)} cannot be read with these credentials ({err})"
        if exists:
            return f"; {fs.unstrip_protocol(folder)} holds {_summary(fs, folder) or 'nothing'}"
    top = chain[-1] if chain else path
    return (
        f"; {fs.unstrip_protocol(top)} does not exist (for s3:// and gs://: no bucket of that name, or none "
        "these credentials can see)"
    )


def _summary(fs, folder: str) -> str:
    """The suffixes of the files in ``folder`` and its subfolders' names (``['.json', '.tar', 'part-1/']``)."""
    try:
        entries = fs.ls(folder, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return ""
    found = sorted(
        {
            PurePosixPath(e["name"]).name + "/"
            if e.get("type") == "directory"
            else (PurePosixPath(e["name"]).suffix or PurePosixPath(e["name"]).name)
            for e in entries
        }
    )
    more = f" and {len(found) - _LISTED} more" if len(found) > _LISTED else ""
    return f"{found[:_LISTED]}{more}" if found else ""


def _bare(path: str) -> str:
    return path.rstrip("/").lstrip("/")
