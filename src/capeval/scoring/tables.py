"""The table of a :class:`~capeval.scoring.systems.SystemScores`: aligned text, Markdown, CSV or JSON.

One row per system, one column per metric, a signature per metric. With one system and the text format the
table is the CLIPScore authors' printout (``CLIPScore: 0.7512`` a line, as their script and its
``--compute_other_ref_metrics`` print), so scripts that read it keep working. With a baseline compared, a second
table gives, per other system and metric, the difference to the baseline, its confidence interval and p-value.
"""

from __future__ import annotations

import csv
import io
import json

from capeval.scoring.systems import SystemScores

FORMATS = ("text", "markdown", "csv", "json")
DIGITS = 4  # as the CLIPScore authors' script prints


def _number(value: float) -> str:
    return f"{value:.{DIGITS}f}"


def _p(comparison) -> str:
    adjusted = getattr(comparison, "p_adjusted", None)
    return f"{comparison.p_value:.3g}" if adjusted is None else f"{adjusted:.3g} (Holm)"


def rows(result: SystemScores) -> tuple[list[str], list[list[str]]]:
    """Header and rows of strings: the system, then per metric its corpus score."""
    cols = result.columns()
    header = ["system", *(cols[key] for key in result.metrics)]
    body = [[name, *(_number(result.corpus[name][key]) for key in result.metrics)] for name in result.systems]
    return header, body


def comparison_rows(result: SystemScores) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the comparisons with the baseline: system, metric, delta, interval, p-value."""
    if result.baseline is None:
        return [], []
    cols = result.columns()
    first = _first_comparison(result)
    level = f"{100 * first.confidence:g}% CI" if first is not None else "CI"
    header = ["system", "metric", f"delta vs {result.baseline}", level, "p"]
    body = [
        [
            name,
            cols[key],
            f"{c.delta:+.{DIGITS}f}",
            f"[{c.ci_low:+.{DIGITS}f}, {c.ci_high:+.{DIGITS}f}]",
            _p(c),
        ]
        for name, by_metric in result.comparisons.items()
        for key, c in by_metric.items()
    ]
    return header, body


def _first_comparison(result: SystemScores):
    return next((c for by_metric in result.comparisons.values() for c in by_metric.values()), None)


def signature_lines(result: SystemScores) -> list[str]:
    return [f"signature: {result.signatures[key]}" for key in result.metrics]


def comparison_lines(result: SystemScores) -> list[str]:
    """How the systems were compared (one line), then the notes a reader of the comparison must know."""
    first = _first_comparison(result)
    if first is None:
        return notes(result)
    if first.method == "permutation" and first.exact:
        how = f"exact paired permutation test over all 2^{first.n} assignments"
    else:
        how = f"paired {first.method} test, {first.n_resamples} resamples, seed {first.seed}"
    line = (
        f"compared with {result.baseline}: delta = system - {result.baseline} per metric, two-sided p, {how}"
    )
    return [line, *notes(result)]


def notes(result: SystemScores) -> list[str]:
    """What a reader of a comparison must know: the metrics whose corpus score is not a mean were not compared."""
    if result.baseline is None:
        return []
    skipped = [result.columns()[k] for k in result.metrics if not result.corpus_is_mean[k]]
    if not skipped:
        return []
    return [
        f"not compared: {', '.join(skipped)} (the corpus score is computed from the whole corpus's statistics, "
        "not the mean of per-image scores, so a paired test of per-image scores does not test it)"
    ]


def _aligned(header: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    out = []
    for r in [header, *body]:
        cells = [r[0].ljust(widths[0]), *(cell.rjust(wd) for cell, wd in zip(r[1:], widths[1:], strict=True))]
        out.append("  ".join(cells).rstrip())
    return out


def _markdown(header: list[str], body: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        *("| " + " | ".join(r) + " |" for r in body),
    ]


def render(result: SystemScores, fmt: str = "text") -> str:
    """The table as text in ``fmt`` (``text``, ``markdown``, ``csv``, ``json``); CSV holds the table only (one
    row per system, the comparison in columns of its own; its signatures are :func:`signature_lines`), the
    others hold the signatures and the comparisons too.

    Raises:
        ValueError: an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(as_json(result), indent=2)
    header, body = rows(result)
    compared_header, compared = comparison_rows(result)
    if fmt == "csv":
        return _csv(result, header, body)
    if fmt == "markdown":
        lines = _markdown(header, body)
        if compared_header:
            lines += ["", *_markdown(compared_header, compared)]
        return "\n".join(
            [*lines, "", *(f"- `{line.removeprefix('signature: ')}`" for line in signature_lines(result))]
            + [f"- {line}" for line in comparison_lines(result)]
        )
    if len(result.systems) == 1:
        lines = [f"{h}: {v}" for h, v in zip(header[1:], body[0][1:], strict=True)]
    else:
        lines = _aligned(header, body)
    if compared_header:
        lines += ["", *_aligned(compared_header, compared), ""]
    return "\n".join(lines + signature_lines(result) + comparison_lines(result))


def _csv(result: SystemScores, header: list[str], body: list[list[str]]) -> str:
    """One row per system; once compared, each compared metric gains ``delta``, ``ci_low``, ``ci_high``, ``p``
    columns (empty on the baseline's row)."""
    cols = result.columns()
    compared = [k for k in result.metrics if any(k in by_metric for by_metric in result.comparisons.values())]
    fields = ("delta", "ci_low", "ci_high", "p_value")
    first = _first_comparison(result)
    if first is not None and first.p_adjusted is not None:
        fields += ("p_adjusted",)
    header = header + [f"{cols[k]} {f}" for k in compared for f in fields]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for name, row in zip(result.systems, body, strict=True):
        by_metric = result.comparisons.get(name, {})
        extra = [
            repr(float(getattr(by_metric[k], f))) if k in by_metric else "" for k in compared for f in fields
        ]
        writer.writerow(row + extra)
    return out.getvalue().rstrip("\n")


def as_json(result: SystemScores) -> dict:
    """The table as a JSON-ready dict: images, metrics (column, signature), systems' corpus scores, comparisons."""
    cols = result.columns()
    out: dict = {
        "images": len(result.ids),
        "metrics": {cols[k]: {"key": k, "signature": result.signatures[k]} for k in result.metrics},
        "systems": {
            name: {cols[k]: result.corpus[name][k] for k in result.metrics} for name in result.systems
        },
    }
    if result.baseline is not None:
        out["baseline"] = result.baseline
        out["comparisons"] = {
            name: {cols[k]: c.as_dict() for k, c in by_metric.items()}
            for name, by_metric in result.comparisons.items()
        }
        out["notes"] = notes(result)
    return out


def per_instance(result: SystemScores) -> dict:
    """The ``--save-per-instance`` content: ``{image id: {column: score}}`` for one system (the CLIPScore
    authors' file), ``{system: {image id: {column: score}}}`` for several."""
    if len(result.systems) == 1:
        return result.per_instance(result.systems[0])
    return {name: result.per_instance(name) for name in result.systems}
