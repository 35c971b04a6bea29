"""The table of a :class:`~capeval.scoring.systems.SystemScores`: aligned text, Markdown, CSV or JSON.

One row per system, one column per metric, a signature per metric. With one system and the text format the
table is the CLIPScore authors' printout (``CLIPScore: 0.7512`` a line, as their script and its
``--compute_other_ref_metrics`` print), so scripts that read it keep working. With a baseline compared, each other
system's row gains, per metric, the difference to the baseline, its confidence interval and p-value.
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


def _delta(comparison) -> str:
    """``+0.0123 [-0.0040, +0.0290] p=0.142`` of one comparison."""
    return (
        f"{comparison.delta:+.{DIGITS}f} [{comparison.ci_low:+.{DIGITS}f}, {comparison.ci_high:+.{DIGITS}f}] "
        f"p={comparison.p_value:.3g}"
    )


def rows(result: SystemScores) -> tuple[list[str], list[list[str]]]:
    """Header and rows of strings: the system, then per metric its score (and, once compared, its difference to
    the baseline in a column of its own)."""
    cols = result.columns()
    header = ["system"]
    for key in result.metrics:
        header.append(cols[key])
        if result.baseline is not None:
            header.append(f"{cols[key]} vs {result.baseline}")
    body = []
    for name in result.systems:
        row = [name]
        for key in result.metrics:
            row.append(_number(result.corpus[name][key]))
            if result.baseline is not None:
                comparison = result.comparisons.get(name, {}).get(key)
                row.append(_delta(comparison) if comparison is not None else "")
        body.append(row)
    return header, body


def signature_lines(result: SystemScores) -> list[str]:
    return [f"signature: {result.signatures[key]}" for key in result.metrics]


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


def render(result: SystemScores, fmt: str = "text") -> str:
    """The table as text in ``fmt`` (``text``, ``markdown``, ``csv``, ``json``); CSV holds the table only (its
    signatures are :func:`signature_lines`), the others hold the signatures too.

    Raises:
        ValueError: an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(as_json(result), indent=2)
    header, body = rows(result)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(body)
        return out.getvalue().rstrip("\n")
    if fmt == "markdown":
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        lines += ["", *[f"- `{result.signatures[k]}`" for k in result.metrics]]
        return "\n".join(lines + [f"- {note}" for note in notes(result)])
    if len(result.systems) == 1 and result.baseline is None:
        lines = [f"{h}: {v}" for h, v in zip(header[1:], body[0][1:], strict=True)]
    else:
        widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
        align = [str.ljust] + [str.rjust] * (len(header) - 1)
        lines = [
            "  ".join(a(cell, wd) for a, cell, wd in zip(align, r, widths, strict=True)).rstrip()
            for r in [header, *body]
        ]
    return "\n".join(lines + signature_lines(result) + notes(result))


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
            name: {cols[k]: _comparison_json(c) for k, c in by_metric.items()}
            for name, by_metric in result.comparisons.items()
        }
        out["notes"] = notes(result)
    return out


def _comparison_json(comparison) -> dict:
    fields = ("mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_value")
    out = {f: float(getattr(comparison, f)) for f in fields if hasattr(comparison, f)}
    for f in ("method", "n_resamples", "confidence"):
        if hasattr(comparison, f):
            out[f] = getattr(comparison, f)
    return out


def per_instance(result: SystemScores) -> dict:
    """The ``--save-per-instance`` content: ``{image id: {column: score}}`` for one system (the CLIPScore
    authors' file), ``{system: {image id: {column: score}}}`` for several."""
    if len(result.systems) == 1:
        return result.per_instance(result.systems[0])
    return {name: result.per_instance(name) for name in result.systems}
