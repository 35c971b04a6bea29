"""The report's figures: what each shows is computed first (:func:`figure_data`, tested), then drawn (:func:`plot_run`).

- Rating benchmarks: one panel per metric, its scores in bins of the human rating, each bin labelled with its
  number of items (Flickr8k-CF's yes-fractions, mostly 0, are binned in equal-width bins so the few high
  ratings stay visible); and a panel of the headline correlation (e.g. Kendall tau-c) per metric with its 95%
  bootstrap interval and the published value as a separate marker.
- Pairwise benchmarks (Pascal-50S, Abstract-50S, FOIL): accuracy per column, ours as bars and the published
  values as markers beside them, on an axis that starts at 50 % (chance for two captions).
- A metric whose scores are (nearly) constant, such as per-sentence BLEU-4 (almost all 0), gives an empty-looking
  box panel on a 1e-4 axis: it is not drawn, and the figure says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capeval.bench.published import published_value
from capeval.bench.runner import BenchmarkRun

MAX_LEVELS = 8  # at most this many distinct human ratings get one box each; more are binned
N_BINS = 5  # equal-width bins over the rating range when binned
DEGENERATE_RANGE = 1e-3  # central scores spanning less than this (metric units) draw a flat panel
DEGENERATE_SHARE = 0.9  # the share of the scores ("central") that must span at least DEGENERATE_RANGE
CHANCE = 50.0  # pairwise accuracy of a coin flip (%)
PLOT_RESAMPLES = 200  # bootstrap resamples for the interval panel when the report computed none
CI_MEASURES = {"kendall_c", "kendall_b", "spearman", "pearson"}


@dataclass
class RatingPanel:
    """Scores of one metric grouped by human-rating bin."""

    metric: str
    setting: str
    labels: list[str]
    counts: list[int]
    groups: list[np.ndarray]


@dataclass
class FigureData:
    """Everything a figure draws, without drawing it."""

    kind: str  # "rating" or "pairwise"
    title: str
    panels: list[RatingPanel] = field(default_factory=list)
    omitted: dict[str, str] = field(default_factory=dict)  # metric -> why no panel
    measure: str = ""  # headline correlation column (rating)
    measure_label: str = ""
    intervals: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # metric -> est, lo, hi
    published: dict[str, float] = field(default_factory=dict)  # metric -> published headline value
    categories: list[str] = field(default_factory=list)  # pairwise columns
    accuracy: dict[str, list[float]] = field(default_factory=dict)  # metric -> per column
    published_accuracy: dict[str, list[float]] = field(
        default_factory=dict
    )  # metric -> per column, NaN if none
    ylim: tuple[float, float] | None = None


def rating_bins(human: np.ndarray) -> tuple[np.ndarray, list[str], list[int]]:
    """Bin index per item, bin labels and items per bin.

    Up to :data:`MAX_LEVELS` distinct ratings: one bin each, labelled by the rating. More (Flickr8k-CF's
    fractions, averaged ratings): :data:`N_BINS` equal-width bins over the observed range, labelled
    ``[low, high)`` (the last one closed), empty bins kept so the axis stays linear in the rating.
    """
    human = np.asarray(human, dtype=float)
    levels = np.unique(human)
    if len(levels) <= MAX_LEVELS:
        bins = np.searchsorted(levels, human)
        labels = [f"{v:.3g}" for v in levels]
    else:
        edges = np.linspace(levels[0], levels[-1], N_BINS + 1)
        bins = np.clip(np.searchsorted(edges, human, side="right") - 1, 0, N_BINS - 1)
        labels = [
            f"[{edges[i]:.2g}, {edges[i + 1]:.2g}" + ("]" if i == N_BINS - 1 else ")") for i in range(N_BINS)
        ]
    counts = np.bincount(bins, minlength=len(labels)).tolist()
    return bins, labels, counts


def degenerate_reason(scores: np.ndarray) -> str | None:
    """Why a box panel of these scores would show nothing (None when it shows something).

    Boxes and whiskers follow the bulk of the scores (outliers are not drawn), so the panel is flat when the
    central :data:`DEGENERATE_SHARE` of the scores spans less than :data:`DEGENERATE_RANGE`: per-sentence BLEU-4
    on Flickr8k-CF is almost always ~0 and drew on a 1e-4 axis.
    """
    s = np.asarray(scores, dtype=float)
    s = s[np.isfinite(s)]
    if len(s) < 2:
        return f"{len(s)} finite scores"
    tail = (1 - DEGENERATE_SHARE) / 2
    low, high = (float(q) for q in np.quantile(s, [tail, 1 - tail]))
    if high - low < DEGENERATE_RANGE:
        return f"{100 * DEGENERATE_SHARE:.0f} % of the scores lie in [{low:.2g}, {high:.2g}]"
    return None


def _score_setting(per_setting: dict[str, np.ndarray]) -> str:
    return "default" if "default" in per_setting else sorted(per_setting)[-1]


def _intervals(run: BenchmarkRun, keys: list[str], n_resamples: int) -> dict[str, tuple[float, float, float]]:
    from capeval.bench.analysis import headline_intervals

    return headline_intervals(run, keys, n_resamples=n_resamples)


def figure_data(
    run: BenchmarkRun,
    intervals: dict[str, tuple[float, float, float]] | None = None,
    n_resamples: int = PLOT_RESAMPLES,
) -> FigureData | None:
    """What :func:`plot_run` draws for this run, or None when no metric ran.

    Args:
        run: a finished benchmark run.
        intervals: headline-correlation intervals per metric name (``(estimate, low, high)``, x 100), e.g. from
            :func:`capeval.bench.analysis.rating_analysis`; computed here with ``n_resamples`` when None.
        n_resamples: bootstrap resamples when ``intervals`` is None (0: point estimates only).
    """
    keys = [k for k, o in run.outcomes.items() if not o.skipped and k in run.scores]
    if not keys or run.dataset is None:
        return None
    bench = run.benchmark
    names = {k: run.outcomes[k].name for k in keys}
    if bench.kind == "pairwise":
        cols = [c for c, _ in bench.columns]
        data = FigureData("pairwise", f"{bench.title}: pairwise accuracy")
        data.categories = [h for _, h in bench.columns]
        lowest = CHANCE
        for k in keys:
            vals = [float(run.outcomes[k].values.get(c, np.nan)) for c in cols]
            sig = (
                run.outcomes[k].signature or None
            )  # a paper's figure is drawn only beside a run in its setting
            pubs = [(p.value if (p := published_value(bench.name, k, c, sig)) else np.nan) for c in cols]
            data.accuracy[names[k]] = vals
            data.published_accuracy[names[k]] = pubs
            finite = [v for v in vals + pubs if np.isfinite(v)]
            lowest = min([lowest, *finite])
        # From chance; a metric below chance widens the axis rather than vanishing under it.
        data.ylim = (CHANCE if lowest >= CHANCE else 10 * np.floor(lowest / 10), 100.0)
        return data
    data = FigureData("rating", f"{bench.title}: metric score by human rating")
    human = np.array([float(np.mean(h)) for h in run.dataset["human_scores"]])
    bins, labels, counts = rating_bins(human)
    for k in keys:
        setting = _score_setting(run.scores[k])
        s = np.asarray(run.scores[k][setting], dtype=float)
        reason = degenerate_reason(s)
        if reason is not None:
            data.omitted[names[k]] = reason
            continue
        groups = [s[bins == b] for b in range(len(labels))]
        data.panels.append(RatingPanel(names[k], setting, labels, counts, groups))
    measure, label = bench.columns[0]
    if bench.kind == "rating" and measure in CI_MEASURES:
        data.measure, data.measure_label = measure, label
        data.intervals = dict(intervals) if intervals is not None else _intervals(run, keys, n_resamples)
        for k in keys:
            p = published_value(bench.name, k, measure, run.outcomes[k].signature or None)
            if p is not None:
                data.published[names[k]] = p.value
    return data


def _draw_pairwise(data: FigureData, plt):
    metrics = list(data.accuracy)
    n_cols = len(data.categories)
    fig, ax = plt.subplots(figsize=(min(12.0, 2.5 + 0.3 * n_cols * len(metrics)), 3.6))
    width = 0.8 / len(metrics)
    x = np.arange(n_cols)
    for j, name in enumerate(metrics):
        pos = x + j * width
        bars = ax.bar(pos, data.accuracy[name], width, label=name)
        pubs = np.array(data.published_accuracy[name], dtype=float)
        if np.isfinite(pubs).any():
            ax.plot(
                pos,
                pubs,
                ls="none",
                marker="D",
                ms=5,
                mfc="white",
                mec=bars.patches[0].get_facecolor(),
                mew=1.5,
            )
    if any(np.isfinite(v).any() for v in data.published_accuracy.values()):
        ax.plot([], [], ls="none", marker="D", mfc="white", mec="black", label="published")
    ax.set_xticks(x + 0.4 - width / 2, data.categories)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(*data.ylim)
    if data.ylim[0] < CHANCE:
        ax.axhline(CHANCE, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"{data.title} (axis from {data.ylim[0]:.0f} %, chance = {CHANCE:.0f} %)", fontsize=10)
    return fig


def _draw_rating(data: FigureData, plt):
    n_box = len(data.panels)
    n = n_box + (1 if data.intervals else 0)
    if n == 0:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(0, 0.5, _omitted_note(data), fontsize=8, va="center", wrap=True)
        return fig
    ncols = min(3, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    flat = axes.ravel()
    for ax, panel in zip(flat, data.panels, strict=False):
        ax.boxplot([g if len(g) else [np.nan] for g in panel.groups], showfliers=False)
        ticks = [f"{lab}\nn={c:,}" for lab, c in zip(panel.labels, panel.counts, strict=True)]
        ax.set_xticks(range(1, len(ticks) + 1), ticks, fontsize=6)
        ax.set_title(panel.metric + ("" if panel.setting == "default" else f" ({panel.setting})"), fontsize=9)
        ax.set_xlabel("human rating (mean per item)", fontsize=8)
        ax.set_ylabel("score", fontsize=8)
    if data.intervals:
        ax = flat[n_box]
        names = sorted(data.intervals, key=lambda m: data.intervals[m][0])
        y = np.arange(len(names))
        est = np.array([data.intervals[m][0] for m in names])
        lo = np.array([data.intervals[m][1] for m in names])
        hi = np.array([data.intervals[m][2] for m in names])
        ax.errorbar(est, y, xerr=[est - lo, hi - est], fmt="o", color="C0", capsize=3, label="ours, 95% CI")
        pub = [(data.published.get(m, np.nan)) for m in names]
        if np.isfinite(pub).any():
            # a row below ours, so equal values stay distinguishable
            ax.plot(pub, y - 0.25, ls="none", marker="D", mfc="white", mec="C3", mew=1.5, label="published")
        ax.set_yticks(y, names, fontsize=7)
        ax.set_xlabel(f"{data.measure_label} × 100", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{data.measure_label} per metric", fontsize=9)
    for ax in flat[n:]:
        ax.axis("off")
    title = data.title + (f"\n{_omitted_note(data)}" if data.omitted else "")
    fig.suptitle(title, fontsize=9)
    return fig


def _omitted_note(data: FigureData) -> str:
    return "not drawn: " + "; ".join(f"{m} ({why})" for m, why in data.omitted.items())


def plot_run(
    run: BenchmarkRun,
    path: str | os.PathLike,
    intervals: dict[str, tuple[float, float, float]] | None = None,
    n_resamples: int = PLOT_RESAMPLES,
) -> Path | None:
    """Draw :func:`figure_data` of ``run`` into the PNG ``path``; None when there is nothing to draw."""
    data = figure_data(run, intervals, n_resamples)
    if data is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = _draw_pairwise(data, plt) if data.kind == "pairwise" else _draw_rating(data, plt)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
