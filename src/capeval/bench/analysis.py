"""Significance and complementarity of the metrics that ran on a rating benchmark.

For the benchmark's headline correlation (the first table column, e.g. Kendall tau-c on Flickr8k-Expert):

- a 95% bootstrap interval per metric, resampling whole items (the three expert ratings of a caption together);
- Williams' test of the best metric against each other one (is its correlation with humans higher?);
- the forward-selection information-gain order of Hessel et al. (2021, sec. 4.6), by cross-validated R^2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capeval.bench.infogain import forward_selection
from capeval.bench.protocols import rating_rows
from capeval.bench.runner import BenchmarkRun
from capeval.bench.statistics import bootstrap_ci, correlation, williams_test_scores

MEASURES = {"kendall_c", "kendall_b", "spearman", "pearson"}


@dataclass
class RatingAnalysis:
    measure: str
    intervals: dict[str, tuple[float, float, float]] = field(
        default_factory=dict
    )  # estimate, low, high (x 100)
    best: str = ""
    williams: dict[str, tuple[float, float]] = field(default_factory=dict)  # other metric -> (t, one-sided p)
    selection: list[tuple[str, float]] = field(default_factory=list)  # (metric, R^2 after adding it)


def headline_intervals(
    run: BenchmarkRun, keys: list[str] | None = None, n_resamples: int = 200, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """95% bootstrap interval of the headline correlation per metric name: ``(estimate, low, high)`` x 100.

    Whole items are resampled (the three expert ratings of a caption together). ``n_resamples=0`` gives the
    estimate alone (low = high = estimate). Empty for a benchmark without a correlation headline.
    """
    bench = run.benchmark
    measure = bench.columns[0][0]
    if bench.kind != "rating" or measure not in MEASURES or run.dataset is None:
        return {}
    if keys is None:
        keys = [k for k, o in run.outcomes.items() if not o.skipped]
    keys = [k for k in keys if "default" in run.scores.get(k, {})]
    idx, human, groups = rating_rows(run.dataset, "A")
    out = {}
    for k in keys:
        s = run.scores[k]["default"][idx]
        if n_resamples <= 0:
            est = 100 * correlation(s, human, measure)
            out[run.outcomes[k].name] = (est, est, est)
            continue
        ci = bootstrap_ci(
            lambda a, h: correlation(a, h, measure),
            s,
            human,
            groups=groups,
            n_resamples=n_resamples,
            seed=seed,
        )
        out[run.outcomes[k].name] = (100 * ci.estimate, 100 * ci.low, 100 * ci.high)
    return out


def rating_analysis(
    run: BenchmarkRun, n_resamples: int = 200, seed: int = 0, folds: int = 10
) -> RatingAnalysis | None:
    """Bootstrap intervals, Williams tests and forward selection for a rating benchmark (None otherwise)."""
    bench = run.benchmark
    measure = bench.columns[0][0]
    if bench.kind != "rating" or measure not in MEASURES or run.dataset is None:
        return None
    keys = [k for k, o in run.outcomes.items() if not o.skipped and "default" in run.scores.get(k, {})]
    if not keys:
        return None
    idx, human, groups = rating_rows(run.dataset, "A")
    rows = {k: run.scores[k]["default"][idx] for k in keys}
    names = {k: run.outcomes[k].name for k in keys}
    out = RatingAnalysis(measure)
    out.intervals = headline_intervals(run, keys, n_resamples=n_resamples, seed=seed)
    best = max(keys, key=lambda k: out.intervals[names[k]][0])
    out.best = names[best]
    for k in keys:
        if k != best:
            w = williams_test_scores(human, rows[best], rows[k], method=measure)
            out.williams[names[k]] = (w.t, w.p_value)
    if len(keys) >= 2:
        sel = forward_selection(
            {names[k]: rows[k] for k in keys}, human, groups=groups, folds=folds, seed=seed
        )
        out.selection = list(zip(sel.order, sel.r2, strict=True))
    return out


def analysis_markdown(a: RatingAnalysis, n_resamples: int) -> list[str]:
    lines = [
        f"Statistics on the headline measure ({a.measure}, × 100): 95% bootstrap interval ({n_resamples} "
        f"resamples of whole items); Williams' test of {a.best} against each metric (one-sided p: {a.best} "
        "correlates more strongly).",
        "",
        "| Metric | estimate | 95% interval | Williams t | p |",
        "|---|---|---|---|---|",
    ]
    for name, (est, lo, hi) in sorted(a.intervals.items(), key=lambda kv: -kv[1][0]):
        t, p = a.williams.get(name, (np.nan, np.nan))
        t_cell = "–" if np.isnan(t) else f"{t:.2f}"
        p_cell = "–" if np.isnan(p) else (f"{p:.1e}" if p < 1e-3 else f"{p:.3f}")
        lines.append(f"| {name} | {est:.1f} | [{lo:.1f}, {hi:.1f}] | {t_cell} | {p_cell} |")
    if a.selection:
        steps = " → ".join(f"{name} ({r2:.3f})" for name, r2 in a.selection)
        lines += [
            "",
            f"Forward selection (Hessel et al. 2021, sec. 4.6; cross-validated R² after each step): {steps}",
        ]
    lines.append("")
    return lines
