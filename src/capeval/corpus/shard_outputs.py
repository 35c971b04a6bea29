"""The files a shard run writes, whichever engine wrote them.

``OUTPUT/`` holds:

- ``run.json``: the metrics, their signatures and options; a rerun with other settings is refused.
- ``scores/<shard>.parquet``: one per input shard, one row per sample: ``key``, ``shard``, ``index``,
  ``caption``, one float64 column per score (``clipscore``, ``refclipscore``, ``clip_s``, ``pacscore``),
  ``error`` (null when scored), and with ``--save-embeddings`` ``image_embedding``/``text_embedding``
  (list<float16>). Written to a hidden temporary file and renamed, so a file that exists is whole; its
  footer records the shard's row count, checked before a rerun skips it.
- ``summary.json`` and ``kept.txt`` (``summarise_outputs``): counts, quantiles, throughput, the keys kept.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capeval.diagnostics.categories import DamagedFileWarning, user_stacklevel

FORMAT = "capeval-shard-scores-1"
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
_ROWS_KEY = b"capeval.rows"


def output_path(output_dir: str | os.PathLike, shard_name: str) -> Path:
    return Path(output_dir) / "scores" / f"{shard_name}.parquet"


def output_schema(score_columns: Sequence[str], embeddings: bool = False):
    """The pyarrow schema of a shard's output file."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("index", pa.int64()),
        pa.field("caption", pa.string()),
        *[pa.field(c, pa.float64()) for c in score_columns],
        pa.field("error", pa.string()),
    ]
    if embeddings:
        fields += [
            pa.field("image_embedding", pa.list_(pa.float16())),
            pa.field("text_embedding", pa.list_(pa.float16())),
        ]
    return pa.schema(fields)


def write_shard_output(
    output_dir: str | os.PathLike,
    shard_name: str,
    rows: dict[str, Any],
    score_columns: Sequence[str],
    embeddings: bool = False,
) -> Path:
    """Write one shard's rows (columns as ``RowScorer.score`` returns them, concatenated) atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = output_schema(score_columns, embeddings)
    order = np.argsort(np.asarray(rows["index"]), kind="stable")
    arrays = []
    for field in schema:
        values = rows[field.name]
        if field.name in ("image_embedding", "text_embedding"):
            matrix = np.asarray(values, dtype=np.float16)[order]
            arrays.append(pa.array(list(matrix), type=field.type))
        elif isinstance(values, np.ndarray):
            arrays.append(pa.array(values[order], type=field.type, from_pandas=True))
        else:
            arrays.append(pa.array([values[i] for i in order], type=field.type))
    n = len(order)
    table = pa.Table.from_arrays(arrays, schema=schema.with_metadata({_ROWS_KEY: str(n).encode()}))
    path = output_path(output_dir, shard_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def remove_stale_temporaries(output_dir: str | os.PathLike) -> None:
    """Half-written files of a killed run (only ever hidden temporaries: finished files are renamed)."""
    folder = Path(output_dir) / "scores"
    for stale in folder.glob(".*.tmp") if folder.is_dir() else ():
        stale.unlink(missing_ok=True)


def completed(output_dir: str | os.PathLike, shard_name: str) -> bool:
    """Whether the shard's output exists whole: readable, with as many rows as its footer records.

    A damaged file (a disk error, a copy cut short) is removed with a warning and the shard redone.
    """
    import pyarrow.parquet as pq

    path = output_path(output_dir, shard_name)
    if not path.exists():
        return False
    try:
        meta = pq.read_metadata(path)
        recorded = int((meta.metadata or {}).get(_ROWS_KEY, b"-1"))
        if recorded != meta.num_rows:
            raise ValueError(f"it holds {meta.num_rows} rows, its footer says {recorded}")
        pq.read_table(path, columns=["key"])
    except Exception as err:  # pyarrow's errors for a damaged file are several types
        warnings.warn(
            f"shard output {path} is damaged ({err}); the shard is scored again",
            DamagedFileWarning,
            stacklevel=user_stacklevel(),
        )
        path.unlink()
        return False
    return True


def check_manifest(output_dir: str | os.PathLike, manifest: dict) -> None:
    """Write ``run.json``, or check that the one there has the same settings.

    Raises:
        ValueError: the folder holds a run with other metrics, signatures or options, naming the differences.
    """
    path = Path(output_dir) / "run.json"
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError as err:
            raise ValueError(
                f"{path} is not valid JSON ({err}): remove it or use another output folder"
            ) from err
        diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
        if diff:
            shown = "; ".join(f"{k}: {old.get(k)!r} there, {manifest.get(k)!r} now" for k in diff)
            raise ValueError(
                f"{output_dir} holds a run with other settings ({shown}): use another output folder"
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".run.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(tmp, path)


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


def summarise_outputs(
    output_dir: str | os.PathLike,
    key_metric: str,
    threshold: float | None = None,
    top_fraction: float | None = None,
    failed_shards: dict[str, str] | None = None,
    seconds: float | None = None,
) -> dict:
    """Read every shard output, write ``summary.json`` (and ``kept.txt`` with a threshold or a fraction).

    Args:
        output_dir: the run's folder.
        key_metric: the score column thresholds apply to.
        threshold: keep rows scoring at least this.
        top_fraction: keep the top fraction of scored rows (``top_fraction_threshold``); not with ``threshold``.
        failed_shards: shard name -> why it could not be read (reported, not fatal).
        seconds: the run's wall time, for throughput.

    Returns:
        dict: the summary written.
    """
    import pyarrow.parquet as pq

    if threshold is not None and top_fraction is not None:
        raise ValueError("give threshold or top_fraction, not both")
    files = sorted((Path(output_dir) / "scores").glob("*.parquet"))
    tables = [pq.read_table(f) for f in files]
    keys: list[str] = []
    errors: list[str | None] = []
    columns: dict[str, list[np.ndarray]] = {}
    for table in tables:
        keys += table.column("key").to_pylist()
        errors += table.column("error").to_pylist()
        for name in table.column_names:
            if name not in ("key", "shard", "index", "caption", "error", "image_embedding", "text_embedding"):
                columns.setdefault(name, []).append(table.column(name).to_numpy(zero_copy_only=False))
    scores = {name: np.concatenate(parts).astype(np.float64) for name, parts in columns.items()}
    if key_metric not in scores:
        raise ValueError(f"no score column {key_metric!r} in {output_dir}; columns: {sorted(scores)}")
    ok = np.array([e is None for e in errors], dtype=bool)
    kinds: dict[str, int] = {}
    for e in errors:
        if e is not None:
            kind = _error_kind(e)
            kinds[kind] = kinds.get(kind, 0) + 1
    summary: dict[str, Any] = {
        "format": FORMAT,
        "shards": len(files),
        "rows": len(keys),
        "scored": int(ok.sum()),
        "errors": int((~ok).sum()),
        "error_kinds": kinds,
        "failed_shards": dict(sorted((failed_shards or {}).items())),
        "mean": {n: (float(np.mean(v[ok])) if ok.any() else None) for n, v in scores.items()},
        "quantiles": {
            n: ({f"p{round(q * 100)}": float(np.quantile(v[ok], q)) for q in QUANTILES} if ok.any() else None)
            for n, v in scores.items()
        },
        "seconds": seconds,
        "rows_per_second": (len(keys) / seconds) if seconds else None,
        "key_metric": key_metric,
    }
    cut = None
    if top_fraction is not None:
        cut = top_fraction_threshold(scores[key_metric][ok], top_fraction)
        summary["top_fraction"] = top_fraction
    elif threshold is not None:
        cut = float(threshold)
    out = Path(output_dir)
    if cut is not None:
        keep = ok & (scores[key_metric] >= cut)
        kept = [k for k, flag in zip(keys, keep, strict=True) if flag]
        tmp = out / ".kept.txt.tmp"
        tmp.write_text("".join(f"{k}\n" for k in kept))
        os.replace(tmp, out / "kept.txt")
        summary.update(threshold=cut, kept=len(kept), kept_file=str(out / "kept.txt"))
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, out / "summary.json")
    return summary


def _error_kind(error: str) -> str:
    for needle, kind in (
        ("cannot be read", "unreadable image"),
        ("caption", "caption"),
        ("tar member", "truncated member"),
        ("tar ends", "truncated member"),
        ("no image", "missing image"),
        ("references", "missing references"),
        ("non-finite", "non-finite score"),
        ("leaves the shard", "unsafe member name"),
        ("bytes (limit", "oversized member"),
    ):
        if needle in error:
            return kind
    return "other"
