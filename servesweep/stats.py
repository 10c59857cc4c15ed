"""Statistics over repeats: the numbers a verdict rests on.

Pure functions over plain numbers (numpy and scipy, no pandas), tested against published
values (tests/unit/results/test_stats.py):
- `describe`: n, mean, sample std, CV and the t-based 95 % CI of the mean;
- `welch`: Welch's unequal-variance t interval for a difference of means, from samples or
  from summaries (mean, std, n);
- `two_stage_bootstrap`: a CI for any statistic of requests pooled over boots, resampling
  boots and then requests within each, so boot-to-boot variance is in the interval;
- `log_ratio`: Welch's interval on the boots' log values, as a ratio (latency percentiles:
  one percentile per boot, so the boot is the unit and its requests' scatter is inside it);
- `holm`: Holm's step-down adjusted p-values for a family of comparisons;
- `repeats_needed`: how many boots per side a comparison needs to resolve a given change,
  and `PRACTICAL_MAX_BOOTS`, past which more boots is the wrong advice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95

# Past this many boots a cell, asking for more repeats is the wrong advice (the H200 sweep's
# noisy comparisons asked for 346): the boots' scatter is the problem. The plan and the
# report both read it.
PRACTICAL_MAX_BOOTS = 20


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom (df may be fractional)."""
    return float(sps.t.ppf(p, df))


def t95(df: float) -> float:
    """The two-sided 95 % critical value: t(0.975, df)."""
    return t_quantile(0.5 + CONFIDENCE / 2, df)


def _clean(values: Sequence[float]) -> np.ndarray:
    a = np.asarray([v for v in values if v is not None], dtype=float)
    return a[~np.isnan(a)]


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


def welch(a: Sequence[float], b: Sequence[float]) -> Welch | None:
    """Welch's interval from two samples; None when either has fewer than 2 values."""
    a, b = _clean(a), _clean(b)
    if len(a) < 2 or len(b) < 2:
        return None
    stats_a = (float(a.mean()), float(a.std(ddof=1)), len(a))
    stats_b = (float(b.mean()), float(b.std(ddof=1)), len(b))
    return welch_from_stats(*stats_a, *stats_b)


class Ratio(NamedTuple):
    """A ratio of two sides' geometric means with its 95 % interval and two-sided p."""

    ratio: float
    low: float
    high: float
    p: float
    sd_log: float  # the first side's std of log values (about its CV)
    sd_log_ref: float


def log_ratio(a: Sequence[float], b: Sequence[float]) -> Ratio | None:
    """exp(mean log a - mean log b) with Welch's 95 % interval on the log values: each value
    is one boot's statistic (a latency percentile), so the interval has as many degrees of
    freedom as the boots give and the requests' scatter is already in each boot's value.
    None with fewer than 2 positive values a side."""
    la = np.log([x for x in _clean(a) if x > 0])
    lb = np.log([x for x in _clean(b) if x > 0])
    if len(la) < 2 or len(lb) < 2:
        return None
    w = welch(la, lb)
    return Ratio(
        math.exp(w.diff),
        math.exp(w.ci_low),
        math.exp(w.ci_high),
        w.p,
        float(la.std(ddof=1)),
        float(lb.std(ddof=1)),
    )


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


def _resample(groups: list[np.ndarray], draws: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`draws` two-stage resamples of the pooled requests: boots with replacement, then each
    chosen boot's requests with replacement. Returns one array per draw."""
    out = []
    for _ in range(draws):
        picks = rng.integers(0, len(groups), size=len(groups))
        parts = [groups[i][rng.integers(0, len(groups[i]), size=len(groups[i]))] for i in picks]
        out.append(np.concatenate(parts))
    return out


def two_stage_bootstrap(
    groups_a: list[Sequence[float]],
    groups_b: list[Sequence[float]] | None,
    statistic: Callable[[np.ndarray], float],
    draws: int = 1000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(estimate, low, high): the percentile-bootstrap 95 % CI of statistic(pooled a), or of
    statistic(a) / statistic(b) when `groups_b` is given. Each group is one boot's values."""
    rng = np.random.default_rng(seed)
    ga = [_clean(g) for g in groups_a if len(_clean(g))]
    gb = [_clean(g) for g in groups_b if len(_clean(g))] if groups_b is not None else None
    if not ga or (gb is not None and not gb):
        return math.nan, math.nan, math.nan

    def value(a, b):
        if b is None:
            return statistic(a)
        denominator = statistic(b)
        return statistic(a) / denominator if denominator else math.nan

    estimate = value(np.concatenate(ga), None if gb is None else np.concatenate(gb))
    sa = _resample(ga, draws, rng)
    sb = _resample(gb, draws, rng) if gb is not None else [None] * draws
    samples = np.asarray([value(a, b) for a, b in zip(sa, sb, strict=True)])
    if math.isnan(estimate) or np.isnan(samples).any():
        return float(estimate), math.nan, math.nan  # a zero reference: no ratio to speak of
    low, high = np.percentile(samples, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    return float(estimate), float(low), float(high)


def repeats_needed(
    cv_a: float, cv_b: float, ratio: float, resolve_pct: float, limit: int = 1000
) -> int | None:
    """Boots per side for the 95 % interval of (mean a / mean b - 1) to be no wider than
    ±resolve_pct, with the CVs measured so far and mean a = ratio × mean b: the smallest n
    with t(0.975, 2n - 2) × sqrt((ratio × cv_a)² + cv_b²) / sqrt(n) ≤ resolve_pct / 100.
    None when the CVs are unknown, or when more than `limit` would be needed."""
    if any(math.isnan(x) for x in (cv_a, cv_b, ratio)):
        return None
    spread = math.sqrt((ratio * cv_a) ** 2 + cv_b**2)
    n = np.arange(2, limit + 1)
    widths = sps.t.ppf(0.5 + CONFIDENCE / 2, 2 * n - 2) * spread / np.sqrt(n)
    enough = np.flatnonzero(widths <= resolve_pct / 100)
    return int(n[enough[0]]) if len(enough) else None
