"""One corpus run's plan and the steps every executor shares: the pending shards, then the summary.

``score_corpus`` (``capeval.corpus.run``) checks the settings and makes a ``RunPlan``; an executor
(``capeval.corpus.local_executor``, ``capeval.corpus.ray_engine``) scores the pending shards; ``summarise`` writes
``summary.json`` and ``kept.jsonl`` from the shards' outputs, whichever executor wrote them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capeval.corpus.download_records import downloads_summary
from capeval.corpus.reader import Corpus
from capeval.corpus.row_scoring import RowScorer
from capeval.corpus.shard_outputs import FORMAT, input_record, is_done
from capeval.corpus.shard_summary import summarise_outputs


@dataclass
class CorpusResult:
    """Where a corpus run wrote its files, and its summary (also in ``summary.json``)."""

    output_dir: Path
    scores: Path  # the folder of per-shard Parquet files
    kept: Path | None
    summary: dict


@dataclass(frozen=True)
class RunPlan:
    """The settings of one run that the steps after the checks need."""

    corpus: Corpus
    executor: str
    columns: dict
    chunk_size: int
    batch_size: int
    embeddings: bool
    key_metric: str
    cut: dict  # threshold, top_fraction
    num_workers: int | None  # local: decoding processes; Ray: actors (None: each executor's default)
    progress: bool | None
    ray: dict  # the Ray settings and the metric options
    exports: dict  # resharder_subset, embedding_layout (capeval.corpus.exports)

    def manifest(self, scorer: RowScorer) -> dict[str, Any]:
        """The run's ``run.json``: what a resumed run must share (format, metrics and their signatures, the
        source, the fields read, the shard size of a row source, whether embeddings are written, the score columns)."""
        return {
            "format": FORMAT,
            "metrics": scorer.metrics,
            "signatures": scorer.signatures,
            "source": self.corpus.description,
            "columns": self.columns,
            "chunk_size": self.chunk_size,
            "embeddings": self.embeddings,
            "columns_scored": scorer.columns(),
        }


def pending_shards(plan: RunPlan, output: Path) -> tuple[list, dict[str, dict]]:
    """The shards whose output is not done (missing, damaged, or from another input), and every shard's input
    record (``shard_outputs.input_record``, taken before it is read)."""
    records = {s.name: input_record(s) for s in plan.corpus.shards}
    pending = [s for s in plan.corpus.shards if not is_done(output, s.name, records[s.name])]
    return pending, records


def score_pending(
    plan: RunPlan, output: Path, scorer: RowScorer, execute, processes: int = 1
) -> CorpusResult:
    """Score the pending shards with ``execute(plan, pending, output, scorer, records)`` (which returns
    ``{shard: why}`` for the shards it could not read), then summarise."""
    pending, records = pending_shards(plan, output)
    start = time.perf_counter()
    failed = execute(plan, pending, output, scorer, records)
    return summarise(plan, output, scorer, failed, len(pending), time.perf_counter() - start, processes)


def summarise(
    plan: RunPlan,
    output: Path,
    scorer: RowScorer,
    failed: dict[str, str],
    scored_now: int,
    seconds: float,
    processes: int = 1,
) -> CorpusResult:
    """Write ``summary.json`` (and ``kept.jsonl``) from the shards' outputs.

    Raises:
        ValueError: not one shard could be read, naming each with why.
    """
    shards = plan.corpus.shards
    if failed and len(failed) == len(shards):
        listed = "; ".join(f"{name}: {why}" for name, why in sorted(failed.items()))
        raise ValueError(f"none of the {len(shards)} shard(s) of the corpus could be read ({listed})")
    written = [s.name for s in shards if s.name not in failed]
    details = {
        "executor": plan.executor,
        "processes": processes,
        "signatures": scorer.signatures,
        "columns": plan.columns,
        "shards_scored_now": scored_now - len(failed),
        "downloads": downloads_summary(shards),
    }
    summary = summarise_outputs(
        output, written, plan.key_metric, failed_shards=failed, seconds=seconds, details=details, **plan.cut
    )
    kept = output / "kept.jsonl" if any(v is not None for v in plan.cut.values()) else None
    if plan.exports.get("resharder_subset") or plan.exports.get("embedding_layout"):
        summary = _export(plan, output, written, summary, kept)
    return CorpusResult(output_dir=output, scores=output / "scores", kept=kept, summary=summary)


def _export(plan: RunPlan, output: Path, written: list[str], summary: dict, kept: Path | None) -> dict:
    """The files for the tools after the run (``capeval.corpus.exports``), named in ``summary.json``."""
    import json

    from capeval.corpus.exports import write_embedding_layout, write_resharder_subset
    from capeval.corpus.output_files import write_atomically

    if plan.exports.get("resharder_subset"):
        rows = [json.loads(line) for line in kept.read_text(encoding="utf-8").splitlines()]
        subset = write_resharder_subset(output, rows)
        summary["resharder_subset"] = {
            "file": str(subset.path),
            "uids": subset.count,
            "uids_of_several_rows": len(subset.repeated),
        }
    if plan.exports.get("embedding_layout"):
        layout = write_embedding_layout(output, written)
        summary["embedding_layout"] = str(layout.folder)
        summary["embedding_layout_parts"] = layout.parts
        summary["embedding_layout_removed"] = layout.removed
    text = json.dumps(summary, indent=2)
    write_atomically(output / "summary.json", lambda fh: fh.write(text), inside=output)
    return summary
