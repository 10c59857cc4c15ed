"""The one statistical core: the numbers every verdict rests on, the grid's
(`servesweep.results.judge`) and the hunt's (`servesweep.hunt.sequential`, whose
group-sequential bounds stay its own) alike.

Pure functions over plain numbers (numpy and scipy, no pandas), tested against published
values and by simulation with known truth (tests/unit/results/test_stats.py):

- a boot is the unit: each boot's value of a metric at a level (its throughput, or its own
  requests' percentile) is one number, compared on the **log scale**: boots vary by
  factors (clocks, memory layouts, captured graphs), so the interval of a ratio is
  symmetric there and never reaches below zero once exponentiated;
- the boot scatter is **pooled** over the configurations measured on the same host at the
  same level and metric, each about its own mean (`scatter`): the premise is that
  configurations on one host scatter alike in relative terms, so a cell of 2 boots borrows
  the degrees of freedom of the others' (Dunnett's many-to-one comparisons pool the same
  way). `scatter_agrees` is the guard for a configuration whose own scatter is larger: its
  scatter against the rest's at every level it has, each level's exact one-sided F p
  combined over the levels by Fisher's method (a configuration that makes boots noisier
  does so at every level, and 2 boots give 1 degree of freedom a level), at GUARD_LEVEL;
  a side that fails it is judged by its own scatter ratio times the rest's variance
  (`scaled_side`; Welch–Satterthwaite for the comparison). The pool keeps every
  configuration: leaving the flagged ones out biases it low (A/A 7 % instead of 5 %);
- `contrast` (`blocked_contrast`: boots on several machines, each a block): one comparison's
  log difference, its SE, df and the variance it used; `RatioInterval` its 95 % interval;
- `holm`: Holm's step-down adjustment for a family of comparisons;
- `first_boot_contrast`: first boots against later ones, pooled over configurations;
  `first_boot_scatter`: whether first boots deviate more than boots scatter, any sign;
- `boots_needed`: how many boots a side would resolve a change, from the pooled scatter,
  and `PRACTICAL_MAX_BOOTS`, past which more boots is the wrong advice;
- `variance_components`: where a boot mean's scatter comes from, boot to boot (σ_B²) or
  within a boot (σ_W², one measurement's), by the nested one-way random-effects ANOVA
  pooled over configurations (or with σ_W² from a level's own time batches);
  `shared_boot_per_level` (a boot's levels together; one level: `sizing.cost_optimal_per_boot`),
  `boots_for_half_width` and `plan_boots` what to spend next (Kalibera & Jones 2013);
- `describe` and `welch`: plain summaries and Welch's interval on raw values (boot times,
  the capacity comparison).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
from scipy import stats as sps

from servesweep.sizing import cost_optimal_per_boot

# What the maths takes: lists, or numpy arrays of the same shape.
Values = Sequence[float] | np.ndarray
Rows = Sequence[Sequence[float]] | np.ndarray

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # two-sided, per family of comparisons (Holm)
# The guard's one-sided level: a side whose scatter is larger than the rest's at this level
# is judged on its own boots. Measured in docs/design.md §6 (its power against a 3x scatter).
GUARD_LEVEL = 0.10

# Past this many boots a cell, asking for more repeats is the wrong advice: the boots'
# scatter is the problem. The plan and the report both read it.
PRACTICAL_MAX_BOOTS = 20

Variance = Literal["pooled", "own", "blocked", "none"]


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom (df may be fractional)."""
    return float(sps.t.ppf(p, df))


def t95(df: float) -> float:
    """The two-sided 95 % critical value: t(0.975, df)."""
    return t_quantile(0.5 + CONFIDENCE / 2, df)


def _exp(x: float) -> float:
    """exp that saturates at +inf instead of raising OverflowError."""
    return math.inf if x > 709 else math.exp(x)


def _clean(values: Values) -> np.ndarray:
    a = np.asarray([v for v in values if v is not None], dtype=float)
    return a[~np.isnan(a)]


def logs_of(values: Sequence[float]) -> np.ndarray:
    """The logs of the positive values (a zero or missing value has no place on a ratio
    scale: it is left out)."""
    a = _clean(values)
    return np.log(a[a > 0])


# ---- plain summaries (raw scale) ---------------------------------------------------------


class Described(NamedTuple):
    n: int
    mean: float
    std: float  # sample std (n - 1); nan for n < 2
    cv: float  # std / mean; nan for n < 2 or a zero mean
    ci_low: float  # t-based 95 % CI of the mean; nan for n < 2
    ci_high: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2


def describe(values: Sequence[float]) -> Described:
    a = _clean(values)
    n = len(a)
    if n == 0:
        return Described(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    mean = float(a.mean())
    if n < 2:
        return Described(1, mean, math.nan, math.nan, math.nan, math.nan)
    std = float(a.std(ddof=1))
    half = t95(n - 1) * std / math.sqrt(n)
    cv = std / abs(mean) if mean else math.nan
    return Described(n, mean, std, cv, mean - half, mean + half)


class Welch(NamedTuple):
    """Welch's interval for mean(a) - mean(b)."""

    diff: float
    se: float
    df: float  # Welch-Satterthwaite
    t: float
    p: float  # two-sided
    ci_low: float
    ci_high: float


def welch_from_stats(
    mean_a: float, std_a: float, n_a: int, mean_b: float, std_b: float, n_b: int
) -> Welch:
    qa, qb = std_a**2 / n_a, std_b**2 / n_b
    se = math.sqrt(qa + qb)
    diff = mean_a - mean_b
    if se == 0:  # no spread on either side: the difference is exact
        t = math.copysign(math.inf, diff) if diff else 0.0
        return Welch(diff, 0.0, math.inf, t, 0.0 if diff else 1.0, diff, diff)
    df = (qa + qb) ** 2 / (qa**2 / (n_a - 1) + qb**2 / (n_b - 1))
    t = diff / se
    p = float(2 * sps.t.sf(abs(t), df))
    half = t95(df) * se
    return Welch(diff, se, df, t, p, diff - half, diff + half)


def welch(a: Values, b: Values) -> Welch | None:
    """Welch's interval from two samples; None when either has fewer than 2 values."""
    xa, xb = _clean(a), _clean(b)
    if len(xa) < 2 or len(xb) < 2:
        return None
    stats_a = (float(xa.mean()), float(xa.std(ddof=1)), len(xa))
    stats_b = (float(xb.mean()), float(xb.std(ddof=1)), len(xb))
    return welch_from_stats(*stats_a, *stats_b)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): sorted ascending, the i-th of m is
    max over j <= i of min(1, (m - j + 1) p_(j)). A comparison is significant at 5 % across
    the family when its adjusted p is at most 0.05. nan (no test) stays nan, outside the
    family."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(len(p), math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    m = len(tested)
    running = 0.0
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


# ---- boot scatter on the log scale --------------------------------------------------------


class Scatter(NamedTuple):
    """Sums of squared deviations of log values from their own sample's mean, and their
    degrees of freedom, summed over samples (arrays over any leading shape)."""

    ss: np.ndarray | float
    df: np.ndarray | float

    @property
    def variance(self) -> np.ndarray | float:
        """ss / df (nan where there are no degrees of freedom)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.asarray(self.df) > 0, self.ss / np.maximum(self.df, 1), np.nan)

    def __add__(self, other: Scatter) -> Scatter:  # type: ignore[override]
        return Scatter(self.ss + other.ss, self.df + other.df)

    def __sub__(self, other: Scatter) -> Scatter:
        return Scatter(self.ss - other.ss, self.df - other.df)


NO_SCATTER = Scatter(0.0, 0)


def scatter(samples: Sequence[np.ndarray], logs: bool = False) -> Scatter:
    """The pooled scatter of samples of values (or of their logs, `logs`), boots on the last
    axis, any number each (a sample of one boot adds nothing)."""
    ss, df = np.asarray(0.0), np.asarray(0)
    for x in samples:
        y = np.asarray(x, dtype=float) if logs else np.log(np.asarray(x, dtype=float))
        if y.shape[-1] >= 2:
            ss = ss + ((y - y.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
            df = df + y.shape[-1] - 1
    return Scatter(ss, df)


class ScatterRatio(NamedTuple):
    """A side's scatter against the rest's over its levels (the levels on the last axis):
    each level's own sum of squares standardised by the rest's variance there, summed over
    the levels where both have degrees of freedom, over the side's df there."""

    ratio: np.ndarray | float  # about own variance / the rest's (1 where they agree)
    df: np.ndarray | float  # the side's df over the levels used
    rest_df: np.ndarray | float  # the rest's df over the same levels


def scatter_ratio(own: Scatter, rest: Scatter) -> ScatterRatio:
    own_ss, own_df = np.asarray(own.ss, dtype=float), np.asarray(own.df, dtype=float)
    rest_ss, rest_df = np.asarray(rest.ss, dtype=float), np.asarray(rest.df, dtype=float)
    usable = (own_df > 0) & (rest_df > 0) & (rest_ss > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        standardised = np.where(usable, own_ss * rest_df / np.where(usable, rest_ss, 1.0), 0.0)
    d1 = np.where(usable, own_df, 0.0).sum(axis=-1)
    d2 = np.where(usable, rest_df, 0.0).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(d1 > 0, standardised.sum(axis=-1) / np.maximum(d1, 1), 1.0)
    return ScatterRatio(ratio, d1, d2)


def scatter_agrees(own: Scatter, rest: Scatter, level: float = GUARD_LEVEL):
    """Whether a side's own scatter agrees with the rest of the pool's, over its levels (the
    last axis). At each level where both have df, under the premise its variance over the
    rest's is F(own df, rest df): that level's one-sided p is exact and uniform; the levels'
    p are independent (separate boots), so Fisher's -2 Σ log p is chi-squared with 2 × the
    levels used (Fisher 1932). A side is flagged when that combined p is below `level`.
    True (agrees) where there is nothing to test.

    Why not the mean of the levels' ratios against F(Σ own df, Σ rest df) (the rule before):
    each level's ratio has its own denominator of few df (4 at 2 boots among 5
    configurations), and a mean of such ratios is far heavier-tailed than one F with the
    summed df: under the premise it flagged 24 / 20 / 16 % of configurations at 2 / 3 / 5
    boots instead of 10 % (benchmarks/simulation/guard_calibration.py)."""
    own_ss, own_df = np.asarray(own.ss, dtype=float), np.asarray(own.df, dtype=float)
    rest_ss, rest_df = np.asarray(rest.ss, dtype=float), np.asarray(rest.df, dtype=float)
    usable = (own_df > 0) & (rest_df > 0) & (rest_ss > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(
            usable, (own_ss / np.maximum(own_df, 1)) / (rest_ss / np.maximum(rest_df, 1)), 0
        )
        p = np.where(usable, sps.f.sf(f, np.maximum(own_df, 1), np.maximum(rest_df, 1)), 1.0)
        fisher = np.where(usable, -2 * np.log(np.maximum(p, 1e-300)), 0.0).sum(axis=-1)
    used = usable.sum(axis=-1)
    combined = np.where(used > 0, sps.chi2.sf(fisher, 2 * np.maximum(used, 1)), 1.0)
    return (used == 0) | (combined >= level)


class SideVariance(NamedTuple):
    """The variance one side of a comparison is judged by at one level, and its df."""

    variance: float
    df: float
    pooled: bool  # the sweep's pool (shared with the other side when both are pooled)


def pooled_side(pool: Scatter) -> SideVariance:
    return SideVariance(float(pool.variance), float(pool.df), True)


def scaled_side(ratio: ScatterRatio, rest: Scatter) -> SideVariance:
    """A side whose scatter disagrees with the rest's: its scatter ratio over its levels
    times the rest's variance at this level. Both are estimates, so its df combine as
    1 / (1 / df_ratio + 1 / df_rest) (each adds its relative variance 2 / df). This keeps
    a 3x noisier configuration's own A/A rate at 3-4 % with 2-5 boots a cell, where its
    own per-level variance (1 df at 2 boots, Welch) let 18 % through (docs/design.md §6)."""
    df = 1 / (1 / float(ratio.df) + 1 / float(rest.df)) if ratio.df > 0 and rest.df > 0 else 0.0
    return SideVariance(float(ratio.ratio) * float(rest.variance), df, False)


class Contrast(NamedTuple):
    """One comparison on the log scale: mean log a - mean log b."""

    estimate: float  # log ratio of geometric means
    se: float  # nan: no spread to judge by
    df: float
    variance: Variance  # pooled (both sides), own (one side or both judged on their own)
    n: int  # boots of a
    n_ref: int  # boots of b

    @property
    def p(self) -> float:
        """Two-sided p of "no change"; nan without a spread to judge by (boots that do not
        scatter at all, with df, make the difference exact: p 0, or 1 for none)."""
        if math.isnan(self.se) or math.isnan(self.df) or self.df <= 0:
            return math.nan
        if self.se == 0:
            return 0.0 if self.estimate else 1.0
        return float(2 * sps.t.sf(abs(self.estimate / self.se), self.df))

    def interval(self, confidence: float = CONFIDENCE) -> RatioInterval:
        """The ratio a / b of geometric means with its interval (never below zero)."""
        ratio = math.exp(self.estimate)
        if math.isnan(self.se) or math.isnan(self.df) or self.df <= 0:
            return RatioInterval(ratio, math.nan, math.nan)
        half = t_quantile(0.5 + confidence / 2, self.df) * self.se
        return RatioInterval.of_logs(self.estimate, half)


class RatioInterval(NamedTuple):
    ratio: float
    low: float
    high: float

    @classmethod
    def of_logs(cls, centre: float, half: float) -> RatioInterval:
        """exp(centre) with exp(centre -/+ half). A df near zero (two boots a side judged
        on their own: 0.5 df) makes the half-width astronomically wide: the high bound is
        then +inf, not an OverflowError, and the low bound 0."""
        return cls(*(_exp(x) for x in (centre, centre - half, centre + half)))

    def pct(self) -> tuple[float, float, float]:
        """As Δ %: (ratio - 1) × 100 and the bounds likewise (never below -100 %)."""
        return tuple((x - 1) * 100 for x in self)  # type: ignore[return-value]


def combine(var_a, df_a, n_a, var_b, df_b, n_b, shared):
    """The standard error of mean a - mean b and its degrees of freedom from each side's
    variance estimate (with its df) and boots; `shared`: both sides use one estimate (the
    pool), whose df it keeps. Otherwise Welch–Satterthwaite. Arrays broadcast."""
    with np.errstate(divide="ignore", invalid="ignore"):
        qa, qb = var_a / n_a, var_b / n_b
        se = np.sqrt(qa + qb)
        satterthwaite = (qa + qb) ** 2 / (
            qa**2 / np.maximum(df_a, 1e-12) + qb**2 / np.maximum(df_b, 1e-12)
        )
        satterthwaite = np.where((df_a > 0) & (df_b > 0), satterthwaite, np.nan)
        df = np.where(shared, df_a, satterthwaite)
    return se, df


def contrast(
    a_logs: np.ndarray, b_logs: np.ndarray, side_a: SideVariance, side_b: SideVariance
) -> Contrast:
    """One comparison of two samples of log values, each side judged by its SideVariance
    (the pool's where it agrees with it, else scaled_side)."""
    a, b = np.asarray(a_logs, dtype=float), np.asarray(b_logs, dtype=float)
    n, n_ref = len(a), len(b)
    if n == 0 or n_ref == 0:
        return Contrast(math.nan, math.nan, math.nan, "none", n, n_ref)
    estimate = float(a.mean() - b.mean())
    shared = side_a.pooled and side_b.pooled
    se, df = combine(
        np.float64(side_a.variance), np.float64(side_a.df), n,
        np.float64(side_b.variance), np.float64(side_b.df), n_ref, shared,
    )  # fmt: skip
    se, df = float(se), float(df)
    if math.isnan(se) or math.isnan(df) or df <= 0:
        return Contrast(estimate, math.nan, math.nan, "none", n, n_ref)
    return Contrast(estimate, se, df, "pooled" if shared else "own", n, n_ref)


def blocked_contrast(
    a_blocks: Sequence[np.ndarray], b_blocks: Sequence[np.ndarray], pool: Scatter
) -> Contrast:
    """One comparison, each machine a block: on each machine that ran both sides, the
    difference of their mean logs, weighted by w = 1/(1/n_a + 1/n_b): the least-squares side
    effect in y = mu + side + machine (a machine's effect cancels), variance σ²/Σw with σ² =
    `pool` (boots about their own (configuration, machine) mean). One-sided blocks: skipped."""
    pairs = [(np.asarray(a), np.asarray(b)) for a, b in zip(a_blocks, b_blocks, strict=True)]
    pairs = [(a, b) for a, b in pairs if len(a) and len(b)]
    n, n_ref = sum(len(a) for a, _ in pairs), sum(len(b) for _, b in pairs)
    if not pairs:
        return Contrast(math.nan, math.nan, math.nan, "none", n, n_ref)
    w = np.array([1 / (1 / len(a) + 1 / len(b)) for a, b in pairs])
    d = np.array([a.mean() - b.mean() for a, b in pairs])
    estimate = float((w * d).sum() / w.sum())
    if not pool.df > 0 or math.isnan(float(pool.variance)):
        return Contrast(estimate, math.nan, math.nan, "none", n, n_ref)
    se = math.sqrt(float(pool.variance) / w.sum())
    return Contrast(estimate, se, float(pool.df), "blocked", n, n_ref)


def cell_interval(logs: np.ndarray, side: SideVariance) -> RatioInterval:
    """One cell's geometric mean with its 95 % interval from the variance it is judged by,
    as a ratio interval (a band that never reaches below zero)."""
    y = np.asarray(logs, dtype=float)
    if len(y) == 0:
        return RatioInterval(math.nan, math.nan, math.nan)
    centre = float(y.mean())
    if not side.df > 0 or math.isnan(side.variance):
        return RatioInterval(math.exp(centre), math.nan, math.nan)
    half = t95(side.df) * math.sqrt(side.variance / len(y))
    return RatioInterval.of_logs(centre, half)


# ---- first boots ------------------------------------------------------------------------


class FirstBoot(NamedTuple):
    """First boots against later ones of the same configurations (a ratio, pooled)."""

    ratio: float  # geometric: first boots / later boots
    low: float
    high: float
    p: float
    df: float
    cells: int  # configurations with a first boot and at least one later one


def first_boot_contrast(samples: Sequence[Values]) -> FirstBoot | None:
    """Each sample: one configuration's log values in boot order (its first boot first).
    Fits y = mu_cell + d × [first boot] + e with one variance (least squares): d is the
    weighted mean of each configuration's first-minus-later difference, the variance comes
    from the later boots' own scatter and the differences' scatter about d. None when
    fewer than 2 configurations have a first and a later boot (no df)."""
    d, w, ss, df = [], [], 0.0, 0
    for sample in samples:
        y = np.asarray(sample, dtype=float)
        if len(y) < 2:
            continue
        later = y[1:]
        d.append(float(y[0] - later.mean()))
        w.append(1.0 / (1.0 + 1.0 / len(later)))
        ss += float(((later - later.mean()) ** 2).sum())
        df += len(later) - 1
    if not d:
        return None
    d_, w_ = np.asarray(d), np.asarray(w)
    est = float((w_ * d_).sum() / w_.sum())
    ss += float((w_ * (d_ - est) ** 2).sum())
    df += len(d) - 1
    if df <= 0 or ss <= 0:
        return None
    se = math.sqrt(ss / df / w_.sum())
    half = t95(df) * se
    p = float(2 * sps.t.sf(abs(est / se), df))
    ratio, low, high = RatioInterval.of_logs(est, half)
    return FirstBoot(ratio, low, high, p, df, len(d))


class FirstBootScatter(NamedTuple):
    """First boots' deviations from their configuration's later boots, against the later
    boots' own scatter (all levels together)."""

    ratio: float  # mean squared standardised deviation: about 1 where first boots are alike
    excess: float  # rms deviation of first boots beyond the boot scatter (log scale)
    p: float  # P(F(df_num, df) >= ratio): first boots like the others
    df_num: int  # configurations x levels
    df: int  # the later boots' df (per level)
    cells: int


def first_boot_scatter(samples: Sequence[np.ndarray]) -> FirstBootScatter | None:
    """Each sample: one configuration's log values, levels x boots in boot order (its first
    boot first). Under the premise that a first boot is like the others, its deviation from
    its configuration's later boots, d = y_0 - mean(later), has variance s^2 (1 + 1/k) (k
    later boots, s^2 the later boots' pooled scatter at that level), so the mean of
    d^2 / ((1 + 1/k) s^2) over configurations and levels is about F(configurations x
    levels, df). Unlike `first_boot_contrast` (a signed mean, which first boots slow at
    different levels in different configurations average away) it sees first boots that
    differ by any amount, in any direction, at any level. None without the df."""
    devs, ks = [], []
    later = []
    for sample in samples:
        y = np.atleast_2d(np.asarray(sample, dtype=float))
        if y.shape[-1] < 2:
            continue
        rest = y[:, 1:]
        devs.append(y[:, 0] - rest.mean(axis=-1))
        ks.append(rest.shape[-1])
        later.append(rest)
    pool = scatter(later, logs=True)
    df = int(np.max(pool.df)) if len(later) else 0
    if not devs or df <= 0:
        return None
    var = np.asarray(pool.variance, dtype=float)
    if not np.all(var > 0):
        return None
    d = np.asarray(devs)  # configurations x levels
    inflate = 1 + 1 / np.asarray(ks, dtype=float)[:, None]
    ratio = float(np.mean(d**2 / (inflate * var)))
    excess = math.sqrt(max(0.0, float(np.mean(d**2 - inflate * var))))
    p = float(sps.f.sf(ratio, d.size, df))
    return FirstBootScatter(ratio, excess, p, int(d.size), df, len(devs))


# ---- how many boots ---------------------------------------------------------------------


def boots_needed(
    variance: float,
    configurations: int,
    resolve_pct: float,
    alpha: float = ALPHA,
    limit: int = 1000,
) -> int | None:
    """Boots per side for the (1 - alpha) interval of a ratio to be no wider than
    ±resolve_pct on the log scale, with the boot scatter pooled over `configurations`
    that each get as many: the smallest n with t(1 - alpha/2, c (n - 1)) × s × sqrt(2 / n)
    ≤ log(1 + resolve_pct / 100). None when the scatter is unknown or more than `limit`
    would be needed."""
    if variance is None or math.isnan(variance) or configurations < 1:
        return None
    s = math.sqrt(variance)
    n = np.arange(2, limit + 1)
    widths = sps.t.ppf(1 - alpha / 2, configurations * (n - 1)) * s * np.sqrt(2.0 / n)
    enough = np.flatnonzero(widths <= math.log1p(resolve_pct / 100))
    return int(n[enough[0]]) if len(enough) else None


# ---- variance components: where a boot mean's scatter comes from ------------------------


class VarianceComponents(NamedTuple):
    """One level and metric's scatter on the log scale, pooled over configurations: a boot's
    value is the mean of `per_boot` measurements (in-boot repeats, or requests), so its
    variance is `between` + `within` / `per_boot`.

    `between` (σ_B²): boot to boot, truncated at 0; `within` (σ_W²): one measurement's within
    a boot; each with its degrees of freedom (`between_df` Satterthwaite's; 0 where the
    estimate is truncated). `source`: `in_boot` (benchmark.repeats_in_boot ≥ 2),
    `batches` (a level's own requests in time batches), or `total` (only the boot means'
    total is known: `within` nan)."""

    between: float
    within: float
    between_df: float
    within_df: float
    per_boot: float  # measurements in one boot's value (n0 where boots differ)
    source: str
    boots: int  # boots in all, over the configurations
    configurations: int

    @property
    def boot_variance(self) -> float:
        """The variance of one boot's value: σ_B² + σ_W² / R (the total where only it is
        known)."""
        if math.isnan(self.within):
            return self.between
        return self.between + self.within / self.per_boot

    @property
    def within_share(self) -> float:
        """The share of a boot value's variance that is the measurements' sampling
        (σ_W² / R over σ_B² + σ_W² / R): what more measurements in a boot would remove."""
        total = self.boot_variance
        return (self.within / self.per_boot) / total if total > 0 else math.nan

    @property
    def between_share(self) -> float:
        return 1 - self.within_share


def _ms_components(
    ss_w: float, df_w: float, ss_b: float, df_b: float, n0: float
) -> tuple[float, float, float, float]:
    """(σ_B², σ_W², df of σ_B², df of σ_W²) from the two mean squares: E[MS_W] = σ_W²,
    E[MS_B] = σ_W² + n0 σ_B². σ_B² = (MS_B - MS_W) / n0, truncated at 0; its df by
    Satterthwaite (1946): (MS_B - MS_W)² / (MS_B² / df_B + MS_W² / df_W)."""
    ms_w = ss_w / df_w if df_w > 0 else math.nan
    ms_b = ss_b / df_b if df_b > 0 else math.nan
    if math.isnan(ms_b) or math.isnan(ms_w) or n0 <= 0:
        return math.nan, ms_w, math.nan, float(df_w)
    diff = ms_b - ms_w
    if diff <= 0:
        return 0.0, ms_w, 0.0, float(df_w)
    df = diff**2 / (ms_b**2 / df_b + ms_w**2 / df_w)
    return diff / n0, ms_w, float(df), float(df_w)


def variance_components(
    samples: Sequence[Sequence[Values]], source: str = "in_boot"
) -> VarianceComponents:
    """The nested one-way random-effects ANOVA (configuration → boot → measurement), by the
    method of moments, on log values: `samples` holds, per configuration, its boots, each a
    sequence of its measurements' logs (a boot may have one). Configurations differ in their
    means (fixed: each boot is about its own configuration's mean), boots and measurements
    are random. Unbalanced groups: MS_B's expectation is σ_W² + n0 σ_B² with
    n0 = Σ_c (N_c - Σ_b n_cb² / N_c) / Σ_c (b_c - 1) (Sokal & Rohlf, Biometry, nested
    ANOVA with unequal sample sizes); n0 is the R of the boot's variance σ_B² + σ_W² / R.
    Without two measurements in any boot, `within` is nan and `between` the boot means'
    pooled variance (all of it): `source` total.

    `source` says what the measurements are: `in_boot` (benchmark.repeats_in_boot ≥ 2) or
    `batches` (a level measured once, its requests cut into K time batches: the boot's
    value is about the mean of its batches, so the same model holds with σ_W² one batch's
    scatter, the batch-means method; batches long against the requests' correlation are
    independent)."""
    ss_w = df_w = ss_b = df_b = 0.0
    n0_num = 0.0
    boots = configurations = 0
    for config in samples:
        groups = [np.asarray(g, dtype=float) for g in config]
        groups = [g[~np.isnan(g)] for g in groups]
        groups = [g for g in groups if len(g)]
        if not groups:
            continue
        configurations += 1
        boots += len(groups)
        sizes = np.asarray([len(g) for g in groups], dtype=float)
        means = np.asarray([g.mean() for g in groups])
        ss_w += float(sum(((g - g.mean()) ** 2).sum() for g in groups))
        df_w += float((sizes - 1).sum())
        if len(groups) >= 2:
            grand = float((sizes * means).sum() / sizes.sum())
            ss_b += float((sizes * (means - grand) ** 2).sum())
            df_b += len(groups) - 1
            n0_num += float(sizes.sum() - (sizes**2).sum() / sizes.sum())
    n0 = n0_num / df_b if df_b > 0 else math.nan
    if df_w <= 0:  # one measurement a boot: only the boot means' total
        total = ss_b / df_b if df_b > 0 else math.nan
        per_boot = 1.0 if math.isnan(n0) else n0
        return VarianceComponents(
            total, math.nan, float(df_b), 0.0, per_boot, "total", boots, configurations
        )
    between, within, b_df, w_df = _ms_components(ss_w, df_w, ss_b, df_b, n0)
    return VarianceComponents(between, within, b_df, w_df, n0, source, boots, configurations)


def components_from_sampling(
    samples: Sequence[Values],
    sampling: Sequence[Sequence[float]],
    sampling_df: Sequence[Sequence[float]],
    per_boot: float,
) -> VarianceComponents:
    """Components where each boot measured a level once but knows its own sampling error:
    `samples` per configuration its boots' logs, `sampling` each boot's variance of its
    own log value (its relative standard error squared: `servesweep.sizing`'s batch means
    over the level's requests), `sampling_df` that estimate's df (its batches - 1). The
    boots' pooled scatter MS_B estimates σ_B² + v, the boots' mean sampling variance v
    (pooled by df) estimates v, so σ_B² = MS_B - v (truncated at 0, Satterthwaite's df)
    and `within` = v × `per_boot` (one request's, `per_boot` the requests a boot sent).
    `source` batches."""
    pool = scatter([np.asarray(x, dtype=float) for x in samples], logs=True)
    v = np.concatenate([np.asarray(x, dtype=float) for x in sampling] or [np.zeros(0)])
    d = np.concatenate([np.asarray(x, dtype=float) for x in sampling_df] or [np.zeros(0)])
    ok = ~np.isnan(v) & (d > 0)
    boots = sum(len(x) for x in samples)
    configurations = sum(1 for x in samples if len(x))
    if not ok.any() or not float(pool.df) > 0:
        total = VarianceComponents(
            float(pool.variance), math.nan, float(pool.df), 0.0, 1.0, "total", boots,
            configurations,
        )  # fmt: skip
        return total
    df_v = float(d[ok].sum())
    mean_v = float((v[ok] * d[ok]).sum() / df_v)
    between, _, b_df, _ = _ms_components(mean_v * df_v, df_v, float(pool.ss), float(pool.df), 1.0)
    return VarianceComponents(
        between, mean_v * per_boot, b_df, df_v, per_boot, "batches", boots, configurations
    )


def shared_boot_per_level(
    between: float, within: Sequence[float], boot_cost: float, measurement_costs: Sequence[float]
) -> list[float]:
    """Measurements a level when one boot serves every level: n boots cost
    n (c_boot + Σ r_l c_l); asking every level's sampling to be alike, σ_W,l² / r_l = u, a
    boot value's variance is σ_B² + u, and cost × variance is least at
    u = √(A σ_B² / c_boot), A = Σ σ_W,l² c_l, so r_l = σ_W,l² / u (Kalibera & Jones'
    argument with the boot's cost shared by the levels; one level gives
    `cost_optimal_per_boot`). `within`: each level's σ_W² of one measurement; inf where
    boots do not scatter; nan without the components."""
    w = np.asarray(within, dtype=float)
    c = np.asarray(measurement_costs, dtype=float)
    if math.isnan(between) or np.isnan(w).any() or np.isnan(c).any():
        return [math.nan] * len(w)
    a = float((w * c).sum())
    if between <= 0 or boot_cost <= 0:
        return [math.inf if x > 0 else 1.0 for x in w]
    if a <= 0:
        return [1.0] * len(w)
    u = math.sqrt(a * between / boot_cost)
    return [max(1.0, float(x / u)) for x in w]


class BootPlan(NamedTuple):
    """What a precision target costs: `per_boot` measurements in each of `boots` boots a
    side (None: more than the limit), and the seconds a side."""

    per_boot: int
    boots: int | None
    cost: float  # boots × (boot_cost + per_boot × measurement_cost); inf past the limit


def boots_for_half_width(
    between: float,
    within: float,
    per_boot: float,
    half_width_pct: float,
    configurations: int = 1,
    alpha: float = ALPHA,
    limit: int = 1000,
) -> int | None:
    """Boots a side for a comparison's (1 - alpha) interval to be no wider than
    ±half_width_pct when each boot's value is the mean of `per_boot` measurements: the
    boot variance σ_B² + σ_W² / per_boot in `boots_needed` (its t has the pool's df over
    `configurations`). `within` nan: `between` is the boots' total as measured."""
    variance = between if math.isnan(within) else between + within / per_boot
    return boots_needed(variance, configurations, half_width_pct, alpha, limit)


def plan_boots(
    components: VarianceComponents,
    boot_cost: float,
    measurement_cost: float,
    half_width_pct: float,
    configurations: int = 1,
    alpha: float = ALPHA,
    per_boot_range: tuple[int, int] = (1, 100_000),
) -> BootPlan:
    """The cheapest way to a ±half_width_pct interval: `within` put per measurement (as
    `cost_optimal_per_boot` takes it), r from it (rounded, within `per_boot_range`), then
    the boots that r needs. Where the components are unknown (`within` nan), the
    measurements stay at `components.per_boot` and only boots are sized."""
    lo, hi = per_boot_range
    r = cost_optimal_per_boot(components.between, components.within, boot_cost, measurement_cost)
    if math.isnan(r):
        r = components.per_boot
    per_boot = int(min(hi, max(lo, round(r) if math.isfinite(r) else hi)))
    n = boots_for_half_width(
        components.between, components.within, per_boot, half_width_pct, configurations, alpha
    )
    cost = math.inf if n is None else n * (boot_cost + per_boot * measurement_cost)
    return BootPlan(per_boot, n, cost)
