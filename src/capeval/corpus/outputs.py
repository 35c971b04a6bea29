"""The files of a corpus run: atomic writes, one file per part, the merged outputs and the run's manifest.

A part file (``parts/part-NNNNNNNN.jsonl``) starts with a header line (``part``, ``start``, ``rows``, ``last``)
followed by one line per input row; it is written through a temporary file and renamed, so it exists complete
or not at all. ``merge_parts`` streams the parts, in order, into ``scores.jsonl``, ``errors.jsonl`` and
``kept.jsonl``, checking that every row is there once. ``run.json`` (the manifest) records the settings of the
run a folder holds, so a resume with other settings is refused instead of mixing two runs.

A part on disk is trusted only once ``read_part`` has checked it whole: valid JSON on every line, a header that
agrees with the run and the source, every row once and in order, finite scores under the metric's name. A
resumed run scores a damaged part again (``score_corpus`` warns, naming the file and the problem); the merge
refuses one, naming the file and the line. Every error here names its file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from capeval.corpus.items import Item
from capeval.corpus.lock import LOCK_NAME

FORMAT = 1  # in the manifest: a folder written in another layout is refused, not resumed


def atomic_write(path: Path, write: Callable[[Any], None], mode: str = "w") -> None:
    """Write through a temporary file in the same folder, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def part_path(output: Path, part: int) -> Path:
    """Where part number ``part`` of the run in ``output`` lives (whether written yet or not)."""
    return output / "parts" / f"part-{part:08d}.jsonl"


def write_part(output: Path, part: int, start: int, count: int, last: bool, items: list[Item]) -> None:
    """Write one part atomically: its header, then each item's scores or error, with its input row.

    Args:
        output: the run's output folder.
        part: the part's number.
        start: index of its first row in the corpus.
        count: rows in the part.
        last: whether the corpus ends with this part.
        items: the part's rows, scored by ``score_corpus`` (scores under ``row["__scores__"]``, taken out here).
    """

    def write(fh):
        fh.write(json.dumps({"part": part, "start": start, "rows": count, "last": last}) + "\n")
        for it in items:
            line: dict[str, Any] = {"index": it.index, "id": it.id}
            if it.error is not None:
                line["error"] = it.error
            else:
                line["scores"] = it.row.pop("__scores__")
            line["row"] = it.row
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")

    atomic_write(part_path(output, part), write)


class DamagedPartError(ValueError):
    """A part file that is not what a run writes; ``path`` and ``problem`` say which and what is wrong."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _header_problem(header: Any, part: int, chunk_size: int, rows: int | None) -> str | None:
    """What is wrong with a part's header line, or None; ``rows`` is the part's size in the source, if known."""
    if not isinstance(header, dict):
        return f"the header (line 1) is a JSON {type(header).__name__}, not an object"
    expected = {"part": part, "start": part * chunk_size}
    for key, value in expected.items():
        if header.get(key) != value or isinstance(header.get(key), bool):
            return f"the header (line 1) has {key} {header.get(key)!r} where {value} was expected"
    count = header.get("rows")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= chunk_size:
        return f"the header (line 1) has rows {count!r}, not a count from 0 to chunk_size {chunk_size}"
    if header.get("last") is not (count < chunk_size):
        return (
            f"the header (line 1) has last {header.get('last')!r} for {count} rows of chunk_size {chunk_size}"
        )
    if rows is not None and count != rows:
        return f"the header (line 1) says {count} rows where the source has {rows} for this part"
    return None


def _entry_problem(entry: Any, index: int, metric: str) -> str | None:
    """What is wrong with one row line of a part, or None."""
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__}, not an object"
    if entry.get("index") != index or isinstance(entry.get("index"), bool):
        return f"index {entry.get('index')!r} where row {index} was expected"
    if "id" not in entry or not isinstance(entry.get("row"), dict):
        return "no 'id' or no 'row' object"
    if ("error" in entry) == ("scores" in entry):
        return "neither 'scores' nor 'error'" if "error" not in entry else "both 'scores' and 'error'"
    if "error" in entry:
        return None if isinstance(entry["error"], str) else f"error {entry['error']!r} is not a string"
    scores = entry["scores"]
    if not isinstance(scores, dict) or metric not in scores:
        return f"scores {scores!r} do not hold {metric!r}"
    for key, value in scores.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return f"score {key!r} is {value!r}, not a finite number"
    return None


def read_part(path: Path, part: int, chunk_size: int, metric: str, rows: int | None = None) -> Iterator[dict]:
    """The row entries of one part file, in order, each checked before it is yielded.

    Args:
        path: the part file.
        part: its number (the header must say so).
        chunk_size: the run's rows per part.
        metric: the run's metric (every scored row carries its score under this name).
        rows: the part's size in the source, when known.

    Raises:
        DamagedPartError: the file is missing, unreadable, or not as written (a garbage line, no header, a row
            missing or twice, a header that disagrees with the source, a non-finite score); the message names
            the file and the line.
    """
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise DamagedPartError(path, "is missing: run again to finish the corpus") from None
    except OSError as err:
        raise DamagedPartError(path, f"cannot be read ({err.strerror or err})") from err
    with fh:
        count = None
        for lineno, raw in enumerate(fh, 1):
            try:
                value = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise DamagedPartError(path, f"line {lineno} is not valid JSON ({err})") from None
            if count is None:
                problem = _header_problem(value, part, chunk_size, rows)
                if problem:
                    raise DamagedPartError(path, problem)
                count = value["rows"]
                continue
            if lineno - 1 > count:
                raise DamagedPartError(path, f"line {lineno}: more rows than the header's {count}")
            problem = _entry_problem(value, part * chunk_size + lineno - 2, metric)
            if problem:
                raise DamagedPartError(path, f"line {lineno}: {problem}")
            yield value
    if count is None:
        raise DamagedPartError(path, "is empty (no header line)")
    if lineno - 1 < count:
        raise DamagedPartError(path, f"holds {lineno - 1} rows where its header says {count}")


def check_part(path: Path, part: int, chunk_size: int, metric: str, rows: int | None = None) -> None:
    """Read a whole part file through ``read_part``; raises ``DamagedPartError`` unless it is complete."""
    for _ in read_part(path, part, chunk_size, metric, rows):
        pass


def merge_parts(
    output: Path, name: str, threshold: float | None, threshold_key: str, chunk_size: int
) -> dict:
    """Parts to ``scores.jsonl``, ``errors.jsonl`` and ``kept.jsonl``, streaming; checks every row once.

    Raises:
        DamagedPartError: a part is missing or damaged (the message names it).
        ValueError: ``threshold_key`` is not a per-row score.
    """
    scores_tmp = output / ".scores.jsonl.tmp"
    errors_tmp = output / ".errors.jsonl.tmp"
    kept_tmp = output / ".kept.jsonl.tmp"
    # Per key: a score some rows lack (RefPAC-S where a part had no references) is averaged over those that have it.
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    rows = scored = errors = kept = 0
    part = 0
    with (
        open(scores_tmp, "w", encoding="utf-8") as f_scores,
        open(errors_tmp, "w", encoding="utf-8") as f_errors,
        open(kept_tmp, "w", encoding="utf-8") as f_kept,
    ):
        while True:
            path = part_path(output, part)
            for entry in read_part(path, part, chunk_size, name):
                rows += 1
                head = {"index": entry["index"], "id": entry["id"]}
                if "error" in entry:
                    errors += 1
                    record = {**head, "error": entry["error"]}
                    f_scores.write(json.dumps(record, ensure_ascii=False) + "\n")
                    f_errors.write(json.dumps(record, ensure_ascii=False) + "\n")
                    continue
                scored += 1
                values = entry["scores"]
                for k, v in values.items():
                    totals[k] = totals.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
                f_scores.write(json.dumps({**head, **values}, ensure_ascii=False) + "\n")
                # A row without this score (no references for RefPAC-S) has nothing to pass the threshold with.
                if threshold is not None and values.get(threshold_key, -math.inf) >= threshold:
                    kept += 1
                    f_kept.write(json.dumps({**entry["row"], **values}, ensure_ascii=False) + "\n")
            if rows < (part + 1) * chunk_size:  # the first part with fewer than chunk_size rows is the last
                break
            part += 1
        if threshold is not None and scored and threshold_key not in counts:
            raise ValueError(
                f"threshold_key {threshold_key!r} is not a per-row score of this run (the parts in "
                f"{output / 'parts'} have {sorted(counts)})"
            )
        for fh in (f_scores, f_errors, f_kept):
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(scores_tmp, output / "scores.jsonl")
    os.replace(errors_tmp, output / "errors.jsonl")
    if threshold is not None:
        os.replace(kept_tmp, output / "kept.jsonl")
    else:
        kept_tmp.unlink()
    return {
        "rows": rows,
        "scored": scored,
        "errors": errors,
        "means": {k: v / counts[k] for k, v in totals.items()},
        "score_counts": counts,
        "kept": kept if threshold is not None else None,
        "parts": part + 1,
    }


def check_manifest(output: Path, manifest: dict) -> None:
    """Write ``run.json`` in a new output folder; in one that has it, refuse a run with other settings.

    Raises:
        ValueError: ``output`` holds a run whose manifest differs (the message names the keys that do).
    """
    path = output / "run.json"
    if path.is_file():
        try:
            previous = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            previous = err
        if not isinstance(previous, dict):
            problem = previous if isinstance(previous, Exception) else f"a JSON {type(previous).__name__}"
            raise ValueError(
                f"{path} is damaged (not the JSON object a run writes: {problem}): the settings of the run "
                f"{output} holds cannot be checked; choose another output folder, or empty this one to start afresh"
            )
        if previous != manifest:
            changed = sorted(k for k in set(previous) | set(manifest) if previous.get(k) != manifest.get(k))
            shown = "; ".join(
                f"{k}: {previous.get(k)!r:.200} there, {manifest.get(k)!r:.200} now" for k in changed
            )
            raise ValueError(
                f"{output} holds a run with other settings ({shown}): resume it with the same source, metric, "
                "model and options, or choose another output folder"
            )
        return
    atomic_write(path, lambda fh: fh.write(json.dumps(manifest, indent=2) + "\n"))


def claim_output_folder(output: Path) -> None:
    """Refuse an output folder that holds files but no run: capeval never writes into, nor deletes from, a folder
    it did not make (a mistyped ``--output`` pointing at a data folder).

    Raises:
        ValueError: the folder holds entries and no ``run.json``, naming a few of them.
    """
    if not output.is_dir() or (output / "run.json").exists():
        return
    entries = sorted(p.name for p in output.iterdir() if p.name != LOCK_NAME)
    if entries:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(
            f"{output} is not a capeval output folder (it holds {shown} and no run.json): give a new or empty "
            "folder; capeval writes nothing into a folder it did not make"
        )
