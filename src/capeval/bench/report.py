"""The reproduction report: Markdown tables laid out like the papers', published values beside ours, plots.

Each cell reads ``ours (published, difference)``; a cell without a published number shows ours alone. Below
each table: the protocol notes, the metrics that were skipped and why, the signatures behind the numbers,
and a figure (drawn by :mod:`capeval.bench.plots`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from capeval.bench.plots import plot_run
from capeval.bench.published import published_value, published_values, sources
from capeval.bench.runner import BenchmarkRun
from capeval.scoring.metric_names import display_name


def format_cell(ours: float | None, published: float | None, digits: int = 1) -> str:
    """``41.2 (41.8, -0.60)`` (the difference one digit finer); ``41.2`` without a published value; ``–``
    without ours."""
    if ours is None or (isinstance(ours, float) and np.isnan(ours)):
        return "–" if published is None else f"– ({published:.{digits}f})"
    if published is None:
        return f"{ours:.{digits}f}"
    diff = ours - published
    diff = 0.0 if abs(diff) < 0.5 * 10 ** -(digits + 1) else diff  # no "-0.00"
    return f"{ours:.{digits}f} ({published:.{digits}f}, {diff:+.{digits + 1}f})"


def markdown_table(run: BenchmarkRun, digits: int = 1) -> str:
    """The benchmark's table: one row per metric, the paper's columns, published value and difference."""
    bench = run.benchmark
    header = "| Metric | " + " | ".join(h for _, h in bench.columns) + " |"
    sep = "|---|" + "---|" * len(bench.columns)
    lines = [header, sep]
    for key, outcome in run.outcomes.items():
        if outcome.skipped:
            continue
        cells = []
        for col, _ in bench.columns:
            pub = published_value(bench.name, key, col, outcome.signature)
            # A paper in another setting (word2vec vs GloVe-6B-50d) is no difference from ours: it goes to the
            # notes under the table (other_setting_notes), so every cell reads as the legend says.
            cells.append(format_cell(outcome.values.get(col), pub.value if pub else None, digits))
        lines.append(f"| {outcome.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def other_setting_notes(run: BenchmarkRun) -> list[str]:
    """Published numbers of the metrics that ran, in another setting (other word vectors) or a column this table
    lacks, so a reader sees the paper's value next to ours with the difference in setting named (``ours`` = the
    run's signature); the cells hold only the published values of the run's own setting."""
    columns = {c for c, _ in run.benchmark.columns}
    notes = []
    for key, outcome in run.outcomes.items():
        if outcome.skipped:
            continue
        for p in published_values(run.benchmark.name, key):
            if p.column in columns and p.matches(outcome.signature):
                continue  # beside ours in its cell
            ours = outcome.values.get(p.column)
            ours_text = f"ours {ours:.1f}" if ours is not None else "no column of ours to compare"
            setting = p.setting_label() or "capeval's default"
            notes.append(
                f"{outcome.name}: published {p.printed} ({p.row}, {p.printed_column}; setting {setting}; "
                f"`{p.source}`), {ours_text}"
            )
    return notes


def _published_only_rows(run: BenchmarkRun, digits: int) -> list[str]:
    """Published numbers of metrics that did not run here, so the paper's table is complete for comparison."""
    ran = {k for k, o in run.outcomes.items() if not o.skipped}
    by_row: dict[tuple[str, str], dict[str, float]] = {}
    for p in published_values(run.benchmark.name):
        if p.metric not in ran:
            by_row.setdefault((p.metric, p.setting_label()), {})[p.column] = p.value
    rows = []
    columns = [c for c, _ in run.benchmark.columns]
    for (metric, setting), cols in by_row.items():
        if not any(c in cols for c in columns):
            continue
        cells = [f"({cols[c]:.{digits}f})" if c in cols else "" for c in columns]
        label = f"{display_name(metric)} (published only" + (f"; {setting})" if setting else ")")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def write_report(
    runs: Sequence[BenchmarkRun],
    out_dir: str | os.PathLike,
    title: str = "capeval benchmark report",
    digits: int = 1,
    plots: bool = True,
    context: dict | None = None,
    stats: int = 0,
) -> Path:
    """Write ``report.md``, ``results.json`` and ``plots/<benchmark>.png`` into ``out_dir``; return the report.

    ``stats``: when > 0, add bootstrap intervals (this many resamples), Williams tests and the forward-selection
    analysis under each rating benchmark (:mod:`capeval.bench.analysis`).
    """
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    cited: set[str] = set()
    lines = _report_header(title, context)
    results = []
    for run in runs:
        bench = run.benchmark
        lines += [f"## {bench.title}", ""]
        if run.skipped:
            lines += [f"Not run: {run.skipped}", ""]
            results.append({"benchmark": bench.name, "skipped": run.skipped})
            continue
        lines += [f"Layout of {bench.table}. {len(run.dataset)} items.", ""]
        lines += [markdown_table(run, digits), *_published_only_rows(run, digits), ""]
        lines += [*_notes(run), ""]
        # Every value a cell or a note quotes is among the benchmark's own.
        cited.update(p.source for p in published_values(bench.name))
        lines += _figures(run, out / "plots", plots, stats)
        lines += _signatures_block(run)
        results.append(_run_results(run))
    lines += _sources_section(cited)
    report = out / "report.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return report


def _report_header(title: str, context: dict | None) -> list[str]:
    """The report's first lines: its title, capeval's version and the time, ``context`` as ``key: `value`.``
    pairs, and how to read a cell."""
    from capeval import __version__

    return [
        f"# {title}",
        "",
        f"capeval {__version__}, {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}."
        + "".join(f" {k}: `{v}`." for k, v in (context or {}).items()),
        "",
        "Cells read **ours (published, ours − published)**, all × 100; a metric without a published number shows "
        "ours alone. A paper's number in another setting (other word vectors) is listed under the table with that "
        "setting, never in a cell. Published numbers come from `capeval/bench/published.json` (sources at the end).",
        "",
    ]


def _notes(run: BenchmarkRun) -> list[str]:
    """The bullet list under a benchmark's table: its protocol notes, the papers' numbers in other settings,
    then per metric whether it was skipped (and why) and its own notes."""
    lines = [f"- {note}" for note in run.benchmark.notes]
    lines += [f"- {note}" for note in other_setting_notes(run)]
    for o in run.outcomes.values():
        if o.skipped:
            lines.append(f"- **{o.name} skipped**: {o.skipped}")
        lines += [f"- {o.name}: {note}" for note in o.notes]
    return lines


def _figures(run: BenchmarkRun, plots_dir: Path, plots: bool, stats: int) -> list[str]:
    """The statistics (``stats`` resamples; none when 0) and the figure (drawn into ``plots_dir``, linked as
    ``plots/<name>.png``) under a benchmark's table; the figure shows the statistics' intervals."""
    lines: list[str] = []
    analysis = None
    if stats:
        from capeval.bench.analysis import analysis_markdown, rating_analysis

        analysis = rating_analysis(run, n_resamples=stats)
        if analysis is not None:
            lines += analysis_markdown(analysis, stats)
    if plots:
        intervals = analysis.intervals if analysis is not None else None
        png = plot_run(run, plots_dir / f"{run.benchmark.name}.png", intervals=intervals)
        if png is not None:
            lines += [f"![{run.benchmark.title}](plots/{png.name})", ""]
    return lines


def _signatures_block(run: BenchmarkRun) -> list[str]:
    """A folded list of the signature, item counts and time of every metric that ran (none: no lines)."""
    sigs = [
        f"  - {o.name}: `{o.signature}` ({o.computed} computed, {o.cached} from cache, {o.seconds:.1f} s)"
        for o in run.outcomes.values()
        if o.signature and not o.skipped
    ]
    if not sigs:
        return []
    return ["<details><summary>Signatures</summary>", "", *sigs, "", "</details>", ""]


def _run_results(run: BenchmarkRun) -> dict[str, Any]:
    """A benchmark's entry in ``results.json``: item count, and per metric its values, the published values
    that match its signature (by column), those of other settings, its signature, skip reason and notes."""
    bench = run.benchmark
    return {
        "benchmark": bench.name,
        "items": len(run.dataset),
        "metrics": {
            k: {
                "name": o.name,
                "values": o.values,
                "published": {
                    c: p.value
                    for c, _ in bench.columns
                    if (p := published_value(bench.name, k, c, o.signature)) is not None
                },
                "published_other_settings": [
                    {"column": p.column, "value": p.value, "setting": p.setting, "source": p.source}
                    for p in published_values(bench.name, k)
                    if p.setting and not p.matches(o.signature)
                ],
                "signature": o.signature,
                "skipped": o.skipped,
                "notes": o.notes,
            }
            for k, o in run.outcomes.items()
        },
    }


def _sources_section(cited: set[str]) -> list[str]:
    """The closing section: each cited source key with its reference, sorted (none cited: no section)."""
    if not cited:
        return []
    src = sources()
    return ["## Sources of the published values", "", *(f"- `{k}`: {src[k]}" for k in sorted(cited)), ""]
