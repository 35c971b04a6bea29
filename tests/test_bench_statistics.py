"""Statistics of the benchmark harness, checked against scipy and hand-worked examples."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from capeval.bench.infogain import forward_selection
from capeval.bench.statistics import (
    bootstrap_ci,
    correlation,
    kendall_tau,
    pairwise_accuracy,
    pearson,
    spearman,
    williams_test,
    williams_test_scores,
)


def test_tau_c_and_tau_b_differ_on_tied_ratings_as_worked_by_hand():
    # 15 pairs: 12 concordant, 0 discordant, 3 tied on y (1-1, 2-2, 3-3); x has no ties.
    # tau-b = 12 / sqrt(15 * 12); tau-c = 2 * 12 / (6^2 * (3 - 1) / 3) = 1 (m = min(6 levels, 3 levels) = 3).
    x = [1, 2, 3, 4, 5, 6]
    y = [1, 1, 2, 2, 3, 3]
    assert kendall_tau(x, y, "b") == pytest.approx(12 / np.sqrt(180))
    assert kendall_tau(x, y, "c") == pytest.approx(1.0)


def test_correlations_equal_scipy_on_random_tied_data():
    rng = np.random.default_rng(0)
    human = rng.integers(1, 5, size=200).astype(float)
    metric = human + rng.normal(0, 1.5, size=200)
    assert kendall_tau(metric, human, "c") == pytest.approx(
        stats.kendalltau(metric, human, variant="c").statistic
    )
    assert kendall_tau(metric, human, "b") == pytest.approx(stats.kendalltau(metric, human).statistic)
    assert spearman(metric, human) == pytest.approx(stats.spearmanr(metric, human).statistic)
    assert pearson(metric, human) == pytest.approx(stats.pearsonr(metric, human).statistic)
    assert correlation(metric, human, "kendall_c") == kendall_tau(metric, human, "c")


def test_correlation_refuses_mismatched_lengths_and_nan_naming_the_item():
    with pytest.raises(ValueError, match="3 scores for 2 human"):
        kendall_tau([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="item 1 is NaN"):
        spearman([1, float("nan"), 3], [1, 2, 3])
    with pytest.raises(ValueError, match="variant"):
        kendall_tau([1, 2], [1, 2], "a")


def test_williams_test_matches_a_worked_example():
    # r12 = .6, r13 = .4, r23 = .5, n = 50:
    # |R| = 1 - .36 - .16 - .25 + 2 (.6)(.4)(.5) = .47
    # t = .2 sqrt(49 * 1.5) / sqrt(2 (.47) 49/47 + (1^2 / 4)(.5)^3) = 1.7146428 / 1.0056092 = 1.70508, df = 47
    res = williams_test(0.6, 0.4, 0.5, 50)
    assert res.df == 47
    assert res.t == pytest.approx(1.7050786, abs=1e-6)
    assert res.p_value == pytest.approx(stats.t.sf(1.7050786, 47), rel=1e-6)
    assert 0.045 < res.p_value < 0.05
    assert williams_test(0.4, 0.6, 0.5, 50).t == pytest.approx(-res.t)
    assert williams_test(0.6, 0.4, 0.5, 50, "two-sided").p_value == pytest.approx(2 * res.p_value)


def test_williams_test_is_zero_for_equal_correlations_and_validates_input():
    assert williams_test(0.5, 0.5, 0.3, 100).t == 0.0
    with pytest.raises(ValueError, match="n > 3"):
        williams_test(0.5, 0.4, 0.3, 3)
    with pytest.raises(ValueError, match="r12"):
        williams_test(1.5, 0.4, 0.3, 30)


def test_williams_test_from_scores_uses_the_three_correlations():
    rng = np.random.default_rng(1)
    human = rng.normal(size=300)
    good = human + rng.normal(0, 0.5, size=300)
    bad = human + rng.normal(0, 2.0, size=300)
    res = williams_test_scores(human, good, bad)
    assert res.r12 == pytest.approx(pearson(good, human))
    assert res.r23 == pytest.approx(pearson(good, bad))
    assert res.p_value < 1e-6


def test_bootstrap_ci_brackets_the_estimate_and_resamples_whole_groups():
    rng = np.random.default_rng(2)
    human = np.repeat(rng.integers(1, 5, size=100), 3).astype(float)
    metric = human + rng.normal(0, 1, size=300)
    groups = np.repeat(np.arange(100), 3)
    res = bootstrap_ci(lambda a, b: kendall_tau(a, b, "c"), metric, human, groups=groups, n_resamples=200)
    assert res.low < res.estimate < res.high
    assert res.estimate == pytest.approx(kendall_tau(metric, human, "c"))
    again = bootstrap_ci(lambda a, b: kendall_tau(a, b, "c"), metric, human, groups=groups, n_resamples=200)
    assert (again.low, again.high) == (res.low, res.high)
    with pytest.raises(ValueError, match="array 1 has"):
        bootstrap_ci(np.mean, [1, 2, 3], [1, 2])


def test_pairwise_accuracy_counts_ties_as_configured():
    a = [0.9, 0.2, 0.5, 0.5]
    b = [0.1, 0.8, 0.5, 0.5]
    labels = [0, 1, 0, 1]
    assert pairwise_accuracy(a, b, labels) == pytest.approx((1 + 1 + 0.5 + 0.5) / 4)
    # By hand: two clear wins, then the two ties count 0 each ("wrong") or go to caption 0, right once ("first").
    assert pairwise_accuracy(a, b, labels, ties="wrong") == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert pairwise_accuracy(a, b, labels, ties="first") == pytest.approx((1 + 1 + 1 + 0) / 4)
    assert pairwise_accuracy(a, b, labels, ties="random", seed=3) in (0.5, 0.75, 1.0)
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        pairwise_accuracy([1], [0], [2])


def test_forward_selection_picks_the_informative_metric_first():
    rng = np.random.default_rng(4)
    human = rng.normal(size=200)
    metrics = {
        "noise": rng.normal(size=200),
        "good": human + rng.normal(0, 0.3, size=200),
        "weak": human + rng.normal(0, 3.0, size=200),
    }
    res = forward_selection(metrics, human, folds=3)
    assert res.order[0] == "good"
    assert res.r2[0] > 0.8
    assert len(res.order) == 3
    grouped = forward_selection(metrics, human, groups=np.arange(200) // 4, folds=3, max_features=1)
    assert grouped.order == ["good"]
