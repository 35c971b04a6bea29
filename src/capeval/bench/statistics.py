"""Agreement statistics: rank and linear correlations, Williams test, bootstrap intervals, pairwise accuracy.

Correlations are scipy's (``kendalltau`` with ``variant="b"`` or ``"c"``, ``spearmanr``, ``pearsonr``) so that
numbers match what the papers computed; this module only fixes the conventions (x 100 is left to the report)
and adds the two tests scipy lacks: Williams' test for dependent correlations and paired bootstrap intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CORRELATIONS = ("kendall_b", "kendall_c", "spearman", "pearson")


def _pair(x, y, name: str = "scores") -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"got {x.size} {name} for {y.size} human judgments")
    if x.size < 2:
        raise ValueError(f"a correlation needs at least 2 items, got {x.size}")
    bad = ~(np.isfinite(x) & np.isfinite(y))
    if bad.any():
        raise ValueError(f"{name} item {int(np.flatnonzero(bad)[0])} is NaN or infinite")
    return x, y


def kendall_tau(x: Sequence[float], y: Sequence[float], variant: str = "b") -> float:
    """Kendall's tau-b (ties adjusted) or tau-c (Stuart's, for rectangular tables) through scipy.

    Tau-c is what Flickr8k-Expert and Composite use (Hessel et al. 2021, app. A); tau-b is Flickr8k-CF's.
    """
    if variant not in ("b", "c"):
        raise ValueError(f"variant must be 'b' or 'c', got {variant!r}")
    x, y = _pair(x, y)
    return float(stats.kendalltau(x, y, variant=variant).statistic)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho through scipy."""
    x, y = _pair(x, y)
    return float(stats.spearmanr(x, y).statistic)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r through scipy."""
    x, y = _pair(x, y)
    return float(stats.pearsonr(x, y).statistic)


def correlation(x: Sequence[float], y: Sequence[float], method: str) -> float:
    """One of ``kendall_b``, ``kendall_c``, ``spearman``, ``pearson``."""
    if method == "kendall_b":
        return kendall_tau(x, y, "b")
    if method == "kendall_c":
        return kendall_tau(x, y, "c")
    if method == "spearman":
        return spearman(x, y)
    if method == "pearson":
        return pearson(x, y)
    raise ValueError(f"unknown correlation {method!r}; choose from {', '.join(CORRELATIONS)}")


@dataclass(frozen=True)
class WilliamsResult:
    """Williams' t for H0: corr(metric1, human) == corr(metric2, human)."""

    r12: float
    r13: float
    r23: float
    n: int
    t: float
    df: int
    p_value: float


def williams_test(r12: float, r13: float, r23: float, n: int, alternative: str = "greater") -> WilliamsResult:
    """Williams (1959) test for two dependent correlations that share one variable.

    As used for caption metrics by Kilickaya et al. (2017, eq. 1-2, after Graham & Baldwin 2014): variable 1
    is the human judgment, 2 and 3 the two metrics, ``r23`` the correlation between the metrics::

        |R| = 1 - r12^2 - r13^2 - r23^2 + 2 r12 r13 r23
        t   = (r12 - r13) sqrt((n - 1)(1 + r23))
              / sqrt(2 |R| (n - 1) / (n - 3) + ((r12 + r13)^2 / 4) (1 - r23)^3),   df = n - 3

    Args:
        r12: correlation of metric A with humans.
        r13: correlation of metric B with humans.
        r23: correlation between metrics A and B.
        n: number of items.
        alternative: ``"greater"`` (A correlates more strongly than B, one-sided as in Graham & Baldwin),
            ``"less"`` or ``"two-sided"``.
    """
    for name, r in (("r12", r12), ("r13", r13), ("r23", r23)):
        if not -1.0 <= r <= 1.0:
            raise ValueError(f"{name} must be a correlation in [-1, 1], got {r}")
    if n <= 3:
        raise ValueError(f"the Williams test needs n > 3 items, got {n}")
    det = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    denom = 2 * det * (n - 1) / (n - 3) + ((r12 + r13) ** 2 / 4) * (1 - r23) ** 3
    if denom <= 0:
        raise ValueError("degenerate correlations (|R| and 1 - r23 are both 0): the test is undefined")
    t = (r12 - r13) * np.sqrt((n - 1) * (1 + r23)) / np.sqrt(denom)
    df = n - 3
    if alternative == "greater":
        p = stats.t.sf(t, df)
    elif alternative == "less":
        p = stats.t.cdf(t, df)
    elif alternative == "two-sided":
        p = 2 * stats.t.sf(abs(t), df)
    else:
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    return WilliamsResult(float(r12), float(r13), float(r23), int(n), float(t), df, float(p))


def williams_test_scores(
    human: Sequence[float],
    metric_a: Sequence[float],
    metric_b: Sequence[float],
    method: str = "pearson",
    alternative: str = "greater",
) -> WilliamsResult:
    """Williams' test from per-item scores: is metric A's correlation with humans higher than B's?"""
    a, h = _pair(metric_a, human, "metric_a scores")
    b, _ = _pair(metric_b, human, "metric_b scores")
    return williams_test(
        correlation(a, h, method), correlation(b, h, method), correlation(a, b, method), len(h), alternative
    )


@dataclass(frozen=True)
class BootstrapResult:
    """Point estimate and percentile confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    n_resamples: int


def bootstrap_ci(
    statistic: Callable[..., float],
    *arrays: Sequence,
    groups: Sequence | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapResult:
    """Paired percentile bootstrap of ``statistic(*arrays)``.

    Items are resampled together across ``arrays`` (paired). With ``groups`` (e.g. the image or caption id),
    whole groups are resampled, so the three ratings of one Flickr8k caption stay together.
    """
    if not arrays:
        raise ValueError("bootstrap_ci needs at least one array")
    arrs = [np.asarray(a) for a in arrays]
    n = len(arrs[0])
    for i, a in enumerate(arrs):
        if len(a) != n:
            raise ValueError(f"array {i} has {len(a)} items, array 0 has {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    estimate = float(statistic(*arrs))
    if groups is None:
        members = [np.array([i]) for i in range(n)]
    else:
        groups = np.asarray(groups)
        if len(groups) != n:
            raise ValueError(f"groups has {len(groups)} items, arrays have {n}")
        _, inverse = np.unique(groups, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.flatnonzero(np.diff(inverse[order])) + 1
        members = np.split(order, bounds)
    k = len(members)
    values = np.empty(n_resamples)
    for r in range(n_resamples):
        pick = rng.integers(0, k, size=k)
        idx = np.concatenate([members[j] for j in pick])
        values[r] = statistic(*(a[idx] for a in arrs))
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(values, [alpha, 1 - alpha])
    return BootstrapResult(estimate, float(low), float(high), confidence, n_resamples)


def pairwise_accuracy(
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    labels: Sequence[int],
    ties: str = "half",
    seed: int = 0,
) -> float:
    """Share of pairs where the metric prefers the caption people preferred.

    Args:
        scores_a, scores_b: metric score of the first and second caption of each pair.
        labels: 0 when people preferred the first caption, 1 for the second.
        ties: what a metric tie counts as: ``"half"`` (half a correct answer, the expectation of a coin flip;
            the default), ``"random"`` (a seeded coin flip), ``"wrong"`` or ``"first"`` (the first caption wins).
    """
    a = np.asarray(scores_a, dtype=np.float64)
    b = np.asarray(scores_b, dtype=np.float64)
    y = np.asarray(labels)
    if not (a.shape == b.shape == y.shape):
        raise ValueError(f"got {a.size} first scores, {b.size} second scores and {y.size} labels")
    if a.size == 0:
        raise ValueError("no pairs to score")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be 0 or 1, got {sorted(set(y.tolist()) - {0, 1})[:3]}")
    correct = np.where(a > b, y == 0, y == 1).astype(np.float64)
    tie = a == b
    if ties == "half":
        correct[tie] = 0.5
    elif ties == "random":
        coin = np.random.default_rng(seed).integers(0, 2, size=a.size)
        correct[tie] = (coin == y)[tie]
    elif ties == "wrong":
        correct[tie] = 0.0
    elif ties == "first":
        correct[tie] = (y == 0)[tie]
    else:
        raise ValueError(f"ties must be 'half', 'random', 'wrong' or 'first', got {ties!r}")
    return float(correct.mean())
