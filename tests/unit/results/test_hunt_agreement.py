"""A hunt's adopted arm and the verdict table agree when they judge the same boots: one
statistical core (servesweep.stats) under both. One round, every arm decided at one look
(boots.min = boots.max), no checks, first boots counted by both, so the hunt's pool is every
boot of the sweep, as the table's is; the hunt's one-sided alpha is the table's two-sided
5 % (the default). The hunt divides it over the round's arms (at most alpha false adopts a
round), so an adopted arm is one the table calls faster; with one arm the two tests are the
same, and an arm the table calls faster is adopted unless a level misses the hunt's
non-inferiority margin."""

import numpy as np
import pandas as pd
import pytest

from servesweep.hunt import spec as hs
from servesweep.hunt.state import BootResult, replay
from servesweep.results.judge.board import Judging
from servesweep.results.judge.verdicts import FASTER, compare

LEVELS = (16, 64)


def hunt_spec(boots: int, names=("big", "small", "null", "worse")):
    return hs.from_dict(
        {
            "start": {"name": "baseline", "stack": "s", "flags": {}},
            "candidates": {n: {"flags": {n: True}} for n in names},
            "objective": {"metric": "output_throughput", "levels": list(LEVELS)},
            "boots_min": boots,
            "boots_max": boots,
            "confirm": False,
            "ablate": False,
            "design": "sequential",  # round 1 of its rounds
            "first_boot": "keep",  # as the table (first_boot keep below)
            "budget_boots": boots * (1 + len(names)) + 2,  # round 1 only (+ 2 retries)
        }
    )


TRUTH = {"baseline": 1.0, "big": 1.25, "small": 1.06, "null": 1.0, "worse": 0.9}


def measured(spec, seed: int, cv: float):
    rng = np.random.default_rng(seed)
    observations = {}
    state = replay(spec, observations)
    while not state.done:
        for key in state.needed:
            name = key.variant.split("+")[-1]
            values = {lv: 100 * TRUTH[name] * float(np.exp(rng.normal(0, cv))) for lv in LEVELS}
            observations[tuple(key)] = BootResult(values)
        state = replay(spec, observations)
    return state, observations


def table(observations):
    rows = [
        {
            "stack": "s",
            "model": "m",
            "variant": variant,
            "repeat": boot,
            "level": lv,
            "in_boot": 0,
            "status": "ok",
            "valid": True,
            "invalid_reasons": None,
            "output_throughput": v,
        }  # fmt: skip
        for (variant, boot), r in observations.items()
        for lv, v in r.values.items()
    ]
    df = pd.DataFrame(rows)
    variants = list(dict.fromkeys(df["variant"]))
    judging = Judging(objective="output_throughput", counted_levels=LEVELS, first_boot="keep")
    return compare(df, judging, ["s"], variants, None)


def agreement(spec, seeds: int, both_ways: bool) -> dict:
    seen = {"adopt": 0, "other": 0}
    for seed in range(seeds):
        state, observations = measured(spec, seed, cv=0.04)
        (round_,) = state.rounds
        verdicts = table(observations)
        for arm in round_.arms:
            rows = [c for c in verdicts if c.variant == arm.variant and c.family == "primary"]
            faster_at = {c.level for c in rows if c.verdict == FASTER}
            if arm.verdict == "adopt":
                # Adopted at a level: the table calls it faster there, on the same boots.
                assert arm.level in faster_at, (seed, arm, rows)
                (same,) = [c for c in rows if c.level == arm.level]
                assert same.n == same.n_ref == 3
                assert arm.gain_pct == pytest.approx(same.delta_pct)
                seen["adopt"] += 1
            else:
                if both_ways and "within" not in arm.reason:
                    # One arm: the hunt's level is the table's, so it is faster nowhere.
                    assert not faster_at, (seed, arm, rows)
                seen["other"] += 1
    return seen


@pytest.mark.slow
def test_the_hunt_and_the_table_agree_on_the_same_boots():
    spec = hunt_spec(boots=3)
    assert spec.alpha == pytest.approx(0.025)  # one-sided: the table's two-sided 5 %
    seen = agreement(spec, 16, both_ways=False)
    assert seen["adopt"] >= 16 and seen["other"] >= 16, seen  # both sides exercised


def test_with_one_arm_the_hunt_adopts_what_the_table_calls_faster():
    seen = {"adopt": 0, "other": 0}
    for name in ("big", "small", "null", "worse"):
        got = agreement(hunt_spec(boots=3, names=(name,)), 8, both_ways=True)
        seen = {k: seen[k] + got[k] for k in seen}
    assert seen["adopt"] >= 8 and seen["other"] >= 8, seen
