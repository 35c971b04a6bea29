"""Image and caption embeddings through the embedding cache: looked up first, the rest encoded in fixed batches.

``CachedEncoder`` serves corpus scoring: the distinct images and captions of a part are looked up in the
``EmbeddingCache``, and the missing ones encoded in batches cut independently of what was cached, each batch
committed before the next starts, so a resumed run produces the same floats as an uninterrupted one.

A damaged cache entry is deleted and its input encoded again (``EmbeddingCache.get_many`` warns, naming the
cache file, the key and the image or caption); the run counts them in ``cache_entries_dropped``. The
re-encoded items join the batches of that part's missing items: equal to an uninterrupted run up to float rounding.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from capeval.clip.backbones import Backbone
from capeval.corpus.embedding_cache import (
    EmbeddingCache,
    content_hash,
    hash_text,
    image_namespace,
    text_namespace,
)


@dataclass
class EncodeCounters:
    """What a run took from the cache and what it encoded (distinct items)."""

    images_encoded: int = 0
    image_cache_hits: int = 0
    texts_encoded: int = 0
    text_cache_hits: int = 0
    cache_entries_dropped: int = 0


def _describe_image(image: Any) -> str:
    if isinstance(image, (str, os.PathLike)):
        return f"image {os.fspath(image)!r}"
    if isinstance(image, dict) and image.get("path"):
        return f"image {image['path']!r}"
    return f"an in-memory image ({type(image).__name__})"


def _describe_caption(text: str) -> str:
    return f"caption {text[:60]!r}{'...' if len(text) > 60 else ''}"


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

    def _lookup(self, ns: bytes, contents, allow_errors: bool, describe) -> dict:
        before = self.cache.dropped
        found = self.cache.get_many(ns, contents, self.backbone.embed_dim, allow_errors, describe)
        self.counters.cache_entries_dropped += self.cache.dropped - before
        return found

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
        found = self._lookup(self.ns_image, first, True, lambda c: _describe_image(first[c][1]))
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
        # A caption never fails to encode: a remembered error under a caption's key is damage.
        found = self._lookup(self.ns_text, first, False, lambda c: _describe_caption(first[c]))
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
