"""Scoring corpora of any size and format: one reader, one output schema, a local and a Ray executor.

Modules: ``reader`` (any source as shards of rows: ``shards`` for WebDataset tars and Parquet files, ``row_sources``
and ``record_rows`` for JSONL, CSV, image folders and ``datasets``; ``row_checks`` the checks every row passes),
``row_scoring`` and ``row_batches`` (rows prepared and scored in batches), ``shard_outputs`` and ``shard_summary``
(one Parquet file per shard, the resume rule, the summary and the kept rows), ``run`` (``score_corpus``),
``local_executor`` and ``ray_engine`` (where the work runs), ``run_folder`` and ``lock`` (one run per output folder),
``distributed`` (``score_distributed``: lists scored by the processes of a ``torchrun`` launch) and ``cli``
(``capeval corpus``). Above the metrics and the CLIP engine; below the CLI and the integrations.
"""

from __future__ import annotations

from capeval._lazy import lazy_exports

_PUBLIC = {
    "score_corpus": "capeval.corpus.run",
    "CorpusResult": "capeval.corpus.run_plan",
    "CHUNK_SIZE": "capeval.corpus.run",
    "score_distributed": "capeval.corpus.distributed",
    "process_state": "capeval.corpus.distributed",
    # What a corpus run refuses, by name (all ValueErrors).
    "EmptySourceError": "capeval.corpus.row_sources",
    "FolderInUseError": "capeval.corpus.lock",
    "ShardReadError": "capeval.corpus.shards",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
