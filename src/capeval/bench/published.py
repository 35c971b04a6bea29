"""Access to ``published.json``, the only copy of published numbers; cards and the README are generated from it.

Each record names its paper and table (``source``), the row and column as printed, and where the paper's setting
differs from capeval's defaults, that ``setting`` as signature fields (``{"vectors": "word2vec-google-news-300"}``).
A record without a setting is comparable with a default run; one with a setting is compared only with a run whose
signature carries those fields, and shown beside other runs as "published in another setting".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

# Where a card's generated table sits: <!-- published: metric[,metric...] --> ... <!-- /published -->
CARD_BLOCK = re.compile(r"<!-- published: *([\w,]+) *-->\n(.*?)<!-- /published -->", re.S)


@dataclass(frozen=True)
class Published:
    """A published number: benchmark, column, metric key, value (x 100), its source and how the paper printed it."""

    benchmark: str
    column: str
    metric: str
    value: float
    source: str
    citation: str
    row: str = ""
    printed_column: str = ""
    printed_value: str | None = None
    setting: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def printed(self) -> str:
        """The value as printed in the paper (``0.48`` for a fraction, else ``48.0``)."""
        return self.printed_value or format_value(self.value)

    def setting_label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.setting.items())

    def matches(self, signature: str | None) -> bool:
        """True when a run with this signature is in the paper's setting (every setting field has its value,
        read up to the ``@`` of a revision)."""
        if not self.setting:
            return True
        fields = {}
        for part in (signature or "").split("|")[1:]:
            key, _, value = part.partition("=")
            fields[key] = value.split("@", 1)[0]
        return all(fields.get(k) == str(v) for k, v in self.setting.items())


def format_value(value: float) -> str:
    """``54.3``, ``53.0``, or all decimals of a figure printed with more (``53.919``)."""
    return f"{value:.1f}" if round(value, 1) == value else f"{value:g}"


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
                rec.get("row", ""),
                rec.get("printed_column", ""),
                rec.get("printed_value"),
                dict(rec.get("setting", {})),
            )
        )
    return tuple(values), dict(sources)


def published_values(benchmark: str | None = None, metric: str | None = None) -> list[Published]:
    """Published numbers (every setting), optionally for one benchmark and/or one metric key."""
    return [
        p
        for p in _load()[0]
        if (benchmark is None or p.benchmark == benchmark) and (metric is None or p.metric == metric)
    ]


def published_value(
    benchmark: str, metric: str, column: str, signature: str | None = None
) -> Published | None:
    """The published number comparable with a run: one in capeval's default setting, or with ``signature``, one
    whose setting that signature carries."""
    for p in _load()[0]:
        if p.benchmark == benchmark and p.metric == metric and p.column == column:
            if (not p.setting) or (signature is not None and p.matches(signature)):
                return p
    return None


def published_elsewhere(
    benchmark: str, metric: str, column: str, signature: str | None = None
) -> list[Published]:
    """Published numbers for this cell in a setting the run does not share (e.g. word2vec vs GloVe-6B-50d)."""
    return [
        p
        for p in _load()[0]
        if p.benchmark == benchmark
        and p.metric == metric
        and p.column == column
        and p.setting
        and not p.matches(signature)
    ]


def sources() -> dict[str, str]:
    """Citation of every source key."""
    return dict(_load()[1])


def card_table(metrics: list[str]) -> str:
    """The Markdown table of every published number of ``metrics``, in published.json's order, for a card.

    Columns: benchmark, the paper's row and column as printed, the setting where it is not capeval's default,
    the value (x 100; a fraction keeps its printed form beside it), the source (paper, table).
    """
    lines = [
        "| benchmark | row (as printed) | column (as printed) | paper's setting | value | source |",
        "|---|---|---|---|---|---|",
    ]
    for p in _load()[0]:
        if p.metric not in metrics:
            continue
        value = format_value(p.value) + (f" (printed {p.printed_value})" if p.printed_value else "")
        lines.append(
            f"| {p.benchmark} | {p.row} | {p.printed_column} | {p.setting_label() or 'default'} | {value} "
            f"| `{p.source}` |"
        )
    return "\n".join(lines) + "\n"


def render_cards(text: str) -> str:
    """``text`` with every ``<!-- published: ... -->`` block regenerated by :func:`card_table`."""
    return CARD_BLOCK.sub(
        lambda m: f"<!-- published: {m.group(1)} -->\n{card_table(m.group(1).split(','))}<!-- /published -->",
        text,
    )


def update_card(path: str | Path) -> bool:
    """Regenerate a card's published tables in place; True when the file changed."""
    path = Path(path)
    old = path.read_text(encoding="utf-8")
    new = render_cards(old)
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old
