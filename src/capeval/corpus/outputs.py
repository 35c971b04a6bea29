"""The files of a corpus run: atomic writes, one file per part, the merged outputs and the run's manifest.

A part file (``parts/part-NNNNNNNN.jsonl``) starts with a header line (``part``, ``start``, ``rows``, ``last``)
followed by one line per input row; it is written through a temporary file and renamed, so it exists complete
or not at all. ``merge_parts`` streams the parts, in order, into ``scores.jsonl``, ``errors.jsonl`` and
``kept.jsonl``, checking that every row is there once. ``run.json`` (the manifest) records the settings of the
run a folder holds, so a resume with other settings is refused instead of mixing two runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capeval.corpus.items import Item

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


def merge_parts(output: Path, name: str, threshold: float | None, threshold_key: str) -> dict:
    """Parts to ``scores.jsonl``, ``errors.jsonl`` and ``kept.jsonl``, streaming; checks every row once."""
    scores_tmp = output / ".scores.jsonl.tmp"
    errors_tmp = output / ".errors.jsonl.tmp"
    kept_tmp = output / ".kept.jsonl.tmp"
    totals: dict[str, float] = {}
    rows = scored = errors = kept = 0
    expected = 0
    part = 0
    with (
        open(scores_tmp, "w", encoding="utf-8") as f_scores,
        open(errors_tmp, "w", encoding="utf-8") as f_errors,
        open(kept_tmp, "w", encoding="utf-8") as f_kept,
    ):
        while True:
            path = part_path(output, part)
            if not path.is_file():
                raise RuntimeError(f"part {part} ({path.name}) is missing: run again to finish the corpus")
            with open(path, encoding="utf-8") as fh:
                header = json.loads(fh.readline())
                count = 0
                for line in fh:
                    entry = json.loads(line)
                    if entry["index"] != expected:
                        raise RuntimeError(
                            f"{path.name}: row {entry['index']} where row {expected} was expected"
                        )
                    expected += 1
                    count += 1
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
                    f_scores.write(json.dumps({**head, **values}, ensure_ascii=False) + "\n")
                    if threshold is not None and values[threshold_key] >= threshold:
                        kept += 1
                        f_kept.write(json.dumps({**entry["row"], **values}, ensure_ascii=False) + "\n")
            if count != header["rows"]:
                raise RuntimeError(f"{path.name} holds {count} rows, its header says {header['rows']}")
            rows += count
            if header["last"]:
                break
            part += 1
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
        "means": {k: v / scored for k, v in totals.items()} if scored else {},
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
        previous = json.loads(path.read_text())
        if previous != manifest:
            changed = sorted(k for k in set(previous) | set(manifest) if previous.get(k) != manifest.get(k))
            raise ValueError(
                f"{output} holds a run with other settings ({', '.join(changed)} differ): resume it with the same "
                "source, metric, model and options, or choose another output folder"
            )
        return
    atomic_write(path, lambda fh: fh.write(json.dumps(manifest, indent=2) + "\n"))
