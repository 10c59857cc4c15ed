"""A hunt against known truth, no servers: each candidate multiplies the objective by a true
factor per level, sets of candidates can interact (an extra factor when all are present),
some crash, some change answers; every boot draws lognormal noise of a given CV, and the
machine can drift between rounds; a variant's first boot can be slower, a candidate's boots
noisier. `run` feeds `replay` (the production decision code) in a
loop until the hunt is done.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from servesweep.hunt import spec as hs
from servesweep.hunt.state import BootKey, BootResult, HuntState, replay


@dataclass(frozen=True)
class Truth:
    base: Mapping[Any, float]  # the start variant's true objective per level
    effects: Mapping[str, float | Mapping[Any, float]] = field(default_factory=dict)
    interactions: Mapping[frozenset[str], float] = field(default_factory=dict)
    crashers: frozenset[str] = frozenset()
    answer_changers: frozenset[str] = frozenset()

    def factor(self, members: Iterable[str], level: Any) -> float:
        """True multiplier of a composed variant over the start at a level."""
        have = set(members)
        f = 1.0
        for name in have:
            e = self.effects.get(name, 1.0)
            f *= e.get(level, 1.0) if isinstance(e, Mapping) else e
        for group, extra in self.interactions.items():
            if group <= have:
                f *= extra
        return f

    def value(self, members: Iterable[str], level: Any) -> float:
        return self.base[level] * self.factor(members, level)


@dataclass(frozen=True)
class Noise:
    cv: float = 0.02  # boot-to-boot CV (lognormal)
    drift_cv: float = 0.0  # a random-walk step of the machine's speed at each round
    higher_is_better: bool = True  # (drift is a speed: a latency moves the other way)
    first_boot: Mapping[Any, float] = field(default_factory=dict)  # a variant's r0 at a
    # level is this factor of its value (0.7: 30 % slower): kernels compiled on first use
    noisy: frozenset[str] = frozenset()  # candidates whose variants scatter `noisy_factor`
    noisy_factor: float = 3.0  # times as much as the others


class SimResult(NamedTuple):
    state: HuntState
    observations: dict[BootKey, BootResult]
    batches: list[tuple[BootKey, ...]]  # what each replay asked for, in order


def measure(
    truth: Truth,
    noise: Noise,
    members: Iterable[str],
    levels,
    rng,
    speed: float = 1.0,
    boot: int | None = None,
) -> BootResult:
    """One boot of the variant of `members` (`boot` 0: its first, `noise.first_boot`)."""
    members = tuple(members)
    if set(members) & truth.crashers:
        return BootResult(None, "server exited during startup")
    cv = noise.cv * (noise.noisy_factor if set(members) & noise.noisy else 1.0)
    sigma = math.sqrt(math.log1p(cv**2))
    drift = speed if noise.higher_is_better else 1 / speed
    first = noise.first_boot if boot == 0 else {}
    values = {
        lv: truth.value(members, lv)
        * drift
        * first.get(lv, 1.0) ** (1 if noise.higher_is_better else -1)
        * float(np.exp(rng.normal(-(sigma**2) / 2, sigma)))
        for lv in levels
    }
    return BootResult(values, None, bool(set(members) & truth.answer_changers))


def run(
    spec: hs.HuntSpec, truth: Truth, noise: Noise, seed: int, max_calls: int = 10_000
) -> SimResult:
    rng = np.random.default_rng(seed)
    obs: dict[BootKey, BootResult] = {}
    batches: list[tuple[BootKey, ...]] = []
    speeds = [1.0]
    step = math.sqrt(math.log1p(noise.drift_cv**2))
    for _ in range(max_calls):
        state = replay(spec, obs)
        if state.done:
            return SimResult(state, obs, batches)
        batches.append(state.needed)
        while len(speeds) < len(state.rounds):
            speeds.append(speeds[-1] * float(np.exp(rng.normal(0, step))) if step else 1.0)
        for key in state.needed:
            if key in obs:
                raise AssertionError(f"boot {key} requested twice")
            members = state.members[key.variant]
            speed = speeds[len(state.rounds) - 1]
            obs[key] = measure(truth, noise, members, spec.objective.levels, rng, speed, key.boot)
    raise AssertionError("the hunt did not finish")
