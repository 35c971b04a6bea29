"""An on-disk embedding cache that survives crashes: SQLite, keyed by content hash and model signature.

Corpus scoring stores every image and caption embedding here as soon as its batch is encoded, so a run
killed at any point (SIGKILL included) loses at most the batch in flight, and a rerun, or a later run with
another threshold or output folder, encodes nothing twice. Keys are ``blake2b(namespace, content)``:

- the namespace names everything that changes an embedding: the backbone (``Backbone.name``, extra weights),
  its dtype and preprocessing constants, and for captions the prompt prefix and context length;
- the content is a hash of the image's bytes (file bytes, ``datasets`` Image bytes) or of what the model sees
  of an in-memory image (mode, size, palette, layout and pixels), never a path or an mtime, and of the caption.

SQLite in WAL mode commits each batch as one transaction: readers never see half a batch, several processes
(sharded runs) can share one file, and an application crash never corrupts it. Inputs that cannot be
decoded are remembered too (as an error message), so a rerun reports them without reading them again.

Nothing read back is trusted blindly: an entry whose blob is not a finite, unit-length float32 vector of the
model's dimension (a truncated or overwritten blob, NaN, infinity) is reported with its key in a warning that
names the cache file, deleted, and encoded again; it never reaches a score. A file that is not SQLite, or an
SQLite database that is not this cache (other tables, triggers, views), is refused with a ``CacheFileError`` that
names it and says what to do; capeval never deletes or rebuilds a cache file itself, since one cache may be
shared by many runs (``--cache``) and the path may name someone else's file.
"""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from capeval.clip.backbones import Backbone
from capeval.diagnostics.categories import DamagedFileWarning, user_stacklevel

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS embeddings (key BLOB PRIMARY KEY, vec BLOB, error TEXT) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS namespaces (ns BLOB PRIMARY KEY, description TEXT) WITHOUT ROWID",
)
_COLUMNS = {"embeddings": ["key", "vec", "error"], "namespaces": ["ns", "description"]}
_LOOKUP_CHUNK = 500  # SQLite's default limit on bound parameters is 999 on older builds
# Stored embeddings are L2-normalised in float32 (clip.image_encoding, clip.text_encoding): their norms are 1
# within ~1e-6, so a norm further than this from 1 is damage, not rounding.
NORM_TOLERANCE = 1e-3
_LISTED = 5  # damaged entries named one by one in a warning; the rest are counted


class CacheFileError(ValueError):
    """The embedding cache file cannot be used (not SQLite, damaged, not a capeval cache, locked too long)."""


def blob_problem(vec: Any, error: Any, dim: int | None, allow_errors: bool = True) -> str | None:
    """What is wrong with one stored entry, or None: a unit-length float32 vector of ``dim`` values, or an error.

    Args:
        vec: the stored blob.
        error: the stored error message.
        dim: the model's embedding dimension (None: any).
        allow_errors: whether an error message may stand in for the embedding (images, not captions).
    """
    if error is not None:
        if vec is not None or not isinstance(error, str) or not allow_errors:
            return "an error entry where an embedding was expected"
        return None
    if not isinstance(vec, bytes):
        return f"a {type(vec).__name__} where an embedding blob was expected"
    if not vec or len(vec) % 4 or (dim is not None and len(vec) != 4 * dim):
        expected = f"{4 * dim} (dimension {dim})" if dim is not None else "a non-zero multiple of 4"
        return f"a blob of {len(vec)} bytes where {expected} were expected"
    arr = np.frombuffer(vec, dtype=np.float32)
    if not np.isfinite(arr).all():
        return "NaN or infinity in the embedding"
    norm = math.sqrt(float(np.dot(arr.astype(np.float64), arr.astype(np.float64))))
    if abs(norm - 1.0) > NORM_TOLERANCE:
        return f"norm {norm:.6g} where stored embeddings have norm 1"
    return None


def image_namespace(backbone: Backbone) -> str:
    """Everything that changes an image embedding: weights, dtype and preprocessing."""
    return (
        f"image|model={backbone.name}|weights={backbone.weights}|dtype={backbone.dtype_name}"
        f"|size={backbone.image_size}|mean={tuple(backbone.image_mean)}|std={tuple(backbone.image_std)}"
    )


def text_namespace(backbone: Backbone, prefix: str | None) -> str:
    """Everything that changes a caption embedding: weights, dtype, prompt prefix, context length, lower-casing where
    capeval adds it (SigLIP 2), and for OpenCLIP files open_clip's reading of special-token text (each named only
    where it applies, so every other model's stored embeddings keep their keys, and no entry cached before capeval
    read captions that way is reused)."""
    lowercase = "|lowercase=ascii" if backbone.lowercase else ""
    namespace = (
        f"text|model={backbone.name}|weights={backbone.weights}|dtype={backbone.dtype_name}"
        f"|prefix={prefix!r}|context={backbone.context_length}{lowercase}"
    )
    if backbone.family.special_text != "openai":
        namespace += f"|special_text={backbone.family.special_text}"
    return namespace


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

    Files and ``datasets`` Image dicts are hashed by their bytes (the encoded file), in-memory images by what
    the model sees (``capeval.clip.images.pixel_digest``: mode, size, palette and pixels of a PIL image; dtype,
    channels-last shape and values of an array or tensor), in a separate hash domain, so no file's bytes can
    take the key of some pixels. The same picture given as a file and as pixels gets two keys, which costs one
    extra encoding, never a wrong embedding.

    Raises:
        ValueError: a file that cannot be read, or an array that is not an image.
        TypeError: an unsupported input.
    """
    if isinstance(image, (str, os.PathLike)):
        return hash_file(os.path.expanduser(os.fspath(image)))
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return hash_bytes(image["bytes"])
        if image.get("path"):
            return hash_file(os.path.expanduser(image["path"]))
        raise ValueError(f"a datasets Image dict needs 'bytes' or 'path', got keys {sorted(image)}")
    from PIL import Image

    from capeval.clip.images import pixel_digest

    if isinstance(image, (Image.Image, np.ndarray, torch.Tensor)):
        return pixel_digest(image)
    raise TypeError(f"cannot hash an image of type {type(image).__name__}")


class EmbeddingCache:
    """L2-normalised embeddings by (namespace, content hash), persisted in one SQLite file.

    Args:
        path: the database file (created with its folder when missing).
        timeout: seconds to wait for another process holding the write lock.

    Raises:
        CacheFileError: ``path`` is not SQLite, is damaged, or is another program's database.
    """

    def __init__(self, path: str | os.PathLike, timeout: float = 120.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.dropped = 0  # damaged entries found, deleted and left to be encoded again
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        try:
            with self._guard():
                # Read-only first: a file that is not this cache is refused before anything is written into it.
                self._retry(self._check_schema)
                # Switching to WAL needs an exclusive lock, and SQLite answers "locked" at once (no busy wait)
                # when a sibling process opening the same file holds it: retry, as for the schema.
                self._retry(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
                # NORMAL in WAL mode: a killed process never loses a committed batch (a power cut may lose the last).
                self._db.execute("PRAGMA synchronous=NORMAL")
                for statement in _SCHEMA:
                    self._retry(lambda s=statement: self._db.execute(s))
        except BaseException:
            self._db.close()
            raise
        self._ns: dict[str, bytes] = {}

    def _check_schema(self) -> None:
        objects = self._db.execute("SELECT type, name FROM sqlite_master").fetchall()
        foreign = [f"{kind} {name!r}" for kind, name in objects if kind != "table" or name not in _COLUMNS]
        for kind, name in objects:
            if kind == "table" and name in _COLUMNS:
                columns = [row[1] for row in self._db.execute(f"PRAGMA table_info({name})")]
                if columns != _COLUMNS[name]:
                    foreign.append(f"table {name!r} with columns {columns}")
        if foreign:
            raise CacheFileError(
                f"{self.path} is an SQLite database but not a capeval embedding cache (it holds "
                f"{', '.join(sorted(foreign)[:_LISTED])}): capeval does not write into it; give another cache file "
                "(cache=... / --cache)"
            )

    @contextmanager
    def _guard(self):
        """SQLite's errors as ``CacheFileError``s that name the file and say what to do."""
        try:
            yield
        except sqlite3.OperationalError as err:
            if "locked" in str(err) or "busy" in str(err):
                raise CacheFileError(
                    f"{self.path} stayed locked by another process for over {self.timeout:g} s ({err}): "
                    "a run sharing this cache holds it; try again when it has finished"
                ) from err
            raise self._unusable(err) from err
        except sqlite3.DatabaseError as err:
            raise self._unusable(err) from err

    def _unusable(self, err: Exception) -> CacheFileError:
        return CacheFileError(
            f"{self.path} is not a usable embedding cache ({err}): move it away or delete it to start a new "
            "cache (what it held is encoded again), or give another cache file (cache=... / --cache)"
        )

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
            with self._guard():
                self._retry(
                    lambda: self._db.execute(
                        "INSERT OR IGNORE INTO namespaces VALUES (?, ?)", (ns, description)
                    )
                )
            self._ns[description] = ns
        return ns

    @staticmethod
    def key(ns: bytes, content: bytes) -> bytes:
        return hashlib.blake2b(ns + content, digest_size=16).digest()

    def get_many(
        self,
        ns: bytes,
        contents: Iterable[bytes],
        dim: int | None = None,
        allow_errors: bool = True,
        describe: Callable[[bytes], str] | None = None,
    ) -> dict[bytes, torch.Tensor | str]:
        """Stored entries among ``contents``: content hash -> (D,) float32 tensor, or the error message.

        A damaged entry (see ``blob_problem``) is left out, deleted from the file and counted in ``dropped``,
        with a warning that names the cache file and each entry's key, so the caller encodes it again.

        Args:
            ns: the namespace.
            contents: content hashes to look up.
            dim: the model's embedding dimension; a blob of another length is damaged.
            allow_errors: whether remembered errors are valid entries here (images: yes; captions: no).
            describe: names the input of a content hash in the warning (an image path, a caption).
        """
        by_key = {self.key(ns, c): c for c in contents}
        keys = list(by_key)
        found: dict[bytes, torch.Tensor | str] = {}
        damaged: list[tuple[bytes, str]] = []
        with self._guard():
            for start in range(0, len(keys), _LOOKUP_CHUNK):
                chunk = keys[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, vec, error FROM embeddings WHERE key IN ({marks})", chunk
                ).fetchall()
                for key, vec, error in rows:
                    content = by_key[key]
                    problem = blob_problem(vec, error, dim, allow_errors)
                    if problem is not None:
                        damaged.append((key, problem))
                    elif error is not None:
                        found[content] = error
                    else:
                        found[content] = torch.from_numpy(np.frombuffer(vec, dtype=np.float32).copy())
            if damaged:
                self._drop(damaged, lambda key: describe(by_key[key]) if describe else None)
        return found

    def _drop(self, damaged: list[tuple[bytes, str]], describe: Callable[[bytes], str | None]) -> None:
        """Delete damaged entries (their inputs are encoded again) and say so, naming the file and the keys."""

        def delete():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("DELETE FROM embeddings WHERE key = ?", [(k,) for k, _ in damaged])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

        self._retry(delete)
        self.dropped += len(damaged)
        listed = []
        for key, problem in damaged[:_LISTED]:
            what = describe(key)
            listed.append(f"key {key.hex()}{f' ({what})' if what else ''}: {problem}")
        more = f"; and {len(damaged) - _LISTED} more" if len(damaged) > _LISTED else ""
        n = len(damaged)
        warnings.warn(
            f"{self.path}: {n} damaged cache entr{'y' if n == 1 else 'ies'} deleted and encoded again "
            f"({'; '.join(listed)}{more})",
            DamagedFileWarning,
            stacklevel=user_stacklevel(),
        )

    def put_many(
        self,
        ns: bytes,
        contents: Sequence[bytes],
        embeddings: torch.Tensor | None = None,
        errors: Sequence[str] | None = None,
    ) -> None:
        """Store one batch in one transaction: embeddings (N, D), or error messages for inputs that failed.

        An embedding that ``get_many`` would refuse (NaN or infinity from an overflowing model, a norm other than
        1) is not stored: the input is encoded again next time instead of being dropped as damaged.
        """
        if embeddings is not None:
            arr = embeddings.detach().float().cpu().numpy()
            rows = [(self.key(ns, c), arr[i].tobytes(), None) for i, c in enumerate(contents)]
            rows = [row for row in rows if blob_problem(row[1], None, None) is None]
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

        with self._guard():
            self._retry(write)

    def count(self) -> int:
        """Entries stored, all namespaces together (embeddings and remembered errors)."""
        with self._guard():
            return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
