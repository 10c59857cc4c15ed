"""servesweep.stats against published values, not against itself."""

import math

import numpy as np
import pytest

from servesweep import stats


@pytest.mark.parametrize(
    "df, expected",
    # Student's t table, two-sided 95 % (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2).
    [(1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)],
)
def test_t_critical_values(df, expected):
    assert stats.t95(df) == pytest.approx(expected, abs=5e-4)


def test_describe_ci_of_the_mean():
    # Worked by hand: mean 20, sample std 2 (values 18, 20, 22), t(0.975, 2) = 4.303:
    # half-width 4.303 * 2 / sqrt(3) = 4.969.
    d = stats.describe([18, 20, 22])
    assert (d.n, d.mean, d.std) == (3, 20.0, 2.0)
    assert d.cv == pytest.approx(0.1)
    assert d.half_width == pytest.approx(4.303 * 2 / math.sqrt(3), abs=1e-3)
    assert stats.describe([5.0]).n == 1 and math.isnan(stats.describe([5.0]).ci_low)
    assert stats.describe([]).n == 0


def test_welch_from_summaries_learning_statistics_with_r():
    # Navarro, "Learning statistics with R", §13.4 (the harpo data): Anastasia mean 74.533,
    # sd 8.999, n 15; Bernadette 69.056, 5.775, 18. Published: t = 2.034, df = 23.025,
    # 95 % CI [-0.092, 11.048], p = 0.054.
    w = stats.welch_from_stats(74.533, 8.999, 15, 69.056, 5.775, 18)
    assert w.t == pytest.approx(2.034, abs=2e-3)
    assert w.df == pytest.approx(23.025, abs=2e-2)
    assert (w.ci_low, w.ci_high) == (
        pytest.approx(-0.092, abs=3e-3),
        pytest.approx(11.048, abs=3e-3),
    )
    assert w.p == pytest.approx(0.054, abs=1e-3)


def test_welch_from_summaries_second_example():
    # Two groups of 20: mean 100, s 15 vs mean 95, s 20; published t ≈ 0.895, df ≈ 35.2.
    w = stats.welch_from_stats(100, 15, 20, 95, 20, 20)
    assert w.t == pytest.approx(0.895, abs=1e-3)
    assert w.df == pytest.approx(35.2, abs=0.05)


def test_welch_from_samples_matches_scipy_documentation_semantics():
    # scipy.stats.ttest_ind(equal_var=False) is the reference implementation of Welch's
    # test; the same samples must give its t and p.
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(3)
    a, b = rng.normal(10, 1, 7), rng.normal(11, 3, 5)
    ours = stats.welch(a, b)
    theirs = ttest_ind(a, b, equal_var=False)
    assert ours.t == pytest.approx(theirs.statistic)
    assert ours.p == pytest.approx(theirs.pvalue)
    assert stats.welch([1.0], [1.0, 2.0]) is None


def test_welch_without_spread():
    w = stats.welch_from_stats(10, 0, 3, 8, 0, 3)
    assert (w.diff, w.ci_low, w.ci_high) == (2, 2, 2)


def test_two_stage_bootstrap_covers_the_truth_and_widens_with_boot_noise():
    rng = np.random.default_rng(0)

    # Each boot lands in its own regime (a shift), requests scatter around it.
    def boots(shift_sd, n_boots=4):
        return [rng.normal(100 + rng.normal(0, shift_sd), 5, 400) for _ in range(n_boots)]

    quiet = stats.two_stage_bootstrap(boots(0.0), None, np.median, draws=400, seed=1)
    noisy = stats.two_stage_bootstrap(boots(10.0), None, np.median, draws=400, seed=1)
    assert quiet[1] < quiet[0] < quiet[2]
    assert quiet[1] < 100 < quiet[2]
    assert (noisy[2] - noisy[1]) > 3 * (quiet[2] - quiet[1])


def test_two_stage_bootstrap_of_a_ratio():
    rng = np.random.default_rng(1)
    a = [rng.normal(120, 5, 300) for _ in range(3)]
    b = [rng.normal(100, 5, 300) for _ in range(3)]
    est, low, high = stats.two_stage_bootstrap(a, b, np.median, draws=400, seed=2)
    assert est == pytest.approx(1.2, abs=0.02)
    assert low < 1.2 < high
    # Nothing to resample: no estimate.
    assert math.isnan(stats.two_stage_bootstrap([[]], None, np.median)[0])


def test_repeats_needed_by_hand():
    # CV 3 % on both sides, equal means: spread = 0.03 * sqrt(2) = 0.0424. For ±2 %:
    # n = 11 gives t(0.975, 20) * 0.0424 / sqrt(11) = 2.086 * 0.01279 = 0.02668 > 0.02;
    # n = 19: t(0.975, 36) = 2.028, 2.028 * 0.0424 / sqrt(19) = 0.01974 <= 0.02, and
    # n = 18: t(0.975, 34) = 2.032, 2.032 * 0.0424 / sqrt(18) = 0.02032 > 0.02.
    assert stats.repeats_needed(0.03, 0.03, 1.0, 2.0) == 19
    assert stats.repeats_needed(0.001, 0.001, 1.0, 2.0) == 2
    assert stats.repeats_needed(math.nan, 0.03, 1.0, 2.0) is None


def test_holm_adjusted_p_values_wikipedia_example():
    # Wikipedia, "Holm–Bonferroni method", example: p = 0.01, 0.04, 0.03, 0.005 at 0.05:
    # H4 and H1 are rejected, H3 (0.03 > 0.05 / 2) is not, so neither is H2. R's
    # p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02.
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # No test (nan) stays out of the family; capped at 1.
    out = stats.holm([0.5, math.nan, 0.6])
    assert out[0] == pytest.approx(1.0) and math.isnan(out[1]) and out[2] == pytest.approx(1.0)


def test_log_ratio_is_welch_on_the_logs():
    from scipy.stats import ttest_ind

    a, b = [110.0, 121.0, 115.0], [100.0, 98.0, 103.0]
    r = stats.log_ratio(a, b)
    la, lb = np.log(a), np.log(b)
    assert r.ratio == pytest.approx(math.exp(la.mean() - lb.mean()))
    assert r.p == pytest.approx(ttest_ind(la, lb, equal_var=False).pvalue)
    w = stats.welch(la, lb)
    assert (r.low, r.high) == (
        pytest.approx(math.exp(w.ci_low)),
        pytest.approx(math.exp(w.ci_high)),
    )
    assert stats.log_ratio([1.0], [1.0, 2.0]) is None
