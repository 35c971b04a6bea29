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
    """What differs between two identities, in words (``["size 120 -> 240 bytes", "content"]``); empty when equal.

    Identities are ``file_identity``'s, or a row-source shard's (``capeval.corpus.row_sources``): any other entry
    that differs is named by its key.
    """
    words = {"mtime_ns": "modification time", "sampled_sha256": "content", "sha256": "content"}
    changes = []
    where = {
        "path",
        "folder",
        "bytes",
    }  # where a shard lies is not what it holds: a moved shard is the same one
    for key in sorted((set(recorded) | set(current)) - where):
        before, now = recorded.get(key), current.get(key)
        if before == now:
            continue
        if key in ("size", "rows", "images"):
            changes.append(f"{key} {before} -> {now}")
        else:
            changes.append(words.get(key, key))
    return changes
