"""The hunt within a budget: a round's design cut short at the look the budget pays for
last (`truncate`: that look spends the error left, so at most α false adopts a round still
holds), and the boots a round is expected to take (`expected_boots`, for the plan). The
boots a first look takes and the fewest a hunt can start with are arithmetic on the spec
(`servesweep.hunt.spec.round_boots`, `minimum_budget`); `servesweep.hunt.rounds` grants the
boots look by look.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import optimize
from scipy import stats as sps

from servesweep.hunt.sequential import Design, Spending, crossing_probabilities, spend

NO_BOUND = 40.0  # a bound nothing crosses (no error left to spend)


def last_bound(upper: Sequence[float], info: Sequence[float], level: float, spent: float) -> float:
    """The bound of the look at info[-1] made the last one (Z scale, drift 0), the bounds
    `upper` of the looks before it kept: it spends all that is left of `level`, P(Z_1 <
    b_1, ..., Z_k >= b) = level - spent (Lan & DeMets' flexible spending: a trial stopped
    at less information than planned still spends `level` in all)."""
    target = level - spent
    if target <= 1e-15:
        return NO_BOUND

    def excess(b: float) -> float:
        return float(crossing_probabilities(info, [*upper, b]).upper[-1]) - target

    return float(optimize.brentq(excess, -10.0, NO_BOUND, xtol=1e-7))


@lru_cache(maxsize=1024)
def _last_p(looks: tuple[int, ...], nominal: tuple[float, ...], level: float, kind) -> float:
    """The nominal level of look len(nominal) - 1 of `looks` made the last one."""
    k = len(nominal) - 1
    t = np.asarray(looks, dtype=float) / looks[-1]
    upper = sps.norm.isf(np.asarray(nominal[:k]))
    spent = float(spend(kind, level, t[k - 1])) if k else 0.0
    return float(sps.norm.sf(last_bound(upper, [float(n) for n in looks[: k + 1]], level, spent)))


def truncate(design: Design, look: int, spending: tuple[Spending, Spending]) -> Design:
    """`design` ending at `look` (the budget pays for no later one): the looks before keep
    their bounds and the new last look spends each test's remaining error (`spending`: the
    spec's alpha and beta spending functions), so at most α false adopts a round still
    holds. An arm open at that look that is neither adopted nor rejected is undecided (not
    rejected: its boots were cut short, not spent)."""
    if look >= len(design.looks) - 1:
        return design
    a, b = spending

    def p(nominal: tuple[float, ...], level: float, kind: Spending) -> tuple[float, ...]:
        last = _last_p(design.looks, tuple(nominal[: look + 1]), level, kind)
        return (*nominal[:look], last)

    return design._replace(
        looks=design.looks[: look + 1],
        efficacy_p=p(design.efficacy_p, design.alpha, a),
        futility_p=p(design.futility_p, design.beta, b),
        noninferiority_p=p(design.noninferiority_p, design.family_alpha, a)
        if design.noninferiority_p
        else (),
        planned=design.looks[-1],
    )


class Expected(NamedTuple):
    """A round's expected boots on the normal scale (no first boots, no retries)."""

    arm: float  # boots a side one arm takes before its bounds decide it
    reference: float  # boots of the reference: it runs while any arm is open
    total: float  # the reference's and every arm's


def expected_boots(design: Design, variance: float, arms: int, gain_pct: float = 0.0) -> Expected:
    """The expected boots of a round of `arms` arms on `design` at this boot variance of the
    logs, every arm gaining `gain_pct` at one counted level: each arm stops when its
    efficacy or futility bound is crossed (one level, the normal scale, the arms taken as
    independent for the reference's share: it runs while any of them is open); a null arm
    stops when it is futile at every level. A guide for the plan: the pooled t quantiles
    widen early looks (measured against the replay in tests/unit/hunt/test_hunt_budget.py)."""
    looks = np.asarray(design.looks, dtype=float)
    if not variance > 0:
        return Expected(looks[0], looks[0], looks[0] * (1 + arms))
    t = looks / looks[-1]
    se = math.sqrt(2 * variance / looks[-1])
    delta = math.log1p(design.min_effect) / se
    gain = math.log1p(gain_pct / 100) / se
    b = sps.norm.isf(np.asarray(design.efficacy_p))
    f = sps.norm.isf(np.asarray(design.futility_p))
    lower = np.minimum(delta * np.sqrt(t) - f, b)
    c = crossing_probabilities(looks, b, lower, gain)
    # decided by look k: better at its level, or futile at every level (the other levels,
    # unchanged, taken as independent and as slow to turn futile as a null)
    null = crossing_probabilities(looks, b, lower, 0.0) if gain else c
    futile = np.cumsum(c.lower) * np.cumsum(null.lower) ** (design.levels - 1)
    done = np.minimum(np.cumsum(c.upper) + futile, 1.0)
    done[-1] = 1.0  # the last look decides every arm
    stop = np.diff(np.concatenate([[0.0], done]))
    open_before = 1 - np.concatenate([[0.0], done[:-1]])
    arm = float(np.sum(looks * stop))
    steps = np.diff(np.concatenate([[0.0], looks]))
    reference = float(np.sum(steps * (1 - (1 - open_before) ** max(arms, 1))))
    return Expected(arm, reference, reference + arms * arm)
