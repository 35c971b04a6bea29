"""Scoring corpora of any size: sources, resumable runs, the embedding cache, multi-process sharding.

Modules: ``sources`` (rows of JSONL files, image folders, ``datasets``), ``items`` (rows checked into items),
``embedding_cache`` (SQLite, keyed by content hash and model signature), ``cached_encoding`` (embeddings looked up
there, the rest encoded in fixed batches), ``run`` (``score_corpus``: resume, filtering), ``outputs`` (part files
written atomically and checked on resume, the merged outputs, the run's manifest), ``lock`` (one run per output
folder), ``distributed`` (``score_distributed``: each process encodes its share under torchrun / accelerate) and
``cli`` (``capeval corpus``). Above the metrics and the CLIP engine; below the CLI and the integrations.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "score_corpus": "capeval.corpus.run",
    "CorpusResult": "capeval.corpus.run",
    "CHUNK_SIZE": "capeval.corpus.run",
    "score_distributed": "capeval.corpus.distributed",
    "process_state": "capeval.corpus.distributed",
    "EmbeddingCache": "capeval.corpus.embedding_cache",
    "open_source": "capeval.corpus.sources",
    # What a corpus run refuses, by name (all ValueErrors).
    "CacheFileError": "capeval.corpus.embedding_cache",
    "DamagedPartError": "capeval.corpus.outputs",
    "EmptySourceError": "capeval.corpus.sources",
    "FolderInUseError": "capeval.corpus.lock",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
