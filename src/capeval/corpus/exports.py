"""What a corpus run writes for the tools after it, from its shard outputs: DataComp's resharder subset and
clip-retrieval's embedding layout.

- ``write_resharder_subset``: the uids of the kept rows as ``baselines/apply_filter.py`` saves them
  (``capeval.corpus.datacomp``), so that DataComp's ``resharder.py --subset-file`` copies exactly those samples;
- ``write_embedding_layout``: ``img_emb/img_emb_N.npy``, ``text_emb/text_emb_N.npy`` and
  ``metadata/metadata_N.parquet``, one part per shard in the run's order, as clip-retrieval's inference writes them
  (``capeval.corpus.embedding_layout``), for autofaiss and embedding-reader. Error rows have no embedding and are
  left out; the metadata keeps each row's key, shard, caption, origin and scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capeval.corpus.datacomp import ResharderSubset, write_resharder_uids
from capeval.corpus.embedding_layout import EmbeddingLayoutWriter, layout_files
from capeval.corpus.shard_outputs import output_path

RESHARDER_SUBSET = "kept_uids.npy"
EMBEDDING_LAYOUT = "embeddings"


def write_resharder_subset(output: Path, kept: Sequence[dict]) -> ResharderSubset:
    """``OUTPUT/kept_uids.npy`` from the kept rows (each with ``key`` and ``uid``).

    Raises:
        ValueError: a kept row has no uid, or one that is not 32 hexadecimal characters, naming its shard and key
            (run img2dataset with ``--save_additional_columns '["uid"]'``); no file is written.
    """
    return write_resharder_uids(
        ((f"{r['shard']}/{r['key']}", r.get("uid")) for r in kept), output / RESHARDER_SUBSET, inside=output
    )


@dataclass(frozen=True)
class EmbeddingLayout:
    """What ``write_embedding_layout`` wrote: the folder, its parts with rows, and the files of an earlier run's
    layout it removed (parts this run no longer has: fewer shards, other part numbers, a part now without rows)."""

    folder: Path
    parts: int
    removed: list[str]


def write_embedding_layout(output: Path, shard_names: Sequence[str]) -> EmbeddingLayout:
    """``OUTPUT/embeddings/`` in clip-retrieval's layout from the shards' outputs (written with embeddings), made
    anew at each run's end: the layout's files this run did not write are removed, so an indexer reading the folder
    finds this run's rows only (files that are not the layout's are left alone).
    """
    import pyarrow.parquet as pq

    folder = output / EMBEDDING_LAYOUT
    writer = EmbeddingLayoutWriter(folder, max(1, len(shard_names)))
    written: set[Path] = set()
    parts = 0
    for part, name in enumerate(shard_names):
        table = pq.read_table(output_path(output, name))
        held = [i for i, e in enumerate(table.column("image_embedding").to_pylist()) if e is not None]
        if held:
            metadata = [
                {k: v for k, v in row.items() if k not in ("image_embedding", "text_embedding", "error")}
                for row in table.take(held).to_pylist()
            ]
            embeddings = {
                f"{kind}_embeddings": np.asarray(
                    table.column(f"{kind}_embedding").take(held).to_pylist(), np.float16
                )
                for kind in ("image", "text")
            }
            writer.add(part, metadata, **embeddings)
        files = writer.finish(part)
        written.update(files)
        parts += bool(files)
    removed = []
    for path in layout_files(folder):
        if path not in written:
            path.unlink()
            removed.append(str(path.relative_to(folder)))
    return EmbeddingLayout(folder, parts, removed)
