"""Timing helpers: medians of repeated runs, interleaved so machine noise hits every pipeline alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_interleaved(
    runs: dict[str, Callable[[], object]], repeats: int
) -> tuple[dict[str, list[float]], dict]:
    """Run each callable ``repeats`` times, round-robin; return all wall times and each one's last result."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    results: dict[str, object] = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)
    return times, results


def median(values: list[float]) -> float:
    return statistics.median(values)


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
