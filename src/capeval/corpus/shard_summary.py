"""A shard run's summary (``summary.json``) and the rows a cut keeps (``kept.jsonl``), from its shard outputs.

Only the outputs of the run's own shards are read (``scores/`` may hold set-aside or foreign files). Rows are
named by shard and key together, and ``kept.jsonl`` holds one JSON object per line, so a key holding a newline,
the same key in two shards or a missing key (null) cannot be confused with another. Keys that repeat (inside a
shard or across shards) are counted in the summary and shown, with a warning.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capeval.corpus.output_files import write_atomically
from capeval.corpus.row_checks import ORIGIN_FIELDS
from capeval.corpus.shard_outputs import FORMAT, output_path
from capeval.diagnostics.categories import DuplicateKeyWarning, user_stacklevel

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
_NOT_SCORES = (
    "key",
    "shard",
    "index",
    "caption",
    "error",
    "image_embedding",
    "text_embedding",
    *ORIGIN_FIELDS,
)
_SHOWN = 10  # repeated keys listed in summary.json and the warning


def top_fraction_threshold(scores: np.ndarray, fraction: float) -> float:
    """The score a row needs to be in the top ``fraction`` of the pool, as DataComp computes it.

    DataComp's ``get_threshold`` (mlfoundations/datacomp, ``baselines/utils.py``) sorts the pool in
    descending order and takes the value at position ``int(len(pool) * fraction)``; its filter then keeps
    every row scoring at least that (so ties at the cut are all kept).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"top_fraction must be in (0, 1], got {fraction}")
    if len(scores) == 0:
        return float("nan")
    ordered = -np.sort(-np.asarray(scores, dtype=np.float64))
    n = int(len(ordered) * fraction)
    return float(ordered[min(n, len(ordered) - 1)])


def _read_rows(output_dir: Path, shard_names: Sequence[str]) -> tuple[dict[str, list], dict[str, np.ndarray]]:
    """The identifying columns (shard, key, index, error) and the score columns of the given shards' outputs."""
    import pyarrow.parquet as pq

    ids: dict[str, list] = {"shard": [], "key": [], "index": [], "error": [], "uid": []}
    columns: dict[str, list[np.ndarray]] = {}
    for name in shard_names:
        table = pq.read_table(output_path(output_dir, name))
        for field in ids:
            ids[field] += table.column(field).to_pylist()
        for column in table.column_names:
            if column not in _NOT_SCORES:
                columns.setdefault(column, []).append(table.column(column).to_numpy(zero_copy_only=False))
    scores = {name: np.concatenate(parts).astype(np.float64) for name, parts in columns.items()}
    return ids, scores


def _duplicates(shards: list[str], keys: list[str | None]) -> dict[str, Any]:
    """Keys that appear more than once (null keys aside), within a shard or across shards."""
    counts = Counter(k for k in keys if k is not None)
    repeated = {k: n for k, n in counts.items() if n > 1}
    if not repeated:
        return {"count": 0, "examples": []}
    where: dict[str, list[str]] = {}
    for shard, key in zip(shards, keys, strict=True):
        if key in repeated:
            where.setdefault(key, []).append(shard)
    examples = [{"key": k, "shards": where[k]} for k in sorted(repeated)[:_SHOWN]]
    warnings.warn(
        DuplicateKeyWarning(
            f"{len(repeated)} sample key(s) appear more than once (e.g. {examples[0]['key']!r} in shards "
            f"{examples[0]['shards']}): every row is kept; kept.jsonl and the outputs name rows by shard, key "
            "and index",
            what="sample keys repeat",
            items=sorted(repeated)[:_SHOWN],
            count=len(repeated),
        ),
        stacklevel=user_stacklevel(),
    )
    return {"count": len(repeated), "examples": examples}


def _write_kept(out: Path, ids: dict[str, list], keep: np.ndarray) -> int:
    def write(fh) -> None:
        for i in np.flatnonzero(keep):
            row = {"shard": ids["shard"][i], "key": ids["key"][i], "index": ids["index"][i]}
            if ids["uid"][i] is not None:  # img2dataset's uid, for DataComp's resharder
                row["uid"] = ids["uid"][i]
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    write_atomically(out / "kept.jsonl", write, inside=out)
    return int(keep.sum())


def summarise_outputs(
    output_dir: str | os.PathLike,
    shard_names: Sequence[str],
    key_metric: str,
    threshold: float | None = None,
    top_fraction: float | None = None,
    failed_shards: dict[str, str] | None = None,
    seconds: float | None = None,
    details: dict | None = None,
) -> dict:
    """Read the given shards' outputs, write ``summary.json`` (and ``kept.jsonl`` with a threshold or a fraction).

    Args:
        output_dir: the run's folder.
        shard_names: the shards of this run that have an output (the failed ones excluded).
        key_metric: the score column thresholds apply to.
        threshold: keep rows scoring at least this.
        top_fraction: keep the top fraction of scored rows (``top_fraction_threshold``); not with ``threshold``.
        failed_shards: shard name -> why it could not be read (reported, not fatal).
        seconds: the run's wall time, for throughput.
        details: more entries of the run for the summary (engine, signatures, columns).

    Returns:
        dict: the summary written.
    """
    if threshold is not None and top_fraction is not None:
        raise ValueError("give threshold or top_fraction, not both")
    out = Path(output_dir)
    ids, scores = _read_rows(out, shard_names)
    if key_metric not in scores and shard_names:
        raise ValueError(f"no score column {key_metric!r} in {output_dir}; columns: {sorted(scores)}")
    ok = np.array([e is None for e in ids["error"]], dtype=bool)
    kinds = Counter(_error_kind(e) for e in ids["error"] if e is not None)
    summary: dict[str, Any] = {
        "format": FORMAT,
        "shards": len(shard_names),
        "rows": len(ids["key"]),
        "scored": int(ok.sum()),
        "errors": int((~ok).sum()),
        "error_kinds": dict(sorted(kinds.items())),
        "duplicate_keys": _duplicates(ids["shard"], ids["key"]),
        "failed_shards": dict(sorted((failed_shards or {}).items())),
        # A column a row may lack (RefPAC-S without references) is NaN there: each mean says over how many rows.
        "score_counts": {n: int((ok & np.isfinite(v)).sum()) for n, v in scores.items()},
        "mean": {n: _mean(v[ok & np.isfinite(v)]) for n, v in scores.items()},
        "quantiles": {n: _quantiles(v[ok & np.isfinite(v)]) for n, v in scores.items()},
        "seconds": seconds,
        "rows_per_second": (len(ids["key"]) / seconds) if seconds else None,
        "key_metric": key_metric,
        **(details or {}),
    }
    cut = None
    if top_fraction is not None:
        key = scores.get(key_metric, np.full(len(ok), np.nan))
        cut = top_fraction_threshold(key[ok & np.isfinite(key)], top_fraction)
        summary["top_fraction"] = top_fraction
    elif threshold is not None:
        cut = float(threshold)
    if cut is not None:
        # No scored row has no top fraction: the threshold is null (NaN is no JSON) and says why; nothing is kept.
        undefined = math.isnan(cut)
        keep = ok & (scores.get(key_metric, np.zeros(len(ok))) >= cut)
        kept = _write_kept(out, ids, keep)
        summary.update(threshold=None if undefined else cut, kept=kept, kept_file=str(out / "kept.jsonl"))
        if undefined:
            summary["threshold_missing"] = (
                f"no row has a {key_metric} score (of {len(ok)} row(s), {int((~ok).sum())} are error rows), so "
                f"the top {top_fraction} has no threshold and no row is kept"
            )
    text = json.dumps(summary, indent=2)
    write_atomically(out / "summary.json", lambda fh: fh.write(text), inside=out)
    return summary


def _mean(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _quantiles(values: np.ndarray) -> dict[str, float] | None:
    return {f"p{round(q * 100)}": float(np.quantile(values, q)) for q in QUANTILES} if len(values) else None


def _error_kind(error: str) -> str:
    """The kind of a row's error, as ``summary.json`` counts them (first match wins: the order matters)."""
    for needle, kind in (
        ("cannot be read", "unreadable image"),
        ("no key", "missing key"),
        ("key of type", "missing key"),
        ("samples of this shard", "repeated key"),
        ("image members", "several images"),
        ("members for its field", "repeated member"),
        ("the sidecar", "unreadable sidecar"),
        ("over the limit of", "too many references"),
        ("caption", "caption"),
        ("tar member", "damaged tar member"),
        ("tar ends", "damaged tar member"),
        ("sparse", "damaged tar member"),
        ("no valid header", "damaged tar member"),
        ("not a file", "not a file member"),
        ("not downloaded by img2dataset", "not downloaded"),
        ("no image", "missing image"),
        ("references", "references"),
        ("non-finite", "non-finite score"),
        ("leaves the shard", "unsafe member name"),
        ("bytes (limit", "oversized member"),
        ("is not UTF-8", "caption"),
    ):
        if needle in error:
            return kind
    return "other"
