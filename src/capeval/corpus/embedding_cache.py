"""An on-disk embedding cache that survives crashes: SQLite, keyed by content hash and model signature.

Corpus scoring stores every image and caption embedding here as soon as its batch is encoded, so a run
killed at any point (SIGKILL included) loses at most the batch in flight, and a rerun, or a later run with
another threshold or output folder, encodes nothing twice. Keys are ``blake2b(namespace, content)``:

- the namespace names everything that changes an embedding: the backbone (``Backbone.name``, extra weights),
  its dtype and preprocessing constants, and for captions the prompt prefix and context length;
- the content is a hash of the image's bytes (file bytes, ``datasets`` Image bytes) or decoded pixels, never a
  path or an mtime, and of the caption string.

SQLite in WAL mode commits each batch as one transaction: readers never see half a batch, several processes
(sharded runs) can share one file, and an application crash never corrupts it. Inputs that cannot be
decoded are remembered too (as an error message), so a rerun reports them without reading them again.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from capeval.clip.backbones import Backbone

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS embeddings (key BLOB PRIMARY KEY, vec BLOB, error TEXT) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS namespaces (ns BLOB PRIMARY KEY, description TEXT) WITHOUT ROWID",
)
_LOOKUP_CHUNK = 500  # SQLite's default limit on bound parameters is 999 on older builds


def image_namespace(backbone: Backbone) -> str:
    """Everything that changes an image embedding: weights, dtype and preprocessing."""
    return (
        f"image|model={backbone.name}|weights={backbone.weights}|dtype={backbone.dtype_name}"
        f"|size={backbone.image_size}|mean={tuple(backbone.image_mean)}|std={tuple(backbone.image_std)}"
    )


def text_namespace(backbone: Backbone, prefix: str | None) -> str:
    """Everything that changes a caption embedding: weights, dtype, prompt prefix and context length."""
    return (
        f"text|model={backbone.name}|weights={backbone.weights}|dtype={backbone.dtype_name}"
        f"|prefix={prefix!r}|context={backbone.context_length}"
    )


def hash_bytes(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def hash_text(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=b"capeval-text").digest()


def hash_file(path: str | os.PathLike) -> bytes:
    """blake2b of a file's bytes (its content, not its name or mtime)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def content_hash(image: Any) -> bytes:
    """Content identity of an image input, stable across runs and machines.

    Files and ``datasets`` Image dicts are hashed by their bytes (the encoded file), in-memory images by
    their decoded pixels (mode, size, dtype and values). The same picture given as a file and as pixels
    gets two keys, which costs one extra encoding, never a wrong embedding.

    Raises:
        ValueError: a file that cannot be read.
        TypeError: an unsupported input.
    """
    from PIL import Image

    if isinstance(image, (str, os.PathLike)):
        return hash_file(os.path.expanduser(os.fspath(image)))
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return hash_bytes(image["bytes"])
        if image.get("path"):
            return hash_file(os.path.expanduser(image["path"]))
        raise ValueError(f"a datasets Image dict needs 'bytes' or 'path', got keys {sorted(image)}")
    if isinstance(image, Image.Image):
        head = f"pil|{image.mode}|{image.size}".encode()
        return hash_bytes(head + image.tobytes())
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        arr = np.ascontiguousarray(image)
        head = f"array|{arr.dtype}|{arr.shape}".encode()
        return hash_bytes(head + arr.tobytes())
    raise TypeError(f"cannot hash an image of type {type(image).__name__}")


class EmbeddingCache:
    """Embeddings by (namespace, content hash), persisted in one SQLite file.

    Args:
        path: the database file (created with its folder when missing).
        timeout: seconds to wait for another process holding the write lock.
    """

    def __init__(self, path: str | os.PathLike, timeout: float = 120.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        # Switching to WAL needs an exclusive lock, and SQLite answers "locked" at once (no busy wait) when a
        # sibling process opening the same file holds it: retry, as for the schema.
        self._retry(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
        # NORMAL in WAL mode: a killed process never loses a committed batch (a power cut may lose the last).
        self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self._retry(lambda s=statement: self._db.execute(s))
        self._ns: dict[str, bytes] = {}

    def _retry(self, fn, attempts: int = 20):
        # WAL set-up and schema creation can meet a lock held by a sibling process starting at the same time.
        for attempt in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        return None

    def namespace(self, description: str) -> bytes:
        """The 16-byte id of a namespace, recorded with its description for inspection."""
        ns = self._ns.get(description)
        if ns is None:
            ns = hashlib.blake2b(description.encode("utf-8"), digest_size=16).digest()
            self._retry(
                lambda: self._db.execute("INSERT OR IGNORE INTO namespaces VALUES (?, ?)", (ns, description))
            )
            self._ns[description] = ns
        return ns

    @staticmethod
    def key(ns: bytes, content: bytes) -> bytes:
        return hashlib.blake2b(ns + content, digest_size=16).digest()

    def get_many(self, ns: bytes, contents: Iterable[bytes]) -> dict[bytes, torch.Tensor | str]:
        """Stored entries among ``contents``: content hash -> (D,) float32 tensor, or the error message."""
        by_key = {self.key(ns, c): c for c in contents}
        keys = list(by_key)
        found: dict[bytes, torch.Tensor | str] = {}
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT key, vec, error FROM embeddings WHERE key IN ({marks})", chunk
            ).fetchall()
            for key, vec, error in rows:
                content = by_key[key]
                if error is not None:
                    found[content] = error
                else:
                    found[content] = torch.from_numpy(np.frombuffer(vec, dtype=np.float32).copy())
        return found

    def put_many(
        self,
        ns: bytes,
        contents: Sequence[bytes],
        embeddings: torch.Tensor | None = None,
        errors: Sequence[str] | None = None,
    ) -> None:
        """Store one batch in one transaction: embeddings (N, D), or error messages for inputs that failed."""
        if embeddings is not None:
            arr = embeddings.detach().float().cpu().numpy()
            rows = [(self.key(ns, c), arr[i].tobytes(), None) for i, c in enumerate(contents)]
        else:
            rows = [(self.key(ns, c), None, e) for c, e in zip(contents, errors or (), strict=True)]
        if not rows:
            return

        def write():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?)", rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

        self._retry(write)

    def count(self) -> int:
        """Entries stored, all namespaces together (embeddings and remembered errors)."""
        return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
