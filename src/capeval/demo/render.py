"""What a demo shows: the ranked score table (HTML), the corpus score line, and matrix heatmaps.

Every visitor-typed string is HTML-escaped before it is shown. Figures are built on matplotlib's
object API (no pyplot state), so concurrent requests cannot draw into each other's figures.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

_STYLE = """
<style>
.capeval-ranked {border-collapse: collapse; width: 100%; font-size: 0.95em}
.capeval-ranked th, .capeval-ranked td {padding: 4px 8px; border-bottom: 1px solid #ddd; text-align: left}
.capeval-ranked td.num {font-variant-numeric: tabular-nums; white-space: nowrap}
.capeval-bar {display: inline-block; height: 0.7em; background: #4c8bf5; margin-left: 6px; vertical-align: middle}
.capeval-ranked tr.first td {font-weight: 600}
</style>
"""


@dataclass
class Row:
    """One scored caption: its text, headline score and the other columns (name -> value)."""

    caption: str
    score: float
    extra: dict[str, float | str] = field(default_factory=dict)


def ranked(rows: Sequence[Row]) -> list[Row]:
    """Rows sorted by score, best first; ties keep input order."""
    return sorted(rows, key=lambda r: -r.score)


def _fmt(value) -> str:
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "n/a"
        return "inf" if np.isinf(value) else f"{float(value):.4f}"
    return html.escape(str(value))


def ranked_table(
    rows: Sequence[Row], headline: str, scale: float | None, table_id: str = "capeval-ranked"
) -> str:
    """HTML table of the captions ranked by score, with a bar per score.

    ``scale`` is the score that fills a bar; ``None`` scales the bars to the best score of the table.

    Each row carries ``data-rank``, ``data-caption`` and ``data-score`` for scripts and tests.
    """
    order = ranked(rows)
    if scale is None:
        finite = [r.score for r in order if np.isfinite(r.score)]
        scale = max(finite) if finite and max(finite) > 0 else 1.0
    extra_names = list(order[0].extra) if order else []
    head = "".join(f"<th>{html.escape(n)}</th>" for n in ["#", "caption", headline, *extra_names])
    body = []
    for rank, row in enumerate(order, start=1):
        width = 0 if not np.isfinite(row.score) else max(0.0, min(1.0, row.score / scale)) * 120
        cells = [
            f'<td class="num">{rank}</td>',
            f'<td class="caption">{html.escape(row.caption)}</td>',
            f'<td class="num score">{_fmt(row.score)}<span class="capeval-bar" style="width:{width:.0f}px"></span></td>',
            *(f'<td class="num">{_fmt(row.extra[n])}</td>' for n in extra_names),
        ]
        cls = ' class="first"' if rank == 1 else ""
        body.append(
            f'<tr{cls} data-rank="{rank}" data-caption="{html.escape(row.caption, quote=True)}" '
            f'data-score="{row.score:.6f}">{"".join(cells)}</tr>'
        )
    return (
        f'{_STYLE}<div style="overflow-x:auto"><table class="capeval-ranked" id="{table_id}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def corpus_line(headline: str, value: float, n: int, extra: dict[str, float] | None = None) -> str:
    """Markdown: the corpus score in bold, what it averages, and any other corpus figures."""
    parts = [f"## {html.escape(headline)}: **{value:.4f}**", f"mean over {n} caption{'s' if n != 1 else ''}"]
    line = f"{parts[0]}  \n{parts[1]}"
    for name, v in (extra or {}).items():
        line += f"; {html.escape(name)} {v:.4f}"
    return line


def heatmap(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    xlabel: str,
    ylabel: str,
    annotate: bool = True,
    cmap: str = "viridis",
):
    """A matplotlib ``Figure`` of ``matrix`` (rows x columns) with its labels and a colour bar."""
    from matplotlib.figure import Figure

    matrix = np.asarray(matrix, dtype=float)
    rows, cols = matrix.shape
    fig = Figure(figsize=(min(14, 2.5 + 0.6 * cols), min(10, 1.8 + 0.45 * rows)), layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(matrix, aspect="auto", cmap=cmap)
    ax.set_xticks(range(cols), labels=list(col_labels), rotation=45, ha="right")
    ax.set_yticks(range(rows), labels=list(row_labels))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate and rows * cols <= 400:
        hi = np.nanmax(matrix) if matrix.size else 0
        for i in range(rows):
            for j in range(cols):
                v = matrix[i, j]
                if np.isfinite(v) and v != 0:
                    color = "black" if hi and v > 0.6 * hi else "white"
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color=color)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig
