"""Access to ``published.json``, the reproduction config of published numbers (the only copy besides the cards)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Published:
    """A published number: benchmark, table column, metric key, value (x 100) and its citation."""

    benchmark: str
    column: str
    metric: str
    value: float
    source: str
    citation: str


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[Published, ...], dict[str, str]]:
    text = resources.files("capeval.bench").joinpath("published.json").read_text(encoding="utf-8")
    data = json.loads(text)
    sources = data["sources"]
    values = []
    for rec in data["values"]:
        if rec["source"] not in sources:
            raise ValueError(f"published.json: value {rec} cites an unknown source {rec['source']!r}")
        values.append(
            Published(
                rec["benchmark"],
                rec["column"],
                rec["metric"],
                float(rec["value"]),
                rec["source"],
                sources[rec["source"]],
            )
        )
    return tuple(values), dict(sources)


def published_values(benchmark: str | None = None, metric: str | None = None) -> list[Published]:
    """Published numbers, optionally for one benchmark and/or one metric key."""
    return [
        p
        for p in _load()[0]
        if (benchmark is None or p.benchmark == benchmark) and (metric is None or p.metric == metric)
    ]


def published_value(benchmark: str, metric: str, column: str) -> Published | None:
    for p in _load()[0]:
        if p.benchmark == benchmark and p.metric == metric and p.column == column:
            return p
    return None


def sources() -> dict[str, str]:
    """Citation of every source key."""
    return dict(_load()[1])
