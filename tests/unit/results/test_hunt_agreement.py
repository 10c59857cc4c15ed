"""A hunt's adopted arm and the verdict table agree when they judge the same boots: one
statistical core (servesweep.stats) under both. One round, every arm decided at one look
(boots.min = boots.max), no checks, so the hunt's pool is every boot of the sweep, as the
table's is; the hunt's one-sided alpha is the table's two-sided 5 % (the default)."""

import numpy as np
import pandas as pd
import pytest

from servesweep.hunt import spec as hs
from servesweep.hunt.state import BootResult, advance
from servesweep.results.judge.board import Judging
from servesweep.results.judge.verdicts import FASTER, compare

LEVELS = (16, 64)


def hunt_spec(boots: int):
    return hs.from_dict(
        {
            "start": {"name": "baseline", "stack": "s", "flags": {}},
            "candidates": {n: {"flags": {n: True}} for n in ("big", "small", "null", "worse")},
            "objective": {"metric": "output_throughput", "levels": list(LEVELS)},
            "boots_min": boots,
            "boots_max": boots,
            "confirm": False,
            "ablate": False,
            "budget_boots": 3 * 5 + 2,  # round 1 only: 3 boots x 5 variants + 2 retries
        }
    )


TRUTH = {"baseline": 1.0, "big": 1.25, "small": 1.06, "null": 1.0, "worse": 0.9}


def measured(spec, seed: int, cv: float):
    rng = np.random.default_rng(seed)
    observations = {}
    state = advance(spec, observations)
    while not state.done:
        for key in state.needed:
            name = key.variant.split("+")[-1]
            values = {lv: 100 * TRUTH[name] * float(np.exp(rng.normal(0, cv))) for lv in LEVELS}
            observations[tuple(key)] = BootResult(values)
        state = advance(spec, observations)
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


def test_the_hunt_and_the_table_agree_on_the_same_boots():
    spec = hunt_spec(boots=3)
    assert spec.alpha == pytest.approx(0.025)  # one-sided: the table's two-sided 5 %
    seen = {"adopt": 0, "other": 0}
    for seed in range(16):
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
                # Not adopted: the table calls it faster nowhere (both bound by alpha / L).
                assert not faster_at, (seed, arm, rows)
                seen["other"] += 1
    assert seen["adopt"] >= 16 and seen["other"] >= 16, seen  # both sides exercised
