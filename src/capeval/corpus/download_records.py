"""img2dataset's own records of a shard: what it downloaded, what failed and why, and whether the shard is whole.

img2dataset 1.47.0 (rom1504/img2dataset, ``img2dataset/downloader.py`` and ``writer.py``) writes, per shard:

- ``NNNNN.parquet``: one row per URL of the shard, failed ones included, with ``key``, ``status``
  (``success``, ``failed_to_download`` or ``failed_to_resize``), ``error_message`` (``HTTP Error 404: File not
  found``, ``Image decoding error``, ...), ``url``, the caption, the columns of ``--save_additional_columns``
  (DataComp's ``uid``), ``width``/``height`` (as written) and ``original_width``/``original_height`` (as
  downloaded). Beside a tar it is metadata only; in Parquet output it is the shard itself, images in a column
  that is never read here. Its rows come in the order downloads finished, not in key order.
- ``NNNNN_stats.json``: the shard's counts (``count``, ``successes``, ``failed_to_download``,
  ``failed_to_resize``) and ``status_dict`` (status or error message -> samples). It holds no "complete" flag:
  img2dataset writes it after the shard's writer is closed (``Downloader.download_shard`` calls ``write_stats``
  last), and its incremental mode counts a shard as done when that file exists and downloads it again when it
  does not. So a shard is complete exactly when its stats file is there; one without it was interrupted, and its
  tar or Parquet file may hold any prefix of its samples.

Every file is read through capeval's bounded readers: the stats with ``capeval.json_files.parse_json`` after its
size is checked, the metadata with ``CheckedParquet`` (only the columns used here, each cell over
``MAX_RECORD_CELL_BYTES`` refused by row). A file that cannot be read raises ``DownloadRecordsError`` naming it;
a row that cannot be read is listed in ``DownloadRecords.problems`` with its key, the others are read as usual.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capeval.corpus.parquet_cells import CheckedParquet
from capeval.corpus.row_checks import ORIGIN_SIZE_FIELDS, ORIGIN_TEXT_FIELDS, key_problem, origin_fields
from capeval.corpus.row_sources import open_regular
from capeval.json_files import InputFileError, parse_json

STATUSES = ("success", "failed_to_download", "failed_to_resize")  # img2dataset's values of ``status``
SIZE_FIELDS = ORIGIN_SIZE_FIELDS
TEXT_FIELDS = ORIGIN_TEXT_FIELDS
COUNT_FIELDS = ("count", "successes", "failed_to_download", "failed_to_resize")
MAX_STATS_BYTES = 32 * 1024**2  # status_dict holds at most 10**5 messages (img2dataset's CappedCounter)
MAX_RECORD_CELL_BYTES = 1024**2  # a URL, uid or error message; a larger cell is refused by row
MAX_RECORD_ROWS = 10**6  # img2dataset's shards hold 10**4 samples by default (--number_sample_per_shard)


class DownloadRecordsError(ValueError):
    """A record file that cannot be read at all (missing, damaged, not img2dataset's); the message names it."""


@dataclass(frozen=True)
class SampleOrigin:
    """Where a sample came from, as img2dataset recorded it: the fields passed through to capeval's rows."""

    key: str
    uid: str | None = None  # present when img2dataset ran with --save_additional_columns '["uid"]'
    url: str | None = None
    width: int | None = None  # as written (after resizing); None for a failed download
    height: int | None = None
    original_width: int | None = None  # as downloaded
    original_height: int | None = None


@dataclass(frozen=True)
class FailedDownload:
    """A URL of the shard that img2dataset could not turn into a sample (it is in no tar)."""

    key: str
    status: str  # "failed_to_download" or "failed_to_resize"
    error_message: str | None
    url: str | None
    uid: str | None


@dataclass
class DownloadRecords:
    """A shard's ``NNNNN.parquet`` as read: every row's origin by key, its failures, and the rows refused."""

    path: Path
    rows: int = 0  # in the file, refused ones included
    origins: dict[str, SampleOrigin] = field(default_factory=dict)  # every row read, failed ones included
    failed: list[FailedDownload] = field(default_factory=list)  # in the file's order
    statuses: Counter = field(default_factory=Counter)  # status -> rows
    problems: list[str] = field(default_factory=list)  # rows (by key) or columns that could not be read


@dataclass(frozen=True)
class ShardStats:
    """A shard's ``NNNNN_stats.json``: whether the shard is complete, why not, and its counts.

    ``unrecorded`` counts URLs img2dataset counted in ``count`` but recorded nowhere: its download loop prints
    ``Sample N failed to download`` for an exception of its own and goes on; the shard is still done for it.
    """

    path: Path
    complete: bool
    reason: str | None = None  # why the shard is not complete; None when it is
    counts: dict[str, int] | None = None  # COUNT_FIELDS, as the file gives them
    status_counts: dict[str, int] | None = None  # the file's status_dict
    unrecorded: int = 0


def record_paths(shard_path: str | os.PathLike) -> tuple[Path, Path]:
    """The metadata Parquet and the stats file of a shard (``00000.tar`` or ``00000.parquet``).

    Returns:
        tuple: ``(00000.parquet, 00000_stats.json)`` beside the shard; for a Parquet shard the first is the
        shard itself (img2dataset's Parquet output holds samples and records in one file).
    """
    path = Path(shard_path)
    return path.with_suffix(".parquet"), path.with_name(f"{path.stem}_stats.json")


def read_shard_stats(shard_path: str | os.PathLike, records: DownloadRecords | None = None) -> ShardStats:
    """Whether img2dataset finished ``shard_path``, from its ``_stats.json`` (never raises for its content).

    Args:
        shard_path: the shard (``00000.tar`` or ``00000.parquet``); its stats file is beside it.
        records: its records (``read_download_records``), to check that they agree with the stats.

    Returns:
        ShardStats: ``complete`` False, with ``reason`` naming the file, when it is missing, over
        ``MAX_STATS_BYTES``, not JSON, lacks a count or has counts that do not add up, or when the records hold
        other numbers than the stats (a stats file left from another run).
    """
    path = record_paths(shard_path)[1]
    if not os.path.lexists(path):
        return ShardStats(
            path,
            False,
            f"{path} is missing: img2dataset writes it when the shard is finished, so this shard may hold only "
            "part of its samples (an interrupted download; img2dataset's incremental mode downloads it again)",
        )
    try:
        fh = open_regular(path, "stats file")
        with fh:
            data = fh.read(MAX_STATS_BYTES + 1)  # bounded even if the file grows after a size check
    except (
        OSError,
        ValueError,
    ) as err:  # unreadable (permissions, I/O), or no regular file: a verdict, not a crash
        return ShardStats(
            path, False, f"{path} cannot be read ({err}); whether img2dataset finished it is unknown"
        )
    if len(data) > MAX_STATS_BYTES:
        return ShardStats(path, False, f"{path} is over {MAX_STATS_BYTES:,} bytes; it is not read")
    try:
        stats = parse_json(data, f"the stats file {path}")
    except InputFileError as err:
        return ShardStats(path, False, str(err))
    counts, problem = _counts(stats, path)
    if problem:
        return ShardStats(path, False, problem)
    status_counts, problem = _status_counts(stats.get("status_dict"), path)
    if problem:
        return ShardStats(path, False, problem, counts)
    recorded = counts["successes"] + counts["failed_to_download"] + counts["failed_to_resize"]
    unrecorded = counts["count"] - recorded
    if unrecorded < 0:
        return ShardStats(
            path,
            False,
            f"{path} counts {recorded} outcomes for {counts['count']} URLs",
            counts,
            status_counts,
        )
    reason = _disagreement(counts, recorded, records, path) if records is not None else None
    return ShardStats(path, reason is None, reason, counts, status_counts, unrecorded)


def _counts(stats: Any, path: Path) -> tuple[dict[str, int] | None, str | None]:
    if not isinstance(stats, dict):
        return None, f"{path} holds a JSON {type(stats).__name__}, not img2dataset's stats object"
    counts = {}
    for name in COUNT_FIELDS:
        value = stats.get(name)
        if name not in stats:
            return None, f"{path} has no {name!r}: it is not img2dataset's stats file"
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None, f"{path} has {name} = {value!r:.60}, not a count"
        counts[name] = value
    return counts, None


def _status_counts(status_dict: Any, path: Path) -> tuple[dict[str, int] | None, str | None]:
    if status_dict is None:
        return None, None
    if not isinstance(status_dict, dict):
        return None, f"{path} has a status_dict of type {type(status_dict).__name__}, not an object"
    for message, n in status_dict.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return None, f"{path} has status_dict[{message!r:.60}] = {n!r:.60}, not a count"
    return dict(status_dict), None


def _disagreement(counts: dict[str, int], recorded: int, records: DownloadRecords, path: Path) -> str | None:
    if records.rows != recorded:
        return (
            f"{records.path} holds {records.rows} rows but {path} counts {recorded} recorded URLs: the stats are "
            "not those of these records (a file left from another run?)"
        )
    if sum(records.statuses.values()) < records.rows:
        return None  # refused rows have no status to compare; records.problems names them
    for status, name in zip(STATUSES, ("successes", "failed_to_download", "failed_to_resize"), strict=True):
        if records.statuses[status] != counts[name]:
            return f"{records.path} has {records.statuses[status]} rows {status!r} but {path} counts {counts[name]}"
    return None


def read_download_records(shard_path: str | os.PathLike) -> DownloadRecords:
    """The records img2dataset wrote for ``shard_path`` (``00000.tar`` or ``00000.parquet``): origins and failures.

    Raises:
        DownloadRecordsError: the metadata Parquet is missing or unreadable, has more than ``MAX_RECORD_ROWS``
            rows, or lacks img2dataset's ``key`` and ``status`` columns (naming the file and its columns).
    """
    path = record_paths(shard_path)[0]
    if not os.path.lexists(path):
        raise DownloadRecordsError(f"{path} is missing: img2dataset writes it beside each shard it downloads")
    try:
        fh = open_regular(path, "metadata file")
    except (OSError, ValueError) as err:
        raise DownloadRecordsError(f"{path} cannot be read: {err}") from err
    with fh:
        try:
            return _records_of(path, fh)
        except OSError as err:  # an I/O error part-way through the file
            raise DownloadRecordsError(f"{path} cannot be read: {err}") from err


def _records_of(path: Path, fh) -> DownloadRecords:
    try:
        table = CheckedParquet(fh, MAX_RECORD_CELL_BYTES)
    except Exception as err:  # pyarrow raises its own ArrowInvalid/OSError family for damaged files
        raise DownloadRecordsError(f"{path} is not a readable Parquet file: {err}") from err
    if table.num_rows > MAX_RECORD_ROWS:
        raise DownloadRecordsError(
            f"{path} has {table.num_rows:,} rows (limit {MAX_RECORD_ROWS:,}); it is not read"
        )
    missing = [c for c in ("key", "status") if c not in table.column_names]
    if missing:
        raise DownloadRecordsError(
            f"{path} has no column {missing}: it is not img2dataset's metadata (columns: {table.column_names})"
        )
    records = DownloadRecords(path, rows=table.num_rows)
    values = _columns(table, records)
    seen: dict[str, int] = {}
    for index in range(table.num_rows):
        row = {name: column[index] for name, column in values.items()}
        _add_row(records, row, index, table.problems.get(index), seen)
    return records


def _columns(table: CheckedParquet, records: DownloadRecords) -> dict[str, list]:
    """The columns read, as Python lists; a column of the wrong type is reported once and read as absent (one of
    nulls only, pyarrow's type for a column written without one, is read: its values are all None)."""
    import pyarrow as pa

    wanted = {"key": _is_text, "status": _is_text, "error_message": _is_text}
    wanted |= {name: _is_text for name in TEXT_FIELDS} | {name: pa.types.is_integer for name in SIZE_FIELDS}
    out = {}
    for name, fits in wanted.items():
        if name not in table.column_names:
            continue
        kind = table.schema.field(name).type
        if not (fits(kind) or pa.types.is_null(kind)) and name not in ("key", "status"):
            records.problems.append(
                f"column {name!r} of {records.path} is {kind}, not what img2dataset writes"
            )
            continue
        out[name] = table.column(name).to_pylist()
    return out


def _is_text(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _add_row(
    records: DownloadRecords, row: dict, index: int, refused: str | None, seen: dict[str, int]
) -> None:
    key, problem = key_problem(row["key"], f"row {index} of {records.path}")
    where = (
        f"row {index} (key {key}) of {records.path}" if key is not None else f"row {index} of {records.path}"
    )
    status = row["status"]
    if problem is None and refused is not None:
        problem = f"{where}: {refused}"
    if problem is None and key in seen:
        problem = f"{where} repeats the key of row {seen[key]}"
    if problem is None and status not in STATUSES:
        problem = f"{where} has status {status!r:.60}, not one of {list(STATUSES)}"
    if problem is None:
        problem = origin_fields({name: row.get(name) for name in SIZE_FIELDS}, where)[1]
    if problem is not None:
        records.problems.append(problem)
        return
    seen[key] = index
    origin = SampleOrigin(key, **{name: row.get(name) for name in (*TEXT_FIELDS, *SIZE_FIELDS)})
    records.origins[key] = origin
    records.statuses[status] += 1
    if status != "success":
        records.failed.append(FailedDownload(key, status, row.get("error_message"), origin.url, origin.uid))


def sidecar_origin(
    metadata: Any, key: str, member: str | None = None
) -> tuple[SampleOrigin | None, str | None]:
    """The origin fields of one sample's ``.json`` sidecar (already parsed), type-checked
    (``capeval.corpus.row_checks.origin_fields``, the check every reader applies).

    Args:
        metadata: the parsed sidecar (``capeval.json_files.parse_json`` of the member's bytes).
        key: the sample's key in the tar; the sidecar's own ``key``, when it has one, must be the same.
        member: the member's name for messages (default ``<key>.json``).

    Returns:
        tuple: ``(SampleOrigin, None)``, or ``(None, why)`` naming the sample and the field: a sidecar that is
        not an object, a uid or url that is not text, a size that is not a non-negative integer, another key.
        Absent fields (and img2dataset's nulls) are None.
    """
    where = f"sample {key} (sidecar {member or f'{key}.json'})"
    if not isinstance(metadata, dict):
        return None, f"{where} is a JSON {type(metadata).__name__}, not an object"
    own = metadata.get("key")
    if own is not None and own != key:
        return None, f"{where} names the key {own!r:.60}, not {key!r}"
    fields, problem = origin_fields(metadata, where)
    if problem:
        return None, problem
    return SampleOrigin(key, **(fields or {})), None


def failure_counts(failed: Iterable[FailedDownload]) -> dict[str, dict[str, int]]:
    """Failed downloads by status, then by error message (most frequent first), for a run's summary.

    Returns:
        dict: e.g. ``{"failed_to_download": {"HTTP Error 404: File not found": 3}, "failed_to_resize": {...}}``;
        a failure without a message counts under ``""``.
    """
    counts: dict[str, Counter] = {}
    for failure in failed:
        counts.setdefault(failure.status, Counter())[failure.error_message or ""] += 1
    return {status: dict(c.most_common()) for status, c in sorted(counts.items())}


def downloads_summary(shards: Iterable[Any]) -> dict[str, Any] | None:
    """What img2dataset recorded of a run's shards (its ``NNNNN.parquet`` and ``NNNNN_stats.json`` beside each
    local shard): the failed downloads by status and message, the shards it did not finish, and the records that
    could not be read. None when no shard has img2dataset's records.

    Args:
        shards: the run's ``capeval.corpus.shards.Shard``s (only local WebDataset and Parquet shards have records).
    """
    failed: list[FailedDownload] = []
    incomplete: dict[str, str] = {}
    problems: list[str] = []
    found = False
    for shard in shards:
        if shard.kind not in ("webdataset", "parquet") or shard.path is None:
            continue
        parquet, stats = record_paths(shard.path)
        if not stats.exists() and (shard.kind == "parquet" or not parquet.exists()):
            continue  # not img2dataset's output (a Parquet shard's records are itself: its stats say it is)
        found = True
        records = None
        if parquet.exists():
            try:
                records = read_download_records(shard.path)
            except DownloadRecordsError as err:
                problems.append(str(err))
        if records is not None:
            failed += records.failed
            problems += records.problems
        verdict = read_shard_stats(shard.path, records)
        if not verdict.complete:
            incomplete[shard.name] = verdict.reason or "incomplete"
    if not found:
        return None
    return {
        "failed": len(failed),
        "failed_by_status": failure_counts(failed),
        "incomplete_shards": dict(sorted(incomplete.items())),
        "unreadable_records": problems[:10],
    }
