"""capeval.compare: paired permutation and bootstrap tests of two systems' corpus scores."""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest
from scipy import stats

import capeval
from capeval.significance.paired_tests import MAX_ABS_SCORE, Comparison, compare, compare_many, holm

# Hand-worked example: differences d = a - b = (0.1, 0.2, 0.3, -0.2), observed mean 0.1, |sum| = 0.4.
# Swapping the systems on an item flips the sign of its d. The 16 sign assignments of (0.1, 0.2, 0.3, 0.2)
# (the last sign absorbed) give the sums
#   +.1+.2+.3+.2 = .8   +.1+.2+.3-.2 = .4   +.1+.2-.3+.2 = .2   +.1+.2-.3-.2 = -.2
#   +.1-.2+.3+.2 = .4   +.1-.2+.3-.2 =  0   +.1-.2-.3+.2 = -.2  +.1-.2-.3-.2 = -.6
# and, with -.1 first, their negatives. |sum| >= .4 for .8, .4, .4, .6 and their 4 negatives: 8 of 16, p = 0.5.
HAND_A = [0.9, 0.8, 0.7, 0.6]
HAND_B = [0.8, 0.6, 0.4, 0.8]


def test_permutation_p_value_equals_the_hand_enumerated_16_sign_flips():
    result = compare(HAND_A, HAND_B)
    assert result.exact
    assert result.p_value == pytest.approx(0.5, abs=1e-12)
    assert result.delta == pytest.approx(0.1)
    assert (result.mean_a, result.mean_b) == (pytest.approx(0.75), pytest.approx(0.65))


def test_permutation_p_value_of_four_positive_differences_is_two_in_sixteen():
    # d = (0.1, 0.2, 0.3, 0.4), sum 1.0: only the all-plus and all-minus assignments reach |sum| >= 1.0.
    result = compare([0.5, 0.6, 0.7, 0.8], [0.4, 0.4, 0.4, 0.4])
    assert result.p_value == pytest.approx(2 / 16, abs=1e-12)


def _enumerated_p(d: np.ndarray) -> float:
    flips = np.array(list(itertools.product((1, -1), repeat=d.size)))
    null = np.abs(flips @ d)
    observed = abs(d.sum())
    return float(np.mean(null >= observed * (1 - 1e-12)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_permutation_p_value_matches_full_enumeration_and_scipys_two_sided_test(seed):
    rng = np.random.default_rng(seed)
    a = rng.random(10)
    b = a - 0.05 + rng.normal(0, 0.1, 10)
    result = compare(a, b)
    assert result.exact
    assert result.p_value == pytest.approx(_enumerated_p(a - b), abs=1e-12)
    # scipy's default two-sided test (2 x the smaller tail) on the mean difference: the sign-flip null is
    # symmetric, so it equals the |delta| count.
    reference = stats.permutation_test(
        (a, b), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples", vectorized=True
    )
    assert result.p_value == pytest.approx(reference.pvalue, abs=1e-12)


def test_random_permutation_p_value_agrees_with_scipys_two_sided_test_within_monte_carlo_error():
    rng = np.random.default_rng(7)
    a = rng.random(200)
    b = a - 0.004 + rng.normal(0, 0.1, 200)
    result = compare(a, b, n_resamples=20_000, seed=3)
    reference = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=20_000,
        rng=np.random.default_rng(11),
    )
    assert not result.exact
    assert 0.02 < reference.pvalue < 0.5  # the case is informative: neither tiny nor 1
    # Two independent Monte Carlo estimates of p ~ 0.14 with 20,000 draws each: SD of the gap ~ 0.0035.
    assert result.p_value == pytest.approx(reference.pvalue, abs=0.012)


def test_random_sign_flips_estimate_the_enumerated_p_value():
    # 14 items: 2^14 = 16,384 assignments > 10,000 draws, so the draws are random; full enumeration is the truth.
    rng = np.random.default_rng(21)
    a = rng.random(14)
    b = a - 0.03 + rng.normal(0, 0.1, 14)
    result = compare(a, b)
    assert not result.exact
    truth = _enumerated_p(a - b)
    assert 0.05 < truth < 0.95
    # Binomial SD of a 10,000-draw estimate is at most 0.005.
    assert result.p_value == pytest.approx(truth, abs=0.02)


def test_random_permutation_p_value_counts_the_observed_assignment():
    # Every one of 2^40 assignments but the observed pair is far weaker, so no draw reaches |delta|:
    # p = (0 + 1) / (n_resamples + 1).
    a = np.ones(40)
    b = np.zeros(40)
    result = compare(a, b, n_resamples=999)
    assert result.p_value == pytest.approx(1 / 1000)


@pytest.mark.parametrize("method", ["permutation", "bootstrap"])
def test_identical_systems_give_delta_zero_and_p_one(method):
    scores = np.random.default_rng(0).random(50)
    result = compare(scores, scores.copy(), method=method, n_resamples=500)
    assert result.delta == 0.0
    assert result.p_value == 1.0
    assert (result.ci_low, result.ci_high) == (0.0, 0.0)


def test_bootstrap_p_value_follows_sacrebleus_centred_definition():
    rng = np.random.default_rng(5)
    a = rng.random(60)
    b = a - 0.02 + rng.normal(0, 0.1, 60)
    result = compare(a, b, method="bootstrap", n_resamples=2000, seed=4)
    # The same draws through scipy, then sacreBLEU's _paired_bs_test: |delta*| centred on its mean, compared
    # with |delta| (counting >=), +1 correction.
    boot = stats.bootstrap(
        (a - b,),
        lambda x, axis: np.mean(x, axis=axis),
        n_resamples=2000,
        method="percentile",
        rng=np.random.default_rng(4),
    )
    diffs = np.abs(boot.bootstrap_distribution)
    expected = (np.sum(diffs - diffs.mean() >= abs(np.mean(a - b))) + 1) / 2001
    assert result.p_value == pytest.approx(expected)
    assert (result.ci_low, result.ci_high) == pytest.approx(tuple(boot.confidence_interval))


def test_bootstrap_p_value_of_equal_means_is_near_0_42_as_sacrebleus_definition_implies():
    # d symmetric about 0 (each value with its negative): delta = 0, the resampled deltas are ~ N(0, s^2), and
    # p = P(|Z| - E|Z| >= 0) = 2 (1 - Phi(sqrt(2 / pi))) = 0.425, not 1; the permutation p-value is 1.
    half = np.random.default_rng(8).normal(0, 0.1, 100)
    a = np.concatenate([half, -half])
    b = np.zeros(200)
    expected = 2 * stats.norm.sf(np.sqrt(2 / np.pi))
    assert compare(a, b, method="bootstrap", n_resamples=5000).p_value == pytest.approx(expected, abs=0.03)
    assert compare(a, b, n_resamples=2000).p_value == 1.0


def test_bootstrap_interval_covers_the_true_difference_at_about_the_nominal_rate():
    # 300 simulated pairs of systems whose true difference is 0.03; the 95% interval should cover it in about
    # 95% of them (percentile intervals run slightly short at n = 60; 3 binomial SDs below is 0.91).
    rng = np.random.default_rng(123)
    covered = 0
    for trial in range(300):
        base = rng.random(60)
        a = base + 0.03 + rng.normal(0, 0.1, 60)
        b = base + rng.normal(0, 0.1, 60)
        result = compare(a, b, method="bootstrap", n_resamples=999, seed=trial)
        covered += result.ci_low <= 0.03 <= result.ci_high
    assert 0.90 <= covered / 300 <= 0.985


@pytest.mark.parametrize("method", ["permutation", "bootstrap"])
def test_the_same_seed_gives_the_same_result_and_another_seed_another_draw(method):
    rng = np.random.default_rng(9)
    a = rng.random(100)
    b = a - 0.01 + rng.normal(0, 0.1, 100)
    first = compare(a, b, method=method, n_resamples=500, seed=42)
    assert compare(a, b, method=method, n_resamples=500, seed=42) == first
    other = compare(a, b, method=method, n_resamples=500, seed=43)
    assert (other.p_value, other.ci_low) != (first.p_value, first.ci_low)


def test_the_interval_does_not_depend_on_the_test_asked_for():
    rng = np.random.default_rng(10)
    a = rng.random(300)
    b = a - 0.01 + rng.normal(0, 0.1, 300)
    permutation = compare(a, b, n_resamples=800, seed=5)
    bootstrap = compare(a, b, method="bootstrap", n_resamples=800, seed=5)
    assert (permutation.ci_low, permutation.ci_high) == (bootstrap.ci_low, bootstrap.ci_high)
    assert permutation.p_value != bootstrap.p_value


def test_a_metric_result_dict_gives_its_scores_and_its_name():
    signature = "clipscore|model=x|w=2.5"
    result = compare(
        {"clipscore": 0.75, "scores": HAND_A, "signature": signature},
        {"clipscore": 0.65, "scores": HAND_B, "signature": signature},
        names=("mine", "theirs"),
    )
    assert result.metric == "clipscore"
    assert str(result) == (
        "clipscore: mine 0.7500 vs theirs 0.6500, delta +0.1000 [95% CI -0.1000, +0.2500], "
        "p = 0.5000 (exact paired permutation over all 16 assignments, n = 4)"
    )


def test_one_line_summary_of_a_random_permutation_test_names_the_resamples():
    a = np.linspace(0.6, 0.8, 50)
    result = compare(a, a - 0.02 * (np.arange(50) % 2), n_resamples=1000, metric="wmd")
    assert str(result).startswith("wmd: a 0.7000 vs b 0.6900, delta +0.0100 [95% CI +")
    assert str(result).endswith("p = 0.0010 (paired permutation, 1000 resamples, n = 50)")


def test_as_dict_is_json_ready_and_round_trips():
    result = compare(HAND_A, HAND_B, method="bootstrap", n_resamples=200)
    data = json.loads(json.dumps(result.as_dict()))
    assert Comparison(**data) == result
    assert data["method"] == "bootstrap" and data["n"] == 4 and data["seed"] == 0


def test_compare_is_exported_at_the_top_level():
    assert capeval.compare is compare
    assert capeval.compare_many is compare_many
    assert capeval.Comparison is Comparison


def test_mismatched_lengths_are_refused_naming_both_systems():
    with pytest.raises(ValueError, match="got 4 scores for 'x' and 3 for 'y'"):
        compare(HAND_A, HAND_B[:3], names=("x", "y"))


def test_a_nan_score_is_refused_naming_the_system_and_index():
    with pytest.raises(ValueError, match=r"'b' score at index 2 is nan"):
        compare(HAND_A, [0.1, 0.2, float("nan"), 0.3])


def test_a_non_number_is_refused_naming_its_index():
    with pytest.raises(TypeError, match=r"'a' score at index 1 is not a number: 'high'"):
        compare([0.1, "high", 0.3], [0.1, 0.2, 0.3])


def test_fewer_than_two_items_are_refused():
    with pytest.raises(ValueError, match="at least 2 items, got 1"):
        compare([0.5], [0.4])


def test_results_of_different_metrics_are_refused():
    with pytest.raises(ValueError, match="computed differently"):
        compare({"scores": HAND_A, "signature": "clipscore|w=2.5"}, {"scores": HAND_B, "signature": "wmd|x"})


@pytest.mark.parametrize(
    "options, message",
    [
        ({"method": "t-test"}, "method must be one of permutation, bootstrap"),
        ({"n_resamples": 0}, "n_resamples must be a positive integer"),
        ({"confidence": 95}, r"confidence must be in \(0, 1\)"),
        ({"names": ("only one",)}, "names must be two names"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        compare(HAND_A, HAND_B, **options)


def test_holm_adjusts_a_hand_worked_family():
    # Sorted 0.01, 0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04 -> running max 0.03, 0.06, 0.06.
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_compare_many_tests_each_system_against_the_baseline_with_optional_holm():
    rng = np.random.default_rng(2)
    baseline = rng.random(80)
    systems = {
        "better": baseline + 0.05 + rng.normal(0, 0.05, 80),
        "same": baseline + rng.normal(0, 0.05, 80),
    }
    plain = compare_many(baseline, systems, n_resamples=1000)
    assert list(plain) == ["better", "same"]
    assert plain["better"] == compare(
        systems["better"], baseline, n_resamples=1000, names=("better", "baseline")
    )
    assert plain["better"].p_adjusted is None
    corrected = compare_many(baseline, systems, n_resamples=1000, correction="holm")
    expected = holm([plain["better"].p_value, plain["same"].p_value])
    assert [c.p_adjusted for c in corrected.values()] == pytest.approx(expected)
    assert "Holm-adjusted p = " in str(corrected["same"])
    with pytest.raises(ValueError, match="correction must be one of none, holm"):
        compare_many(baseline, systems, correction="bonferroni")


# --- Scores too large to sum ---


@pytest.mark.parametrize("method", ["permutation", "bootstrap"])
def test_finite_scores_of_1e308_are_refused_not_given_p_zero(method):
    with pytest.raises(
        ValueError, match=r"'b' score at index 0 is -1e\+308, beyond \+-1e\+100 \(capeval.significance"
    ):
        compare([0.5, 0.7], [-1e308, -1e308], method=method)


def test_scores_at_the_bound_give_finite_means_intervals_and_p_values_without_warnings():
    a = [MAX_ABS_SCORE, -MAX_ABS_SCORE, MAX_ABS_SCORE, 0.0, MAX_ABS_SCORE]
    b = [-MAX_ABS_SCORE, MAX_ABS_SCORE, -MAX_ABS_SCORE, MAX_ABS_SCORE, 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for method in ("permutation", "bootstrap"):
            result = compare(a, b, method=method, n_resamples=2000)
            assert np.isfinite(
                [result.mean_a, result.mean_b, result.delta, result.ci_low, result.ci_high]
            ).all()
            assert 0 < result.p_value <= 1


def test_paired_scores_are_float_arrays_with_the_names_as_strings():
    from capeval.significance.paired_tests import _paired_scores

    a, b, name_a, name_b = _paired_scores({"scores": [1, 2]}, np.array([0.5, 0.25]), (7, "base"))
    assert a.dtype == b.dtype == np.float64 and a.tolist() == [1.0, 2.0] and b.tolist() == [0.5, 0.25]
    assert (name_a, name_b) == ("7", "base")


@pytest.mark.parametrize(
    ("a", "b", "names", "message"),
    [
        ([1, 2], [1, 2], "ab", "names must be two names"),
        ([1, 2], [1, 2], ("a", "b", "c"), "names must be two names"),
        ([1, 2, 3], [1, 2], ("x", "y"), "got 3 scores for 'x' and 2 for 'y'"),
        ([1], [2], ("x", "y"), "at least 2 items, got 1"),
    ],
)
def test_paired_scores_refuse_unpaired_input_naming_the_systems(a, b, names, message):
    from capeval.significance.paired_tests import _paired_scores

    with pytest.raises(ValueError, match=message):
        _paired_scores(a, b, names)


def test_agreed_metric_is_the_given_name_else_the_signatures_metric():
    from capeval.significance.paired_tests import _agreed_metric

    result = {"scores": [1, 2], "signature": "wmd|vectors=glove"}
    assert _agreed_metric(result, dict(result), None) == "wmd"
    assert _agreed_metric([1, 2], result, None) == "wmd"
    assert _agreed_metric(result, result, "WMD (GloVe)") == "WMD (GloVe)"
    assert _agreed_metric([1, 2], [3, 4], None) is None


def test_agreed_metric_refuses_results_computed_with_other_options():
    from capeval.significance.paired_tests import _agreed_metric

    with pytest.raises(ValueError, match="computed differently .*'wmd\\|sigma=1' vs 'wmd\\|sigma=2'"):
        _agreed_metric({"signature": "wmd|sigma=1"}, {"signature": "wmd|sigma=2"}, "wmd")


def test_p_value_of_the_permutation_test_enumerates_small_samples_exactly():
    from capeval.significance.paired_tests import _p_value

    # d = (0.1, 0.2, 0.3, 0.4): only the all-plus and all-minus sign assignments reach |sum| >= 1.0.
    d = np.array([0.1, 0.2, 0.3, 0.4])
    p, exact = _p_value(d, "permutation", 100, np.zeros(100), seed=0)
    assert exact and p == pytest.approx(2 / 16, abs=1e-12)


def test_p_value_of_the_bootstrap_reads_the_resampled_means_it_is_given():
    from capeval.significance.paired_tests import _p_value

    # mean(d) = 0.25; |means| = (0, 0.5, 1.0, 0.5) centred on their mean 0.5 give (-0.5, 0, 0.5, 0): one of
    # four is >= 0.25, so p = (1 + 1) / (4 + 1).
    p, exact = _p_value(np.array([0.0, 0.5]), "bootstrap", 4, np.array([0.0, -0.5, 1.0, 0.5]), seed=0)
    assert not exact and p == pytest.approx(2 / 5)
