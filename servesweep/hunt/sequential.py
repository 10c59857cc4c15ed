"""Group-sequential boundaries and the per-look decision of one arm (a candidate against its
reference) from per-boot values.

The statistic: per counted level, a t statistic on the logs of the per-boot values (the
estimate is a ratio, exp(d) - 1; a latency flips the sign), the boot scatter pooled over
every sample of that level the hunt has measured (each about its own mean, df = sum(n_i -
1)), an arm or reference whose scatter the grid's guard flags judged by its scaled own
scatter (servesweep.stats); `pool_variance: false` uses Welch throughout.

Three one-sided tests on the same looks (n_1 < ... < n_K boots a side, t_k = n_k / n_K),
each spent by a Lan-DeMets function: efficacy (H0: gain 0; the round's α divided over its
arms and levels), non-inferiority (H0: gain -margin; α at each level: adopting needs every
level to pass) and futility (H0: gain δ; (1 - power) / levels, non-binding: the efficacy
bounds ignore it). The last look decides every arm. Bounds are computed on the normal
scale by numerical integration of (Z_1, ..., Z_K) (Jennison & Turnbull 2000, ch. 19) and
carried to the t scale by their nominal levels (J&T §11.4); `servesweep.hunt.power` sizes
n_K from the scatter.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import lru_cache
from typing import Literal, NamedTuple, cast

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from servesweep import stats

Spending = Literal["obf", "pocock"]
Pooled = Sequence[np.ndarray] | stats.Scatter | None  # look_stats's `others`
_FAR = 12.0  # densities are cut at 12 sd from their mean
_STEP = 0.05  # grid step (Simpson's rule): bounds within 1e-4 of 0.02's, 20x faster
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
    info: stats.Values,
    upper: stats.Values,
    lower: stats.Values | None = None,
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
    levels (the t-scale bounds are t quantiles at these levels, with each look's df).

    `alpha` and `beta` are per test: one arm at one counted level. The round's α is
    divided over its arms and levels (Bonferroni: at most α false adopts a round), the
    missed-gain rate 1 - power over the levels for the futility bounds. Non-inferiority
    at each level (lower bound above -margin) spends the round's α undivided: an arm is
    adopted only when every level passes (an intersection-union test, Berger 1982), so an
    arm worse than the margin somewhere is adopted at most α of the time."""

    looks: tuple[int, ...]  # boots per side at each look
    alpha: float  # one-sided, per arm and level: the round's alpha / (arms × levels)
    beta: float  # per test: (1 - power) / levels
    min_effect: float  # δ as a fraction (0.03 = 3 %)
    levels: int  # counted levels
    efficacy_p: tuple[float, ...]  # nominal one-sided level at each look, per test
    futility_p: tuple[float, ...]
    margin: float = 0.0  # non-inferiority margin at every level, a fraction (0: δ)
    noninferiority_p: tuple[float, ...] = ()  # at each look: one-sided alpha spent per level
    arms: int = 1  # the arms alpha is divided over
    capped: bool = False  # the last look is the cap, short of what the power needs
    planned: int = 0  # cut short by the budget (budget.truncate): the last look planned

    @property
    def family_alpha(self) -> float:
        return self.alpha * self.arms * self.levels

    @property
    def power(self) -> float:
        return 1 - self.beta * self.levels


@lru_cache(maxsize=1024)
def _bounds(info: tuple[float, ...], level: float, kind: Spending) -> np.ndarray:
    return spending_bounds(info, level, kind)


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
    arms: int = 1,
    margin_pct: float | None = None,
    capped: bool = False,
) -> Design:
    """`alpha`: one-sided, for the whole round (divided over `arms` × `levels`); `power`:
    at a gain of δ at one level, the others unchanged (1 - power divided over the levels)."""
    if boots_min < 1 or boots_max < boots_min or stage < 1 or arms < 1:
        raise ValueError("need 1 <= boots_min <= boots_max, stage >= 1 and arms >= 1")
    looks = list(range(boots_min, boots_max, stage)) + [boots_max]
    info = [float(n) for n in looks]
    each_alpha, each_beta = alpha / (arms * levels), (1 - power) / levels
    eff = _bounds(tuple(info), each_alpha, alpha_spending)
    fut = _bounds(tuple(info), each_beta, beta_spending)
    ni = _bounds(tuple(info), alpha, alpha_spending)
    return Design(
        looks=tuple(looks),
        alpha=each_alpha,
        beta=each_beta,
        min_effect=min_effect_pct / 100,
        levels=levels,
        efficacy_p=tuple(float(p) for p in sps.norm.sf(eff)),
        futility_p=tuple(float(p) for p in sps.norm.sf(fut)),
        margin=(min_effect_pct if margin_pct is None else margin_pct) / 100,
        noninferiority_p=tuple(float(p) for p in sps.norm.sf(ni)),
        arms=arms,
        capped=capped,
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
    floor: np.ndarray  # gain - t(non-inferiority level, df) se: > log(1 - margin) passes


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


def t_upper(p, df):
    """The upper p-quantile of Student's t (t.isf), fast for scalars: scipy.special."""
    return special.stdtrit(df, 1 - np.asarray(p, dtype=float))


def look_stats(
    design: Design,
    look: int,
    reference: np.ndarray,
    arm: np.ndarray,
    higher_is_better: bool,
    others: Pooled = None,
) -> list[LevelStats]:
    """Every counted level's stats at one look: arrays shaped (..., levels, boots), both
    sides with at least `design.looks[look]` boots, on logs.

    `others` None: Welch (each side's own variance). Otherwise the boot variance of each
    level is pooled over the reference, the arm and `others` (every other sample measured
    in the hunt so far, each shaped (..., levels, its boots), about its own mean; or their
    scatter, summed), with df = sum(n_i - 1), so a look at 1 or 2 boots a side can decide
    once the hunt has seen enough boots; a side whose scatter over the levels is larger
    than the rest's (the grid's guard, servesweep.stats.scatter_agrees) is judged by its
    scaled own scatter.
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
        if isinstance(others, stats.Scatter):
            rest = _full(others, full)
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
        t_eff = t_upper(design.efficacy_p[look], df)
        t_fut = t_upper(design.futility_p[look], df)
        t_ni = t_upper((design.noninferiority_p or design.efficacy_p)[look], df)
    x = (gain, se, df, t_eff, t_fut, t_ni)
    parts = [np.moveaxis(np.broadcast_to(v, full), -1, 0) for v in x]
    return [
        LevelStats(g, e, f, g - te * e, g + tf * e, g + te * e, g - tn * e)
        for g, e, f, te, tf, tn in zip(*parts, strict=True)
    ]


ADOPT, REJECT, CONTINUE, UNDECIDED = 0, 1, 2, 3


class Decision(StrEnum):
    """One arm's decision at a look (the codes above, as words)."""

    ADOPT = "adopt"
    REJECT = "reject"
    CONTINUE = "continue"
    UNDECIDED = "undecided"


VERDICTS: tuple[Decision, ...] = tuple(Decision)


class Signs(NamedTuple):
    """What each counted level says at a look (arrays of booleans over simulated arms)."""

    better: np.ndarray  # some level's lower bound above 0
    within: np.ndarray  # every level's lower bound above -margin (non-inferior)
    worse: np.ndarray  # some level's upper bound below 0
    beyond: np.ndarray  # some level's upper bound below -margin (worse than the margin)
    futile: np.ndarray  # every level's futility bound below δ


def signs(design: Design, per_level: Sequence[LevelStats]) -> Signs:
    margin = log_margin(design)
    futile_at = math.log1p(design.min_effect)
    return Signs(
        np.any([s.low > 0 for s in per_level], axis=0),
        np.all([s.floor > margin for s in per_level], axis=0),
        np.any([s.harm < 0 for s in per_level], axis=0),
        np.any([s.harm < margin for s in per_level], axis=0),
        np.all([s.high < futile_at for s in per_level], axis=0),
    )


def decide_codes(design: Design, look: int, per_level: Sequence[LevelStats]) -> np.ndarray:
    """The decision at a look from every counted level's stats (codes ADOPT..UNDECIDED).

    Adopt: better at some level (lower bound above 0) and non-inferior at every level
    (lower bound above -margin). Reject: better nowhere and worse somewhere or futile at
    every level; or worse than the margin at some level (a trade-off that cannot pass).
    Better at one level but not yet shown within the margin at another goes on (a chance
    dip at an unchanged level clears with more boots). At the last look every arm that is
    not adopted is rejected, unless the design is capped short of its power or cut short
    by the budget (`planned`): then one that is neither futile nor worse is undecided."""
    s = signs(design, per_level)
    last = look == len(design.looks) - 1
    end = UNDECIDED if design.capped or design.planned else REJECT
    out = np.full(np.shape(s.better), end if last else CONTINUE)
    out = np.where(((s.worse | s.futile) & ~s.better) | s.beyond, REJECT, out)
    cut = UNDECIDED if design.planned else REJECT  # not within, boots spent (or cut short)
    out = np.where(s.better & ~s.within & ~s.beyond & last, cut, out)
    return np.where(s.better & s.within, ADOPT, out)


class Look(NamedTuple):
    """One arm at one look, in percent (relative difference, positive = better)."""

    verdict: Decision
    reason: str
    boots: int  # per side
    level: object  # the level the reported interval is from (best lower bound)
    gain_pct: float
    low_pct: float  # repeated-confidence bounds: what the decision used
    high_pct: float
    rank_pct: float  # best level's plain one-sided (1 - design.alpha) t lower bound:
    # comparable across arms stopped at different looks (the repeated bound is wider early)


def _pct(x: float) -> float:
    return 100 * math.expm1(x)


def log_margin(design: Design) -> float:
    """log(1 - margin): the non-inferiority bound on the log scale (-inf at 100 %)."""
    return math.log1p(-design.margin) if design.margin < 1 else -math.inf


def _reason(design: Design, look: int, per, levels, best: int, code: int) -> str:
    s = signs(design, per)
    m, d = f"{100 * design.margin:.3g} %", f"{100 * design.min_effect:.3g} %"
    worse = [lv for lv, x in zip(levels, per, strict=True) if x.harm < 0]
    margin = log_margin(design)
    beyond = [lv for lv, x in zip(levels, per, strict=True) if x.harm < margin]
    short = [lv for lv, x in zip(levels, per, strict=True) if not x.floor > margin]
    n = design.looks[look]
    if code == ADOPT:
        return f"better at level {levels[best]}, within {m} at every level"
    if code == CONTINUE:
        return "interval still open"
    if code == UNDECIDED:
        return f"undecided at {n} boots a side (the cap: the stated power needs more)"
    if beyond:
        return f"worse than the margin ({m}) at level {beyond[0]}"
    if worse and not bool(s.better):
        return f"worse at level {worse[0]}"
    if bool(s.futile):
        return f"futile: gain below {d} at every level"
    if bool(s.better):
        return f"better at level {levels[best]} but not shown within {m} at level {short[0]}"
    return f"not better at any level in {n} boots a side"


def decide(
    design: Design,
    look: int,
    reference: stats.Rows,
    arm: stats.Rows,
    levels: Sequence[object],
    higher_is_better: bool,
    others: Sequence[stats.Rows] | stats.Scatter | None = None,
) -> Look:
    """One real arm: reference[i][j] / arm[i][j] is level i's value at boot j (at least
    design.looks[look] boots each); `others`: the other samples to pool the boot variance
    with, each levels x its boots, or their summed scatter (None: Welch)."""
    n = design.looks[look]
    ref = np.asarray([r[:n] for r in reference], dtype=float)
    mine = np.asarray([a[:n] for a in arm], dtype=float)
    if others is not None and not isinstance(others, stats.Scatter):
        others = [np.asarray(o, dtype=float) for o in others]  # arrays from here on
    per = look_stats(design, look, ref, mine, higher_is_better, cast(Pooled, others))
    code = int(decide_codes(design, look, per))
    best = max(range(len(per)), key=lambda i: (float(per[i].low), float(per[i].gain), -i))
    s = per[best]
    t_rank = t_upper(design.alpha, np.asarray([float(x.df) for x in per]))
    rank = max(float(x.gain) - float(t) * float(x.se) for x, t in zip(per, t_rank, strict=True))
    return Look(
        VERDICTS[code],
        _reason(design, look, per, levels, best, code),
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
