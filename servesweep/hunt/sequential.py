"""Group-sequential boundaries and the per-look decision of one arm (a candidate against its
reference) from per-boot values.

The statistic: for each counted level, a t statistic on the log of the per-boot values, so
the estimate is a relative difference (exp(d) - 1). The boot scatter is pooled over every
sample of that level the hunt has measured (each about its own mean, df = sum(n_i - 1), as
in Dunnett's many-to-one comparisons): on one machine a configuration's boots scatter alike
in relative terms, and the pool's many df let a look at 1-2 boots a side decide. An arm (or
reference) whose own scatter is larger than the pool's (one-sided F-test) is judged by
Welch on its own boots instead; `pool_variance: false` uses Welch throughout. Logs because
a boot's throughput varies multiplicatively (clocks, layouts), the ratio of geometric means
has a symmetric interval on the log scale, and the same code serves a latency (the sign
flips).

Two one-sided sequential tests run side by side on the same looks (boots per side n_1 <
... < n_K, information fraction t_k = n_k / n_K):
- efficacy, H0: gain = 0, α spent by a Lan-DeMets spending function (O'Brien-Fleming type
  by default), Bonferroni over the counted levels (α / L each);
- futility, H0': gain = δ, β = 1 - power spent the same way; it is non-binding: the
  efficacy bounds are computed as if futility never stopped anything, so ignoring a
  futility stop never inflates α.
Boundaries are computed in the normal (known variance) scale by numerical integration of
the joint law of (Z_1, ..., Z_K) (Jennison & Turnbull 2000, ch. 19) and carried to the t
scale by their nominal significance levels (the "significance level approach", J&T §11.4).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

import numpy as np
from scipy import optimize
from scipy import stats as sps

from servesweep import stats

Spending = Literal["obf", "pocock"]
Verdict = Literal["adopt", "reject", "continue", "undecided"]
_FAR = 12.0  # densities are cut at 12 sd from their mean
_STEP = 0.02  # grid step (Simpson's rule) of the numerical integration
_NO_BOUND = 40.0  # a bound that nothing crosses (no error spent at that look)


def spend(kind: Spending, level: float, t: np.ndarray | float) -> np.ndarray:
    """Cumulative error spent by information fraction t (Lan & DeMets 1983): 'obf' is the
    O'Brien-Fleming type 2 - 2 Phi(z_{1-a/2} / sqrt t), 'pocock' is a log(1 + (e - 1) t)."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if kind == "obf":
        with np.errstate(divide="ignore"):
            return 2 * sps.norm.sf(sps.norm.isf(level / 2) / np.sqrt(t))
    if kind == "pocock":
        return level * np.log1p((math.e - 1) * t)
    raise ValueError(f"unknown spending function {kind!r}")


class _Grid(NamedTuple):
    z: np.ndarray  # points of Z_k inside the continuation region
    mass: np.ndarray  # sub-density times Simpson weight at each point


def _simpson(a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    n = 2 * max(1, math.ceil((b - a) / (2 * _STEP))) + 1
    z = np.linspace(a, b, n)
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4, 2
    return z, w * (b - a) / (3 * (n - 1))


def _first(t1: float, drift: float, lower: float, upper: float) -> _Grid:
    mean = drift * math.sqrt(t1)
    a, b = max(lower, mean - _FAR), min(upper, mean + _FAR)
    z, w = _simpson(a, b) if b > a else (np.zeros(0), np.zeros(0))
    return _Grid(z, w * sps.norm.pdf(z - mean))


def _moments(g: _Grid, t0: float, t1: float, drift: float) -> tuple[np.ndarray, float]:
    dt = t1 - t0
    return (g.z * math.sqrt(t0) + drift * dt) / math.sqrt(t1), math.sqrt(dt / t1)


def _exit_up(g: _Grid, t0: float, t1: float, drift: float, bound: float) -> float:
    m, s = _moments(g, t0, t1, drift)
    return float(np.sum(g.mass * sps.norm.sf((bound - m) / s)))


def _exit_down(g: _Grid, t0: float, t1: float, drift: float, bound: float) -> float:
    m, s = _moments(g, t0, t1, drift)
    return float(np.sum(g.mass * sps.norm.cdf((bound - m) / s)))


def _next(g: _Grid, t0: float, t1: float, drift: float, lower: float, upper: float) -> _Grid:
    m, s = _moments(g, t0, t1, drift)
    mean = drift * math.sqrt(t1)
    a, b = max(lower, mean - _FAR), min(upper, mean + _FAR)
    if b <= a or len(g.z) == 0:
        return _Grid(np.zeros(0), np.zeros(0))
    z, w = _simpson(a, b)
    density = sps.norm.pdf((z[:, None] - m[None, :]) / s) / s @ g.mass
    return _Grid(z, w * density)


class Crossing(NamedTuple):
    upper: np.ndarray  # P(first exit is above the upper bound at look k)
    lower: np.ndarray  # P(first exit is below the lower bound at look k)


def crossing_probabilities(
    info: Sequence[float],
    upper: Sequence[float],
    lower: Sequence[float] | None = None,
    drift: float = 0.0,
) -> Crossing:
    """Exit probabilities of Z_1..Z_K (Z_k = S_k / sqrt t_k, S a Brownian motion with drift
    `drift` per unit of information, t = info normalised to end at 1) through the bounds."""
    t = np.asarray(info, dtype=float) / info[-1]
    lo = [-math.inf] * len(t) if lower is None else list(lower)
    up_p, lo_p = np.zeros(len(t)), np.zeros(len(t))
    mean = drift * math.sqrt(t[0])
    up_p[0], lo_p[0] = sps.norm.sf(upper[0] - mean), sps.norm.cdf(lo[0] - mean)
    g = _first(t[0], drift, lo[0], upper[0])
    for k in range(1, len(t)):
        up_p[k] = _exit_up(g, t[k - 1], t[k], drift, upper[k])
        lo_p[k] = _exit_down(g, t[k - 1], t[k], drift, lo[k])
        g = _next(g, t[k - 1], t[k], drift, lo[k], upper[k])
    return Crossing(up_p, lo_p)


def spending_bounds(info: Sequence[float], level: float, kind: Spending = "obf") -> np.ndarray:
    """One-sided upper bounds b_1..b_K (Z scale, drift 0) spending `level` by `kind`:
    P(Z_1 < b_1, ..., Z_{k-1} < b_{k-1}, Z_k >= b_k) = f(t_k) - f(t_{k-1})."""
    t = np.asarray(info, dtype=float) / info[-1]
    cumulative = spend(kind, level, t)
    bounds = np.zeros(len(t))
    bounds[0] = sps.norm.isf(cumulative[0]) if cumulative[0] > 0 else _NO_BOUND
    bounds[0] = min(bounds[0], _NO_BOUND)
    g = _first(t[0], 0.0, -math.inf, bounds[0])
    for k in range(1, len(t)):
        target = cumulative[k] - cumulative[k - 1]
        t0, t1 = t[k - 1], t[k]
        if target <= 1e-15:
            bounds[k] = _NO_BOUND
        else:
            f = lambda b, g=g, t0=t0, t1=t1, target=target: _exit_up(g, t0, t1, 0.0, b) - target  # noqa: E731
            bounds[k] = optimize.brentq(f, -10.0, _NO_BOUND, xtol=1e-7)
        g = _next(g, t0, t1, 0.0, -math.inf, bounds[k])
    return bounds


def classic_constant(shape: Literal["pocock", "obf"], looks: int, alpha: float) -> float:
    """The constant c of a classic two-sided design with equally spaced looks, P(some |Z_k|
    >= c * w_k) = alpha: Pocock (w_k = 1, 1977) or O'Brien & Fleming (w_k = sqrt(K / k), 1979)."""
    k = np.arange(1, looks + 1, dtype=float)
    w = np.ones(looks) if shape == "pocock" else np.sqrt(looks / k)

    def excess(c: float) -> float:
        crossing = crossing_probabilities(k, c * w, -c * w)
        return float(crossing.upper.sum() + crossing.lower.sum()) - alpha

    return float(optimize.brentq(excess, 1.0, 6.0, xtol=1e-7))


class Design(NamedTuple):
    """A sequential plan for one arm: boots per side at each look and nominal one-sided
    levels (the t-scale bounds are t quantiles at these levels, with each look's df)."""

    looks: tuple[int, ...]  # boots per side at each look
    alpha: float  # one-sided, per arm, over all counted levels
    beta: float  # 1 - power at a gain of min_effect
    min_effect: float  # δ as a fraction (0.03 = 3 %)
    levels: int  # counted levels (Bonferroni divides alpha)
    efficacy_p: tuple[float, ...]  # nominal one-sided level at each look, per level
    futility_p: tuple[float, ...]


def make_design(
    boots_min: int,
    boots_max: int,
    stage: int,
    alpha: float,
    power: float,
    min_effect_pct: float,
    levels: int = 1,
    alpha_spending: Spending = "obf",
    beta_spending: Spending = "obf",
) -> Design:
    if boots_min < 1 or boots_max < boots_min or stage < 1:
        raise ValueError("need 1 <= boots_min <= boots_max and stage >= 1")
    looks = list(range(boots_min, boots_max, stage)) + [boots_max]
    info = [float(n) for n in looks]
    eff = spending_bounds(info, alpha / levels, alpha_spending)
    fut = spending_bounds(info, 1 - power, beta_spending)
    return Design(
        looks=tuple(looks),
        alpha=alpha,
        beta=1 - power,
        min_effect=min_effect_pct / 100,
        levels=levels,
        efficacy_p=tuple(float(p) for p in sps.norm.sf(eff)),
        futility_p=tuple(float(p) for p in sps.norm.sf(fut)),
    )


class LevelStats(NamedTuple):
    """Arrays over whatever leading shape the inputs had (one entry per simulated arm, or a
    scalar for one real arm). Gains are on the log scale, oriented so that positive is
    better; `low` / `high` are the repeated-confidence bounds at this look."""

    gain: np.ndarray
    se: np.ndarray
    df: np.ndarray
    low: np.ndarray  # gain - t(efficacy level, df) se: > 0 adopts at this level
    high: np.ndarray  # gain + t(futility level, df) se: < log(1 + δ) is futile here
    harm: np.ndarray  # gain + t(efficacy level, df) se: < 0 is significantly worse


def _side(own: stats.Scatter, pool: stats.Scatter):
    """The variance (and df) one side is judged by at each level, as the grid's verdicts
    judge a cell (servesweep.stats): the pool's where the side's scatter over the counted
    levels agrees with the rest's, else its scatter ratio times the rest's variance."""
    rest = pool - own
    agrees = np.asarray(stats.scatter_agrees(own, rest))[..., None]
    ratio = stats.scatter_ratio(own, rest)
    d1 = np.asarray(ratio.df, dtype=float)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled_df = np.where(
            (d1 > 0) & (rest.df > 0),
            1 / (1 / np.maximum(d1, 1e-12) + 1 / np.maximum(rest.df, 1e-12)),
            0.0,
        )
        scaled = np.asarray(ratio.ratio)[..., None] * rest.variance
    return np.where(agrees, pool.variance, scaled), np.where(agrees, pool.df, scaled_df), agrees


def _full(s: stats.Scatter, shape) -> stats.Scatter:
    return stats.Scatter(np.broadcast_to(s.ss, shape), np.broadcast_to(s.df, shape))


def look_stats(
    design: Design,
    look: int,
    reference: np.ndarray,
    arm: np.ndarray,
    higher_is_better: bool,
    others: Sequence[np.ndarray] | None = None,
) -> list[LevelStats]:
    """Every counted level's stats at one look: arrays shaped (..., levels, boots), both
    sides with at least `design.looks[look]` boots, on logs.

    `others` None: Welch (each side's own variance). Otherwise the boot variance of each
    level is pooled over the reference, the arm and `others` (every other sample measured
    in the hunt so far, each shaped (..., levels, its boots), about its own mean), with df
    = sum(n_i - 1), so a look at 1 or 2 boots a side can decide once the hunt has seen
    enough boots; a side whose scatter over the levels is larger than the rest's (the
    grid's guard, servesweep.stats.scatter_agrees) is judged by its scaled own scatter.
    """
    n = design.looks[look]
    a = np.log(np.asarray(arm, dtype=float)[..., :n])
    b = np.log(np.asarray(reference, dtype=float)[..., :n])
    gain = (a.mean(axis=-1) - b.mean(axis=-1)) * (1 if higher_is_better else -1)
    full = np.shape(gain)
    own_a = _full(stats.scatter([a], logs=True), full)
    own_b = _full(stats.scatter([b], logs=True), full)
    if others is None:
        var_a, df_a, var_b, df_b = own_a.variance, own_a.df, own_b.variance, own_b.df
        shared = np.zeros(full, dtype=bool)
    else:
        rest = _full(stats.scatter([np.asarray(o, dtype=float) for o in others]), full)
        pool = own_a + own_b + rest
        var_a, df_a, agree_a = _side(own_a, pool)
        var_b, df_b, agree_b = _side(own_b, pool)
        shared = agree_a & agree_b
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se, df = stats.combine(var_a, df_a, n, var_b, df_b, n, shared)
        df = np.where(se == 0, np.inf, df)
        t_eff = sps.t.isf(design.efficacy_p[look], df)
        t_fut = sps.t.isf(design.futility_p[look], df)
    parts = [np.moveaxis(np.broadcast_to(x, full), -1, 0) for x in (gain, se, df, t_eff, t_fut)]
    return [
        LevelStats(g, e, f, g - te * e, g + tf * e, g + te * e)
        for g, e, f, te, tf in zip(*parts, strict=True)
    ]


ADOPT, REJECT, CONTINUE, UNDECIDED = 0, 1, 2, 3
VERDICTS: tuple[Verdict, ...] = ("adopt", "reject", "continue", "undecided")


def decide_codes(design: Design, look: int, per_level: Sequence[LevelStats]) -> np.ndarray:
    """The decision at a look from every counted level's stats (codes ADOPT..UNDECIDED):
    adopt when some level's lower bound is above 0 and no level is significantly worse;
    reject when, better nowhere, some level is significantly worse or every level is
    futile; better at one level and worse at another is a trade-off that goes on to the
    next look (a chance dip at an unchanged level clears with more boots) and is rejected
    at the last; otherwise continue, or undecided at the last look."""
    futile_at = math.log1p(design.min_effect)
    better = np.any([s.low > 0 for s in per_level], axis=0)
    worse = np.any([s.harm < 0 for s in per_level], axis=0)
    futile = np.all([s.high < futile_at for s in per_level], axis=0)
    last = look == len(design.looks) - 1
    out = np.full(np.shape(better), UNDECIDED if last else CONTINUE)
    out = np.where((worse | futile) & ~better, REJECT, out)
    out = np.where(better & worse & last, REJECT, out)  # a trade-off, once the boots are spent
    return np.where(better & ~worse, ADOPT, out)


class Look(NamedTuple):
    """One arm at one look, in percent (relative difference, positive = better)."""

    verdict: Verdict
    reason: str
    boots: int  # per side
    level: object  # the level the reported interval is from (best lower bound)
    gain_pct: float
    low_pct: float  # repeated-confidence bounds: what the decision used
    high_pct: float
    rank_pct: float  # best level's plain one-sided (1 - alpha/L) t lower bound: comparable
    # across arms stopped at different looks (the repeated bound is wider at early looks)


def _pct(x: float) -> float:
    return 100 * math.expm1(x)


def decide(
    design: Design,
    look: int,
    reference: Sequence[Sequence[float]],
    arm: Sequence[Sequence[float]],
    levels: Sequence[object],
    higher_is_better: bool,
    others: Sequence[Sequence[Sequence[float]]] | None = None,
) -> Look:
    """One real arm: reference[i][j] / arm[i][j] is level i's value at boot j (at least
    design.looks[look] boots each); `others`: the other samples to pool the boot variance
    with, each levels x its boots (None: Welch)."""
    n = design.looks[look]
    ref = np.asarray([r[:n] for r in reference], dtype=float)
    mine = np.asarray([a[:n] for a in arm], dtype=float)
    pool = None if others is None else [np.asarray(o, dtype=float) for o in others]
    per = look_stats(design, look, ref, mine, higher_is_better, pool)
    code = int(decide_codes(design, look, per))
    best = max(range(len(per)), key=lambda i: (float(per[i].low), float(per[i].gain), -i))
    s = per[best]
    t_rank = sps.t.isf(design.alpha / design.levels, np.asarray([float(x.df) for x in per]))
    rank = max(float(x.gain) - float(t) * float(x.se) for x, t in zip(per, t_rank, strict=True))
    verdict = VERDICTS[code]
    worse = [lv for lv, x in zip(levels, per, strict=True) if x.harm < 0]
    reason = {
        "adopt": f"better at level {levels[best]}, worse at none",
        "reject": f"worse at level {worse[0]}"
        if worse
        else f"futile: gain below {100 * design.min_effect:g} % at every level",
        "continue": "interval still open",
        "undecided": f"undecided at {design.looks[-1]} boots",
    }[verdict]
    return Look(
        verdict,
        reason,
        design.looks[look],
        levels[best],
        _pct(float(s.gain)),
        _pct(float(s.low)),
        _pct(float(s.high)),
        _pct(rank),
    )


class FirstDecision(NamedTuple):
    code: np.ndarray  # ADOPT / REJECT / UNDECIDED per simulated arm
    boots: np.ndarray  # boots per side when it stopped


def first_decisions(
    design: Design,
    reference: np.ndarray,
    arm: np.ndarray,
    higher_is_better: bool = True,
    on_look: Callable[[int, np.ndarray], None] | None = None,
    others: np.ndarray | None = None,
) -> FirstDecision:
    """Many arms at once (vectorised, for simulation): arrays shaped (arms, levels, boots)
    with boots >= design.looks[-1]; each arm stops at its first decisive look. `others`
    (arms, m, levels, boots): m more samples measured beside each arm, boot for boot, whose
    scatter is pooled with the arm's and the reference's (None: Welch)."""
    shape = reference.shape[0]
    code = np.full(shape, CONTINUE)
    boots = np.zeros(shape, dtype=int)
    for k, n in enumerate(design.looks):
        rest = None if others is None else [others[:, j, :, :n] for j in range(others.shape[1])]
        per = look_stats(design, k, reference, arm, higher_is_better, rest)
        now = decide_codes(design, k, per)
        fresh = (code == CONTINUE) & (now != CONTINUE)
        code = np.where(fresh, now, code)
        boots = np.where(fresh, n, boots)
        if on_look:
            on_look(k, code)
    return FirstDecision(code, boots)
