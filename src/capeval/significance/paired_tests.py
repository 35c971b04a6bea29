"""Is the difference real? Paired significance tests of two systems' corpus scores on the same items.

Every capeval metric's corpus score is the mean of its per-item scores, so the difference between two systems
scored on the same images is the mean of the paired differences ``d_i = a_i - b_i``. Two tests, after
sacreBLEU's ``--paired-ar`` and ``--paired-bs`` (``sacrebleu/significance.py``, Post 2018; Koehn 2004; Riezler &
Maxwell 2005):

- ``"permutation"`` (paired approximate randomisation): under the null hypothesis the two systems are
  exchangeable on each item, so each item's pair of scores is swapped at random (the sign of ``d_i`` flipped);
  the two-sided p-value is the share of assignments whose ``|mean(d*)|`` is at least the observed ``|mean(d)|``.
  When all ``2^n`` assignments fit in ``n_resamples``, ``scipy.stats.permutation_test(...,
  permutation_type="samples")`` enumerates them (an exact p-value); otherwise ``n_resamples`` random assignments
  give ``(count + 1) / (n_resamples + 1)``, the observed assignment counting as one of the draws (Phipson &
  Smyth 2010; scipy's and sacreBLEU's randomised p-value).
- ``"bootstrap"`` (paired bootstrap resampling): items are drawn with replacement, the same draw for both
  systems; the p-value is sacreBLEU's (after Moses' ``bootstrap-hypothesis-difference-significance.pl``): the
  resampled ``|delta*|`` are centred on their mean to stand for the null distribution, and
  ``p = (#{|delta*| - mean|delta*| >= |delta|} + 1) / (n_resamples + 1)``. This p-value does not approach 1
  when the systems are alike (for ``delta`` near 0 it is about P(|Z| >= E|Z|) = 0.42): prefer the permutation
  test's p-value, and read the bootstrap for its interval.

Both report the percentile bootstrap confidence interval of ``delta = mean(a) - mean(b)`` (scipy's
``stats.bootstrap``), so a user always gets an interval.

One deliberate difference from sacreBLEU: it counts resampled statistics strictly greater than the observed one
(``>``, after multeval), so a system compared with itself gets ``p = 1 / (n_resamples + 1)``. capeval counts
greater-or-equal, as scipy and Phipson & Smyth do, with scipy's relative tolerance of ``100 * eps`` for values
equal in exact arithmetic; a system compared with itself gets ``p = 1``. The two differ only on ties.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from capeval.diagnostics.extras import require_extra
from capeval.significance.comparison import Comparison

METHODS = ("permutation", "bootstrap")
CORRECTIONS = ("none", "holm")
N_RESAMPLES = 10_000  # sacreBLEU's default number of approximate-randomisation trials (significance.py)
CONFIDENCE = 0.95
# The largest score a test takes, in size: means, differences, resampled sums and the squares scipy's bootstrap
# takes for its standard error stay far from float64's 1.8e308 (at 1e308, the means were inf and the p-value 0),
# and no metric comes near it (capeval's are bounded by validation.MAX_W).
MAX_ABS_SCORE = 1e100
# Elements (resamples x items) scipy holds at once: bounds memory (~32 MB of indices) on large corpora.
_BATCH_ELEMENTS = 2**22
# scipy.stats.permutation_test's tolerance for values that are equal in exact arithmetic.
_RELATIVE_TOLERANCE = 100 * np.finfo(np.float64).eps

Scores = Sequence[float] | np.ndarray | Mapping[str, Any]


def _metric_of(scores: Scores) -> str | None:
    if isinstance(scores, Mapping):
        signature = scores.get("signature")
        if isinstance(signature, str) and signature:
            return signature.split("|", 1)[0]
    return None


def _as_scores(scores: Scores, name: str) -> np.ndarray:
    """Per-item scores as a 1-D float array; a metric result dict gives its ``"scores"``."""
    if isinstance(scores, Mapping):
        if "scores" not in scores:
            raise ValueError(f"{name!r}: a result dict needs a 'scores' key, got keys {sorted(scores)[:8]}")
        scores = scores["scores"]
    if isinstance(scores, (str, bytes)):
        raise TypeError(f"{name!r}: scores must be a sequence of numbers, got a string")
    try:
        values = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        for i, v in enumerate(scores):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
                raise TypeError(f"{name!r} score at index {i} is not a number: {v!r}") from None
        raise
    if values.ndim != 1:
        raise ValueError(f"{name!r}: scores must be one number per item, got shape {values.shape}")
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{name!r} score at index {i} is {values[i]} ({bad.size} non-finite in all); "
            "a paired test needs a finite score for every item"
        )
    return values


def check_magnitudes(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    names: tuple[str, str],
    items: Sequence | None = None,
    metric: str | None = None,
) -> None:
    """Refuse finite scores beyond ``MAX_ABS_SCORE``, whose sums, differences or squares could overflow float64.

    Raises:
        ValueError: naming the metric, the system, the item (its id from ``items``, else its index) and the value.
    """
    for name, values in zip(names, (a, b), strict=True):
        values = np.asarray(values, dtype=np.float64)
        big = np.flatnonzero(~(np.abs(values) <= MAX_ABS_SCORE))
        if big.size:
            i = int(big[0])
            item = f"item {items[i]!r}" if items is not None else f"index {i}"
            head = f"{metric}: " if metric else ""
            raise ValueError(
                f"{head}{name!r} score at {item} is {values[i]:g}, beyond +-{MAX_ABS_SCORE:g} "
                "(capeval.significance.paired_tests.MAX_ABS_SCORE): its sums and squares could overflow float64; "
                "rescale the scores to compare them"
            )


def _check_options(method: str, n_resamples: int, confidence: float) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _batch(n: int) -> int:
    return max(1, _BATCH_ELEMENTS // n)


def _abs_mean(d: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.abs(np.mean(d, axis=axis))


def _mean(d: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(d, axis=axis)


def _permutation_p(d: np.ndarray, n_resamples: int, rng: np.random.Generator) -> tuple[float, bool]:
    """Two-sided paired permutation p-value of ``mean(d) != 0`` and whether it is exact.

    Swapping the systems' labels on item i flips the sign of ``d_i``. When all ``2^n`` assignments fit in
    ``n_resamples`` scipy enumerates them (one sample, ``permutation_type="samples"`` is its sign-flip test),
    with the statistic ``|mean(d)|`` and ``alternative="greater"``: sacreBLEU's two-sided count
    ``|delta*| >= |delta|``. Otherwise the signs are drawn here in batches: scipy's general "samples" resampler
    builds and gathers a permutation index per item and draw: for 10,000 draws it took 171 s against 10.5 s
    here on 40,000 items (COCO val2014's size) and 9.2 s against 1.6 s on 5,000 (``scripts/bench_compare.py``,
    medians of 3 on the shared 2-core development machine), for the same test and p-values equal within Monte
    Carlo error.
    """
    if 2**d.size <= n_resamples:
        from scipy import stats

        result = stats.permutation_test(
            (d,),
            _abs_mean,
            permutation_type="samples",
            vectorized=True,
            n_resamples=n_resamples,
            alternative="greater",
            batch=_batch(d.size),
        )
        return float(result.pvalue), True
    observed = abs(d.sum())
    # Sums of the same numbers in another order differ by rounding; scipy's 100-eps tolerance, taken relative to
    # the largest a signed sum can be, keeps equal-in-exact-arithmetic assignments counted as ties.
    tolerance = _RELATIVE_TOLERANCE * np.abs(d).sum()
    count = 0
    batch = _batch(d.size)
    for start in range(0, n_resamples, batch):
        size = min(batch, n_resamples - start)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(size, d.size), dtype=np.int8)
        count += int(np.count_nonzero(np.abs(signs @ d) >= observed - tolerance))
    return (count + 1) / (n_resamples + 1), False


def _bootstrap(d: np.ndarray, n_resamples: int, confidence: float, rng: np.random.Generator):
    """scipy's percentile bootstrap of ``mean(d)``: its result (interval and resampled means)."""
    from scipy import stats

    return stats.bootstrap(
        (d,),
        _mean,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        batch=_batch(d.size),
        rng=rng,
    )


def _bootstrap_p(resampled_deltas: np.ndarray, delta: float) -> float:
    """sacreBLEU's paired-bootstrap p-value (``_paired_bs_test`` + ``_compute_p_value``), counting ``>=``."""
    sample_diffs = np.abs(resampled_deltas)
    centred = sample_diffs - sample_diffs.mean()
    observed = abs(delta)
    count = int(np.count_nonzero(centred >= observed - _RELATIVE_TOLERANCE * observed))
    return (count + 1) / (resampled_deltas.size + 1)


def _paired_scores(
    scores_a: Scores, scores_b: Scores, names: tuple[str, str]
) -> tuple[np.ndarray, np.ndarray, str, str]:
    """Both systems' per-item scores as (n,) float64 arrays that pair up, with the systems' names as strings.

    Raises:
        ValueError: ``names`` is not two names, the lengths differ, there are fewer than 2 items, or a score
            is not finite (named by system and index).
        TypeError: a score that is not a number.
    """
    if isinstance(names, str) or len(names) != 2:
        raise ValueError(f"names must be two names (system a, system b), got {names!r}")
    name_a, name_b = (str(x) for x in names)
    a = _as_scores(scores_a, name_a)
    b = _as_scores(scores_b, name_b)
    if a.size != b.size:
        raise ValueError(
            f"got {a.size} scores for {name_a!r} and {b.size} for {name_b!r}: a paired test needs the same "
            "items in the same order"
        )
    if a.size < 2:
        raise ValueError(f"a paired test needs at least 2 items, got {a.size}")
    return a, b, name_a, name_b


def _agreed_metric(scores_a: Scores, scores_b: Scores, metric: str | None) -> str | None:
    """The metric's name for the summary: ``metric`` when given, else the one a result dict's signature names.

    Raises:
        ValueError: both are result dicts whose signatures differ (another metric, or other options).
    """
    sig_a = scores_a.get("signature") if isinstance(scores_a, Mapping) else None
    sig_b = scores_b.get("signature") if isinstance(scores_b, Mapping) else None
    if sig_a and sig_b and sig_a != sig_b:
        raise ValueError(
            f"the two results were computed differently ({sig_a!r} vs {sig_b!r}); compare scores of one metric "
            "with the same options, or pass the score lists themselves to compare them anyway"
        )
    return metric or _metric_of(scores_a) or _metric_of(scores_b)


def _p_value(
    d: np.ndarray, method: str, n_resamples: int, resampled_means: np.ndarray, seed: int | None
) -> tuple[float, bool]:
    """Two-sided p-value of ``mean(d) != 0`` by ``method``, and whether it is exact.

    Args:
        d: (n,) paired differences ``a - b``.
        method: ``"permutation"`` (sign flips drawn from a child stream of ``seed``) or ``"bootstrap"``.
        n_resamples: random sign assignments when the permutation test is not exact.
        resampled_means: (n_resamples,) bootstrap means of ``d``, which the bootstrap p-value reads.
        seed: the comparison's seed.
    """
    if method == "permutation":
        permutation_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        return _permutation_p(d, n_resamples, permutation_rng)
    return _bootstrap_p(resampled_means, float(d.mean())), False


def compare(
    scores_a: Scores,
    scores_b: Scores,
    *,
    method: str = "permutation",
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int | None = 0,
    names: tuple[str, str] = ("a", "b"),
    metric: str | None = None,
) -> Comparison:
    """Paired significance test of the difference of two systems' corpus scores on the same items.

    Args:
        scores_a, scores_b: per-item scores of the same ``n`` items in the same order: lists, (n,) arrays, or
            metric result dicts (their ``"scores"``; their signature names the metric and must agree).
        method: ``"permutation"`` (paired approximate randomisation, sacreBLEU's ``paired-ar``; exact when
            ``2^n <= n_resamples``) or ``"bootstrap"`` (paired bootstrap resampling, sacreBLEU's ``paired-bs``).
        n_resamples: random permutations (when not exact) and bootstrap resamples for the interval.
        confidence: level of the bootstrap interval of the difference.
        seed: seed of numpy's generator; the same seed gives the same result. None draws fresh entropy.
        names: the systems' names in the result and its one-line summary.
        metric: the metric's name in the summary (default: from a result dict's signature).

    Returns:
        Comparison: means, ``delta = mean_a - mean_b``, its interval and the two-sided p-value (see the module
        docstring for the definitions).

    Raises:
        ValueError: lengths differ, fewer than 2 items, a non-finite score or one beyond ``MAX_ABS_SCORE``
            (named by system and index), result dicts of different metrics or options, or a bad option.
        TypeError: a score that is not a number.
    """
    require_extra("stats", "capeval.compare")
    _check_options(method, n_resamples, confidence)
    a, b, name_a, name_b = _paired_scores(scores_a, scores_b, names)
    metric = _agreed_metric(scores_a, scores_b, metric)
    check_magnitudes(a, b, (name_a, name_b), metric=metric)

    d = a - b
    # The interval's draws come from the seed itself and the permutations' from a child stream, so the interval
    # is the same whichever test is asked for.
    boot = _bootstrap(d, n_resamples, confidence, np.random.default_rng(seed))
    p_value, exact = _p_value(d, method, n_resamples, boot.bootstrap_distribution, seed)
    low, high = boot.confidence_interval
    return Comparison(
        metric=metric,
        name_a=name_a,
        name_b=name_b,
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        delta=float(d.mean()),
        ci_low=float(low),
        ci_high=float(high),
        confidence=float(confidence),
        p_value=min(1.0, float(p_value)),
        method=method,
        n_resamples=int(n_resamples),
        exact=exact,
        n=int(a.size),
        seed=seed,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given.

    Sorted ascending ``p_(1) <= ... <= p_(m)``: ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``.
    Controls the family-wise error rate under any dependence between the tests.
    """
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    m = p.size
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted.tolist()


def compare_many(
    baseline_scores: Scores,
    systems: Mapping[str, Scores],
    *,
    baseline_name: str = "baseline",
    method: str = "permutation",
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int | None = 0,
    correction: str = "none",
    metric: str | None = None,
) -> dict[str, Comparison]:
    """Each system against one baseline on the same items (``delta = system - baseline``), as sacreBLEU does.

    Every system is tested with the same seed, so all see the same random draws. With several systems the
    chance that one of them looks significant by luck grows; ``correction="holm"`` adds Holm's adjusted
    p-values (``Comparison.p_adjusted``), which bound the family-wise error rate. The default, ``"none"``,
    reports each test on its own, as sacreBLEU does.

    Args:
        baseline_scores: per-item scores of the baseline (list, array or metric result dict).
        systems: ``{name: per-item scores}`` of the other systems, items in the baseline's order.
        baseline_name: the baseline's name in the results.
        method, n_resamples, confidence, seed, metric: as in :func:`compare`.
        correction: ``"none"`` or ``"holm"``.

    Returns:
        dict[str, Comparison]: one comparison per system, in the order of ``systems``.
    """
    require_extra("stats", "capeval.compare_many")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    if not systems:
        raise ValueError("compare_many needs at least one system besides the baseline")
    results = {
        name: compare(
            scores,
            baseline_scores,
            method=method,
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
            names=(name, baseline_name),
            metric=metric,
        )
        for name, scores in systems.items()
    }
    if correction == "holm":
        adjusted = holm([c.p_value for c in results.values()])
        results = {
            name: replace(c, p_adjusted=p) for (name, c), p in zip(results.items(), adjusted, strict=True)
        }
    return results
