"""The identity of an input file, recorded with what was computed from it, so a resumed run knows it is the same.

Size and modification time catch a file rewritten or a download completed; a SHA-256 of its first and last
``SAMPLE_BYTES`` (with the size) catches a file replaced by another of the same size whose time was kept
(``cp -p``, ``rsync -a`` from another corpus). Hashing whole shards (hundreds of MB each) on every resume would cost
more than the check is worth; the sampled hash costs two reads whatever the size.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

SAMPLE_BYTES = 1024 * 1024


def file_identity(path: str | os.PathLike) -> dict[str, int | str]:
    """``{"size", "mtime_ns", "sampled_sha256"}`` of a file (its path is recorded by the caller, as it sees fit).

    Raises:
        OSError: the file cannot be read.
    """
    path = Path(path)
    st = path.stat()
    digest = hashlib.sha256(f"{st.st_size}|".encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(SAMPLE_BYTES))
        if st.st_size > SAMPLE_BYTES:
            fh.seek(max(SAMPLE_BYTES, st.st_size - SAMPLE_BYTES))
            digest.update(fh.read(SAMPLE_BYTES))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sampled_sha256": digest.hexdigest()}


def identity_changes(recorded: dict, current: dict) -> list[str]:
    """What differs between two identities of a shard, in words (``["size 120 -> 240 bytes", "content"]``); empty
    when equal.

    Identities are ``file_identity``'s, a remote file's or a command's (``capeval.corpus.location_kinds``: size
    and ETag, modification time or checksum; the command), or a row-source shard's (``capeval.corpus.row_sources``).
    Where a shard lies (path, folder, URL, byte offsets) is not what it holds, so a moved shard is the same one;
    a filesystem that now checks another way (``checked_by``) is reported only when nothing else differs.
    """
    words = {
        "mtime_ns": "modification time",
        "sampled_sha256": "content",
        "sha256": "content",
        "command": "command",
        "content_sha256": "content",
    }
    valued = {
        "size": "size",
        "rows": "rows",
        "images": "images",
        "etag": "ETag",
        "mtime": "modification time",
        "checksum": "checksum",
        "first_line": "first line",
        "header": "header",
        "image_root": "image root",
    }
    where = {"path", "folder", "bytes", "url", "checked_by"}
    changes = []
    for key in sorted((set(recorded) | set(current)) - where, key=lambda k: (k not in valued, k)):
        before, now = recorded.get(key), current.get(key)
        if before == now:
            continue
        if key in valued:
            changes.append(f"{valued[key]} {before} -> {now}" + (" bytes" if key == "size" else ""))
        else:
            changes.append(words.get(key, key))
    if not changes and recorded.get("checked_by") != current.get("checked_by"):
        changes.append(f"checked by {recorded.get('checked_by')} -> {current.get('checked_by')}")
    return changes
