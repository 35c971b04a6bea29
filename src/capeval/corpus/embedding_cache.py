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
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


# -- encoding through the cache --------------------------------------------------------------------------------
@dataclass
class EncodeCounters:
    """What a run took from the cache and what it encoded (distinct items)."""

    images_encoded: int = 0
    image_cache_hits: int = 0
    texts_encoded: int = 0
    text_cache_hits: int = 0


class CachedEncoder:
    """Image and caption embeddings from the cache, else encoded in batches cut independently of the cache.

    Items missing from the cache are encoded in batches of ``batch_size`` over their first-occurrence order,
    and each batch is committed before the next starts. After a crash the missing items are a suffix of that
    list, so a rerun cuts the same batches and produces the same floats as an uninterrupted run.

    Args:
        backbone: the model the embeddings come from.
        prefix: prompt joined before captions (part of the caption namespace).
        cache: where embeddings are stored.
        batch_size: items per forward pass.
        workers: threads hashing and decoding images.
    """

    def __init__(
        self, backbone: Backbone, prefix: str | None, cache: EmbeddingCache, batch_size: int, workers: int
    ):
        self.backbone = backbone
        self.prefix = prefix
        self.cache = cache
        self.batch_size = batch_size
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.counters = EncodeCounters()
        self.ns_image = cache.namespace(image_namespace(backbone))
        self.ns_text = cache.namespace(text_namespace(backbone, prefix))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def hash_images(self, images: Sequence) -> list[tuple[bytes | None, str | None]]:
        """``(content hash, None)`` per image, or ``(None, reason)`` for one that cannot be read."""

        def one(image):
            try:
                return content_hash(image), None
            except (OSError, ValueError, TypeError) as err:
                if isinstance(image, (str, os.PathLike)):
                    return (
                        None,
                        f"image {os.fspath(image)!r} cannot be read: {getattr(err, 'strerror', None) or err}",
                    )
                return None, str(err)

        return list(self.pool.map(one, images))

    def _prepare(self, image, index: int):
        from capeval.clip.images import preprocess_image

        try:
            return preprocess_image(image, index, self.backbone.image_size), None
        except (ValueError, TypeError, OSError) as err:
            return None, str(err).replace(f"image {index}", "image", 1)

    def image_vectors(self, items: Sequence[tuple[bytes, Any]]) -> dict[bytes, torch.Tensor | str]:
        """Embeddings by content hash for ``(content hash, image)`` pairs; an undecodable image maps to its error.

        Decoding failures are stored too: the same bytes fail the same way, and a rerun reports them unread.
        """
        from capeval.clip.image_encoding import encode_images

        first: dict[bytes, tuple[int, Any]] = {}
        for index, (content, image) in enumerate(items):
            first.setdefault(content, (index, image))
        found = self.cache.get_many(self.ns_image, first)
        self.counters.image_cache_hits += len(found)
        missing = [c for c in first if c not in found]
        batches = [missing[s : s + self.batch_size] for s in range(0, len(missing), self.batch_size)]

        def submit(batch):
            return [self.pool.submit(self._prepare, first[c][1], first[c][0]) for c in batch]

        ahead = submit(batches[0]) if batches else []
        for k, batch in enumerate(batches):
            # Decode the next batch while this one runs through the model.
            current, ahead = ahead, (submit(batches[k + 1]) if k + 1 < len(batches) else [])
            prepared = [f.result() for f in current]
            good = [(c, arr) for c, (arr, err) in zip(batch, prepared, strict=True) if err is None]
            bad = [(c, err) for c, (arr, err) in zip(batch, prepared, strict=True) if err is not None]
            if good:
                # The arrays are already CLIP-sized: encode_images' preprocessing leaves their pixels as they are.
                emb = encode_images(
                    self.backbone,
                    [arr for _, arr in good],
                    batch_size=len(good),
                    num_workers=1,
                    progress=False,
                )
                self.cache.put_many(self.ns_image, [c for c, _ in good], emb)
                found.update({c: emb[i] for i, (c, _) in enumerate(good)})
                self.counters.images_encoded += len(good)
            if bad:
                self.cache.put_many(self.ns_image, [c for c, _ in bad], errors=[e for _, e in bad])
                found.update(dict(bad))
        return found

    def text_vectors(self, texts: Sequence[str]) -> dict[bytes, torch.Tensor]:
        """Embeddings by ``hash_text(caption)`` (the prefix is joined when encoding)."""
        from capeval.clip.text_encoding import encode_texts

        first: dict[bytes, str] = {}
        for t in texts:
            first.setdefault(hash_text(t), t)
        found = self.cache.get_many(self.ns_text, first)
        self.counters.text_cache_hits += len(found)
        missing = [c for c in first if c not in found]
        for s in range(0, len(missing), self.batch_size):
            batch = missing[s : s + self.batch_size]
            emb = encode_texts(
                self.backbone,
                [first[c] for c in batch],
                prefix=self.prefix,
                batch_size=len(batch),
                progress=False,
            )
            self.cache.put_many(self.ns_text, batch, emb)
            found.update({c: emb[i] for i, c in enumerate(batch)})
            self.counters.texts_encoded += len(batch)
        return found
