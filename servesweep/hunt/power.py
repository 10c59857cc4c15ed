"""The boots a side a round's power needs, and the power a design has: the hunt's
statement "power 0.8" made true where the cap allows it (docs/hunt.md, "What power and α
mean").

A round's design (`servesweep.hunt.sequential.make_design`) fixes its looks and bounds; at
a boot variance σ² of the logs, a gain g has drift g / sqrt(2 σ² / N) at the last look (N
boots a side). `drift_for_power` finds, for a design, the drift at which a gain of δ at one
level (the others unchanged) is adopted with the design's power, on the normal scale by
numerical integration (`crossing_probabilities`); `plan_boots` turns it into N from the
pooled scatter, with the t quantiles of the pool's df; `power_at` says what a design
(at the cap, say) delivers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import optimize
from scipy import stats as sps

from servesweep.hunt.sequential import Design, crossing_probabilities, t_upper


def _adopt_probability(design: Design, gain: float, delta: float, unchanged: float) -> float:
    """Normal scale, drifts at full information (the mean of Z at the last look): an arm
    gaining `gain` at one level is adopted when that level crosses its efficacy bound
    before its futility bound (futility tests δ: drift `delta`) and each other level's
    non-inferiority test (drift `unchanged`: an unchanged level against -margin) crosses
    by the last look. The product of the two: a lower bound when the levels' errors are
    independent or positively correlated (a boot's speed shared by its levels raises both
    events together: Harris's inequality)."""
    looks = np.asarray(design.looks, dtype=float)
    t = looks / looks[-1]
    b = sps.norm.isf(np.asarray(design.efficacy_p))
    f = sps.norm.isf(np.asarray(design.futility_p))
    lower = np.minimum(delta * np.sqrt(t) - f, b)
    eff = float(crossing_probabilities(looks, b, lower, gain).upper.sum())
    if design.levels == 1:
        return eff
    b_ni = sps.norm.isf(np.asarray(design.noninferiority_p))
    ni = float(crossing_probabilities(looks, b_ni, None, unchanged).upper.sum())
    return eff * ni ** (design.levels - 1)


def _margin_ratio(design: Design) -> float:
    """-log(1 - margin) / log(1 + δ): an unchanged level's drift against the margin, per
    unit of a δ gain's drift against 0."""
    return -math.log1p(-min(design.margin, 0.999)) / math.log1p(design.min_effect)


def drift_for_power(design: Design) -> float:
    """The drift at full information (δ / its standard error at the last look) at which a
    gain of δ at one level is adopted with the design's power."""
    return _drift_for_power(
        design.looks,
        design.efficacy_p,
        design.futility_p,
        design.noninferiority_p,
        design.levels,
        design.power,
        round(_margin_ratio(design), 3),
    )


@lru_cache(maxsize=1024)
def _drift_for_power(looks, efficacy_p, futility_p, ni_p, levels, power, ratio) -> float:
    design = Design(looks, 0.0, 0.0, 0.01, levels, efficacy_p, futility_p, 0.0, ni_p)

    def short(drift: float) -> float:
        return _adopt_probability(design, drift, drift, drift * ratio) - power

    return float(optimize.brentq(short, 0.0, 30.0, xtol=1e-4))


def widening(design: Design, df: float) -> float:
    """How much wider the last look's bounds are as t quantiles at `df` than on the normal
    scale (the ratio of t to z for its efficacy and futility levels; 1 at infinite df)."""
    if not (math.isfinite(df) and df > 0):
        return 1.0
    p = np.asarray([design.efficacy_p[-1], design.futility_p[-1]])
    return max(float(t_upper(p, df).sum() / sps.norm.isf(p).sum()), 1.0)


def boots_for_power(design: Design, variance: float, df: float = math.inf) -> float:
    """Boots a side at which `design`, at this boot variance of the logs, adopts a gain of
    δ with its power: n = 2 σ² θ² / log(1 + δ)², θ = drift_for_power(design) on the
    normal scale, widened to the pool's `df` at the last look (`widening`)."""
    theta = drift_for_power(design) * widening(design, df)
    return 2 * variance * theta**2 / math.log1p(design.min_effect) ** 2


class BootsPlan(NamedTuple):
    boots: int  # N: boots a side at the last look (the cap where the power needs more)
    needed: int | None  # what the stated power needs (None: no scatter known yet)
    capped: bool  # the cap is short of `needed`


def plan_boots(
    design_at: Callable[[int], Design],
    variance: float | None,
    boots_min: int,
    cap: int,
    df_at: Callable[[int], float] = lambda n: math.inf,
) -> BootsPlan:
    """The smallest N (boots_min <= N <= cap) at which design_at(N) has its power at this
    variance, with df_at(N) df in the pool at its last look: N >= boots_for_power(...).
    The bounds widen slowly with N, so a fixed-point iteration from below finds it in a
    few designs (then steps back where it jumped past it). Past the cap: N = cap, and
    `needed` is what a design ending at the cap's bounds would need."""
    if variance is None or not math.isfinite(variance):
        return BootsPlan(cap, None, False)

    def enough(k: int) -> bool:
        return math.ceil(boots_for_power(design_at(k), variance, df_at(k)) - 1e-9) <= k

    n = boots_min
    for _ in range(64):
        want = math.ceil(boots_for_power(design_at(n), variance, df_at(n)) - 1e-9)
        if want <= n:
            while n > boots_min and enough(n - 1):  # the jump from below can overshoot
                n -= 1
            return BootsPlan(n, n, False)
        if want > cap:
            at_cap = boots_for_power(design_at(cap), variance, df_at(cap))
            return BootsPlan(cap, max(math.ceil(at_cap - 1e-9), want), True)
        n = want
    return BootsPlan(n, n, False)  # pragma: no cover (the iteration converges in a few steps)


def power_at(
    design: Design, variance: float, gain_pct: float | None = None, df: float = math.inf
) -> float:
    """The probability (with several levels the product above) that an arm gaining
    `gain_pct` (default δ) at one counted level, unchanged at the others, is adopted by
    `design` at this boot variance of the logs, with `df` in the pool at the last look
    (the drifts narrowed by `widening`, as boots_for_power widens them)."""
    if not variance > 0:
        return 1.0
    se = math.sqrt(2 * variance / design.looks[-1]) * widening(design, df)
    delta = math.log1p(design.min_effect) / se
    gain = delta if gain_pct is None else math.log1p(gain_pct / 100) / se
    return _adopt_probability(design, gain, delta, delta * _margin_ratio(design))
