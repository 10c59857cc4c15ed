"""servesweep.stats against published values, not against itself."""

import math

import numpy as np
import pytest

from servesweep import sizing, stats


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


def test_holm_adjusted_p_values_wikipedia_example():
    # Wikipedia, "Holm–Bonferroni method", example: p = 0.01, 0.04, 0.03, 0.005 at 0.05:
    # H4 and H1 are rejected, H3 (0.03 > 0.05 / 2) is not, so neither is H2. R's
    # p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02.
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # No test (nan) stays out of the family; capped at 1.
    out = stats.holm([0.5, math.nan, 0.6])
    assert out[0] == pytest.approx(1.0) and math.isnan(out[1]) and out[2] == pytest.approx(1.0)


def test_pooled_contrast_is_the_equal_variance_t_test_on_logs():
    # Two samples sharing one pool: Student's two-sample test (scipy's ttest_ind with
    # equal_var), as a ratio of geometric means.
    from scipy.stats import ttest_ind

    a, b = np.log([110.0, 121.0, 115.0]), np.log([100.0, 98.0, 103.0, 101.0])
    pool = stats.scatter([a, b], logs=True)
    assert pool.df == 5
    c = stats.contrast(a, b, stats.pooled_side(pool), stats.pooled_side(pool))
    t = ttest_ind(a, b, equal_var=True)
    ci = t.confidence_interval(0.95)
    assert c.p == pytest.approx(t.pvalue) and c.df == 5 and c.variance == "pooled"
    iv = c.interval()
    assert (iv.low, iv.high) == (pytest.approx(math.exp(ci.low)), pytest.approx(math.exp(ci.high)))
    assert iv.ratio == pytest.approx(math.exp(a.mean() - b.mean()))
    # Each side on its own scatter: Welch's test (scipy's, equal_var False).
    own_a, own_b = stats.scatter([a], logs=True), stats.scatter([b], logs=True)
    sides = [stats.SideVariance(float(x.variance), float(x.df), False) for x in (own_a, own_b)]
    w = stats.contrast(a, b, *sides)
    assert w.p == pytest.approx(ttest_ind(a, b, equal_var=False).pvalue)
    assert w.variance == "own"


def test_a_ratio_interval_never_reaches_below_zero():
    # Raw-scale Welch on 2 boots of a noisy cell ran to -962 % in the H200 report.
    a, b = np.log([40.0, 500.0]), np.log([3000.0, 460.0])
    pool = stats.scatter([a, b], logs=True)
    iv = stats.contrast(a, b, stats.pooled_side(pool), stats.pooled_side(pool)).interval()
    assert 0 < iv.low < iv.ratio < iv.high
    assert min(iv.pct()) > -100


def test_the_guard_is_an_f_test_of_scatter():
    # One level: the classical one-sided F-test of own variance against the rest's.
    from scipy.stats import f

    own = stats.Scatter(np.array([0.5]), np.array([2]))
    rest = stats.Scatter(np.array([0.1]), np.array([10]))
    ratio = (0.5 / 2) / (0.1 / 10)
    r = stats.scatter_ratio(own, rest)
    assert r.ratio == pytest.approx(ratio) and (r.df, r.rest_df) == (2, 10)
    assert bool(stats.scatter_agrees(own, rest)) == (f.sf(ratio, 2, 10) > stats.GUARD_LEVEL)
    assert not stats.scatter_agrees(own, rest)  # 25 x: p far below 0.10
    assert stats.scatter_agrees(stats.Scatter(np.array([0.02]), np.array([2])), rest)
    # Over levels: each level's sum of squares over the rest's variance there, summed.
    own2 = stats.Scatter(np.array([0.02, 0.2]), np.array([1, 1]))
    rest2 = stats.Scatter(np.array([0.04, 0.4]), np.array([4, 4]))
    r2 = stats.scatter_ratio(own2, rest2)
    assert r2.ratio == pytest.approx((0.02 / 0.01 + 0.2 / 0.1) / 2) and r2.df == 2
    # Over levels, the guard combines each level's exact F p by Fisher's method (scipy's).
    from scipy.stats import combine_pvalues

    p_levels = [f.sf((0.02 / 1) / (0.04 / 4), 1, 4), f.sf((0.2 / 1) / (0.4 / 4), 1, 4)]
    fisher = combine_pvalues(p_levels, method="fisher").pvalue
    assert bool(stats.scatter_agrees(own2, rest2)) == (fisher >= stats.GUARD_LEVEL)
    assert bool(stats.scatter_agrees(own2, rest2, level=fisher * 1.001)) is False
    assert bool(stats.scatter_agrees(own2, rest2, level=fisher * 0.999)) is True
    # A scaled side: ratio times the rest's variance, df 1 / (1/df_ratio + 1/df_rest).
    side = stats.scaled_side(r2, stats.Scatter(0.4, 4))
    assert side.variance == pytest.approx(2.0 * 0.1) and side.df == pytest.approx(
        1 / (1 / 2 + 1 / 4)
    )


@pytest.mark.parametrize("boots", [2, 3, 5])
def test_the_guard_flags_at_its_level_under_its_premise(boots):
    # Five configurations scattering alike at 4 levels: each is flagged 10 % of the time
    # (the mean of the levels' ratios against one F flagged 24 / 20 / 16 %), and a
    # configuration scattering 3x is flagged most of the time.
    rng = np.random.default_rng(boots)
    k, levels, sims = 5, 4, 20000
    y = rng.normal(0, 1, (sims, k, levels, boots))
    y[:, 1] *= 3
    ss = ((y - y.mean(-1, keepdims=True)) ** 2).sum(-1)
    rest = ss.sum(1, keepdims=True) - ss
    d = np.full(ss.shape, boots - 1)
    agrees = stats.scatter_agrees(stats.Scatter(ss, d), stats.Scatter(rest, (k - 1) * d))
    same = y[:, [0, 2, 3, 4]]  # the premise: four alike, without the noisy one
    ss0 = ((same - same.mean(-1, keepdims=True)) ** 2).sum(-1)
    rest0 = ss0.sum(1, keepdims=True) - ss0
    d0 = np.full(ss0.shape, boots - 1)
    alike = stats.scatter_agrees(stats.Scatter(ss0, d0), stats.Scatter(rest0, 3 * d0))
    assert abs((1 - alike.mean()) - stats.GUARD_LEVEL) < 0.01
    assert (1 - agrees[:, 1].mean()) > {2: 0.8, 3: 0.95, 5: 0.99}[boots]


def test_first_boot_contrast_is_the_least_squares_fit():
    # y = mu_cell + d [first boot] + e, fitted by numpy's least squares on the design
    # matrix: the same d, its standard error and df.
    rng = np.random.default_rng(4)
    samples = [rng.normal(m, 0.05, n) for m, n in ((0.0, 3), (0.5, 4), (1.0, 2), (0.2, 5))]
    samples = [np.concatenate([[s[0] - 0.3], s[1:]]) for s in samples]
    y = np.concatenate(samples)
    cells = np.concatenate([[i] * len(s) for i, s in enumerate(samples)])
    first = np.concatenate([[1] + [0] * (len(s) - 1) for s in samples])
    design = np.column_stack([cells == i for i in range(len(samples))] + [first]).astype(float)
    coef, rss, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - design.shape[1]
    cov = rss[0] / df * np.linalg.inv(design.T @ design)
    fb = stats.first_boot_contrast(samples)
    assert math.log(fb.ratio) == pytest.approx(coef[-1])
    assert fb.df == df and fb.cells == 4
    half = stats.t95(df) * math.sqrt(cov[-1, -1])
    assert (math.log(fb.low), math.log(fb.high)) == (
        pytest.approx(coef[-1] - half),
        pytest.approx(coef[-1] + half),
    )
    assert fb.p < 0.001  # 26 % slower first boots over a 5 % scatter
    assert stats.first_boot_contrast([[1.0], [2.0]]) is None


def test_boots_needed_by_hand():
    # s = 0.03 on the logs, 4 configurations pooled, ±2 %: n = 10 gives
    # t(0.975, 36) * 0.03 * sqrt(2 / 10) = 2.028 * 0.013416 = 0.02721 > log(1.02) = 0.0198;
    # n = 19: t(0.975, 72) = 1.993, 1.993 * 0.03 * sqrt(2/19) = 0.01940 <= 0.0198, and
    # n = 18: t(0.975, 68) = 1.995, 1.995 * 0.03 * sqrt(2/18) = 0.01995 > 0.0198.
    assert stats.boots_needed(0.03**2, 4, 2.0) == 19
    assert stats.boots_needed(0.001**2, 4, 2.0) == 2
    assert stats.boots_needed(math.nan, 4, 2.0) is None


# ---- variance components ----------------------------------------------------------------


def _nested(rng, sizes, sigma_b, sigma_w):
    """Per configuration, per boot, its measurements' logs: configuration means apart, each
    boot off by N(0, sigma_b), each measurement by N(0, sigma_w)."""
    return [
        [c + rng.normal(0, sigma_b) + rng.normal(0, sigma_w, n) for n in boots]
        for c, boots in enumerate(sizes)
    ]


def test_variance_components_are_the_least_squares_mean_squares():
    # Unbalanced: the two sums of squares from numpy's least squares on dummy-coded design
    # matrices (boots after configurations: RSS(configurations) - RSS(boots)), not from
    # the code under test; its MS_W is sigma_W^2, (MS_B - MS_W) / n0 sigma_B^2.
    rng = np.random.default_rng(11)
    sizes = [[3, 1, 2], [2, 2], [4, 1, 1, 2]]
    samples = _nested(rng, sizes, 0.05, 0.03)
    y = np.concatenate([g for c in samples for g in c])
    config = np.concatenate([[i] * n for i, c in enumerate(sizes) for n in c])
    boot = np.concatenate([[j] * n for j, n in enumerate(n for c in sizes for n in c)])

    def rss(labels):
        x = (labels[:, None] == np.unique(labels)[None, :]).astype(float)
        return float(((y - x @ np.linalg.lstsq(x, y, rcond=None)[0]) ** 2).sum())

    ss_w, df_w = rss(boot), len(y) - 9
    ss_b, df_b = rss(config) - rss(boot), 9 - 3
    n_c = [sum(c) for c in sizes]
    n0 = sum(N - sum(n * n for n in c) / N for N, c in zip(n_c, sizes, strict=True)) / df_b
    vc = stats.variance_components(samples)
    assert vc.within == pytest.approx(ss_w / df_w) and vc.within_df == df_w
    assert vc.per_boot == pytest.approx(n0)
    assert vc.between == pytest.approx((ss_b / df_b - ss_w / df_w) / n0)
    ms_b, ms_w = ss_b / df_b, ss_w / df_w
    satterthwaite = (ms_b - ms_w) ** 2 / (ms_b**2 / df_b + ms_w**2 / df_w)
    assert vc.between_df == pytest.approx(satterthwaite)
    assert (vc.boots, vc.configurations, vc.source) == (9, 3, "in_boot")


@pytest.mark.parametrize("sigma_b, sigma_w", [(0.05, 0.05), (0.02, 0.08)])
def test_variance_components_recover_known_truth_and_cover_it(sigma_b, sigma_w):
    # 3,000 unbalanced sweeps with known sigma_B, sigma_W: sigma_W^2 is unbiased and its
    # chi-squared interval covers 95 %; sigma_B^2 (truncated at 0: biased up only by the
    # truncation) about right, its Satterthwaite chi-squared interval covering near 95 %
    # where truncation is rare.
    from scipy.stats import chi2

    rng = np.random.default_rng(12)
    sizes = [[3, 3, 3, 2], [3, 3, 3], [2, 3, 3, 3, 3], [3, 3, 3]]
    got = [stats.variance_components(_nested(rng, sizes, sigma_b, sigma_w)) for _ in range(3000)]
    w = np.array([g.within for g in got])
    w_df = got[0].within_df
    assert w.mean() == pytest.approx(sigma_w**2, rel=0.02)
    lo, hi = w * w_df / chi2.ppf(0.975, w_df), w * w_df / chi2.ppf(0.025, w_df)
    assert abs(((lo <= sigma_w**2) & (sigma_w**2 <= hi)).mean() - 0.95) < 0.012
    b = np.array([g.between for g in got])
    b_df = np.array([g.between_df for g in got])
    positive = b > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lo_b = b * b_df / chi2.ppf(0.975, np.maximum(b_df, 1e-9))
        hi_b = b * b_df / chi2.ppf(0.025, np.maximum(b_df, 1e-9))
    covered = positive & (lo_b <= sigma_b**2) & (sigma_b**2 <= hi_b)
    if sigma_b >= sigma_w:  # truncation rare: unbiased, and Satterthwaite's df hold
        assert positive.mean() > 0.97
        assert b.mean() == pytest.approx(sigma_b**2, rel=0.05)
        assert 0.92 <= covered.mean() <= 0.975
    else:  # often truncated at 0, so biased up, never down
        assert sigma_b**2 <= b.mean() <= 3 * sigma_b**2
    # The share of the boot mean's variance that is the measurements'.
    r = got[0].per_boot
    share = (sigma_w**2 / r) / (sigma_b**2 + sigma_w**2 / r)
    assert np.median([g.within_share for g in got]) == pytest.approx(share, abs=0.12)


def test_variance_components_with_one_measurement_a_boot_are_the_total():
    rng = np.random.default_rng(13)
    samples = _nested(rng, [[1, 1, 1], [1, 1]], 0.05, 0.0)
    vc = stats.variance_components(samples)
    pooled = stats.scatter([np.concatenate(c) for c in samples], logs=True)
    assert vc.source == "total" and math.isnan(vc.within)
    assert vc.between == pytest.approx(float(pooled.variance)) and vc.between_df == 3
    assert vc.boot_variance == pytest.approx(vc.between)


def test_the_cost_optimal_measurements_a_boot_minimise_cost_times_variance():
    # Kalibera & Jones: n boots of r measurements cost n (c_b + r c_m), variance
    # (s_b + s_w / r) / n; for a fixed precision the cost is proportional to
    # (c_b + r c_m)(s_b + s_w / r): minimised by brute force over r.
    for s_b, s_w, c_b, c_m in [(0.01, 0.04, 120.0, 0.5), (0.001, 0.09, 60, 2), (0.04, 0.01, 30, 3)]:
        r = np.arange(1, 200_000)
        best = r[np.argmin((c_b + r * c_m) * (s_b + s_w / r))]
        got = sizing.cost_optimal_per_boot(s_b, s_w, c_b, c_m)
        assert abs(got - best) <= 1 or got == pytest.approx(best, rel=0.01)
    assert sizing.cost_optimal_per_boot(0.0, 0.01, 100, 1) == math.inf
    assert sizing.cost_optimal_per_boot(0.04, 0.0001, 1, 1) == 1.0
    assert math.isnan(sizing.cost_optimal_per_boot(math.nan, 0.01, 1, 1))


def test_plan_boots_sizes_boots_for_the_measurements_it_picks():
    vc = stats.VarianceComponents(0.0004, 0.09, 10, 100, 20, "in_boot", 10, 5)
    plan = stats.plan_boots(vc, boot_cost=120.0, measurement_cost=0.5, half_width_pct=5.0)
    assert plan.per_boot == round(math.sqrt(120 / 0.5 * 0.09 / 0.0004))
    assert plan.boots == stats.boots_needed(0.0004 + 0.09 / plan.per_boot, 1, 5.0)
    assert plan.cost == pytest.approx(plan.boots * (120 + plan.per_boot * 0.5))
    # Cheaper than the same precision at the default 20 measurements a boot.
    at_20 = stats.boots_for_half_width(0.0004, 0.09, 20, 5.0)
    assert plan.cost < at_20 * (120 + 20 * 0.5)


@pytest.mark.parametrize("sigma_b, s_batch", [(0.05, 0.10), (0.01, 0.10)])
def test_components_from_a_levels_own_batches_recover_known_truth(sigma_b, s_batch):
    # Each boot measures a level once: 9 batches of 50 requests (the first discarded, as
    # servesweep.sizing's stop rule does), each batch's seconds scattering log-sd s_batch;
    # the boot's throughput and its RSE from sizing.batch_estimate (the num_prompts: auto
    # rule's own), 4 configurations x 3 boots. sigma_B^2 and the within share come back.
    from servesweep.sizing import Batch, batch_estimate

    rng = np.random.default_rng(14)
    k, per_batch = 9, 50
    v = s_batch**2 / (k - 1)  # a boot's sampling variance of its log throughput
    between, within, shares = [], [], []
    for _ in range(1500):
        logs, rse2, dfs = [], [], []
        for c in range(4):
            row, r2, dd = [], [], []
            for _boot in range(3):
                rate = 100.0 * (1 + c) * math.exp(rng.normal(0, sigma_b))
                secs = per_batch * 20 / rate * np.exp(rng.normal(0, s_batch, k))
                est = batch_estimate([Batch(per_batch * 20.0, float(d)) for d in secs])
                row.append(math.log(est.value))
                r2.append(est.rse**2)
                dd.append(est.batches - 1)
            logs.append(row), rse2.append(r2), dfs.append(dd)
        vc = stats.components_from_sampling(logs, rse2, dfs, per_boot=(k - 1) * per_batch)
        between.append(vc.between), within.append(vc.within), shares.append(vc.within_share)
    assert vc.source == "batches" and vc.boots == 12
    assert np.mean(within) / ((k - 1) * per_batch) == pytest.approx(v, rel=0.08)
    truth_share = v / (sigma_b**2 + v)
    if sigma_b**2 > v:  # rarely truncated: unbiased
        assert np.mean(between) == pytest.approx(sigma_b**2, rel=0.08)
    assert np.median(shares) == pytest.approx(truth_share, abs=0.1)
    # Without a sampling error known, only the total.
    none = stats.components_from_sampling(logs, [[math.nan] * 3] * 4, dfs, 400)
    assert none.source == "total" and math.isnan(none.within)


def test_shared_boot_per_level_minimises_cost_times_variance():
    # Brute force over u (every level's sampling variance sigma_W,l^2 / r_l = u): the cost
    # of a boot times a boot value's variance is least where the function puts it; one
    # level is cost_optimal_per_boot.
    s_b, w, c_b, c = 0.0025, [0.05, 0.05, 0.64, 2.56], 87.0, [0.221, 0.0356, 0.018, 0.0209]
    got = stats.shared_boot_per_level(s_b, w, c_b, c)
    u_grid = np.geomspace(1e-6, 1, 200_001)
    cost = (c_b + sum(wl * cl for wl, cl in zip(w, c, strict=True)) / u_grid) * (s_b + u_grid)
    u_best = u_grid[np.argmin(cost)]
    assert got == pytest.approx([wl / u_best for wl in w], rel=1e-3)
    one = stats.shared_boot_per_level(0.01, [0.04], 120.0, [0.5])
    assert one[0] == pytest.approx(sizing.cost_optimal_per_boot(0.01, 0.04, 120.0, 0.5))
    assert stats.shared_boot_per_level(0.0, [0.04], 1, [1]) == [math.inf]


def test_an_interval_on_a_df_near_zero_is_unbounded_above_not_an_error():
    # Seen in the shapes tier: a Satterthwaite df near zero sends the t quantile past what
    # exp() can hold; the interval must say "no upper bound", not crash the judge.
    from servesweep.stats import Contrast

    ratio, low, high = Contrast(0.1, 5.0, 0.05, "pooled", 2, 2).interval()
    assert high == math.inf and low == 0.0 and ratio == math.exp(0.1)


def test_a_cell_interval_on_a_df_near_zero_is_unbounded_above_not_an_error():
    # CI's shapes tier (2 variants, 2 boots, rate load): a side judged on its own scatter
    # at 1 df combined with the rest's 1 df has 0.5 df, where t(0.975) is ~160; with a
    # wide scatter the high bound passed what exp() can hold and the report crashed.
    side = stats.SideVariance(1000.0, 0.5, False)
    ratio, low, high = stats.cell_interval(np.log([2.0, 3.0]), side)
    assert ratio == pytest.approx(math.sqrt(6.0))
    assert high == math.inf and low == 0.0
    # the same cell on a finite, pooled variance keeps finite bounds about the mean
    ratio, low, high = stats.cell_interval(np.log([2.0, 3.0]), stats.SideVariance(0.04, 4, True))
    assert 0 < low < ratio < high < math.inf
