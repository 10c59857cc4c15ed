"""The noisy-configuration guard's calibration: how often it flags a configuration whose
boots scatter like the rest's (its premise; nominal 10 %), how often it flags one that
scatters 3x, and what that does to the verdicts, before and after.

    python -m benchmarks.simulation.guard_calibration [--sims 20000] [--out FILE]

A sweep of five configurations at levels 1, 4, 16 and 64, B = 2, 3, 5 boots a cell, boots
lognormal (the guard is scale-free: the CV does not matter). The guard is
`servesweep.stats.scatter_agrees` (after: each level's exact F p, combined by Fisher's
method) against `before` below (commit 905492e: the mean of the levels' F ratios against one
F with the summed df). Measured:

- false alarm under the premise: five configurations alike, the share flagged (and the
  share of sweeps where any is);
- power: one configuration of five scattering 3x, the share of sweeps it is flagged in;
- the verdicts (tests/fixtures/verdict_sim.py `judge_fast`, the judge vectorised, at boot CV
  5 %): A/A of the 3x copy alone and of the others (primary family, anywhere over its 4
  levels), the share of primary comparisons judged off the pool with five alike, and the
  power to call +30 % faster at level 16 with five alike.

Writes benchmarks/results/guard_calibration.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from benchmarks.support.record import write_result
from servesweep import stats
from tests.fixtures.verdict_sim import Noise, judge_fast, simulate_logs

LEVELS = (1, 4, 16, 64)
NAMES = ["baseline", "changed", "copy-1", "copy-2", "copy-3"]
BOOTS = (2, 3, 5)
K = 5


def before(own: stats.Scatter, rest: stats.Scatter, level: float = stats.GUARD_LEVEL):
    """The guard of commit 905492e: the mean over levels of own ss x rest df / rest ss,
    against F(sum of own df, sum of rest df)."""
    r = stats.scatter_ratio(own, rest)
    crit = sps.f.isf(level, np.maximum(r.df, 1), np.maximum(r.rest_df, 1))
    return (np.asarray(r.df) == 0) | (r.ratio <= crit)


RULES = {"before": before, "after": stats.scatter_agrees}


def flags(rng, boots: int, sims: int, noisy: float) -> dict:
    """Per rule: the share of configurations flagged (all alike, noisy=1) or of sweeps in
    which configuration 1 is flagged (it scatters `noisy` x)."""
    y = rng.normal(0, 1, (sims, K, len(LEVELS), boots))
    y[:, 1] *= noisy
    ss = ((y - y.mean(-1, keepdims=True)) ** 2).sum(-1)
    rest = ss.sum(1, keepdims=True) - ss
    d = np.full(ss.shape, boots - 1)
    out = {}
    for name, rule in RULES.items():
        flagged = ~np.asarray(rule(stats.Scatter(ss, d), stats.Scatter(rest, (K - 1) * d)))
        if noisy == 1:
            out[name] = {"flagged": float(flagged.mean()), "any": float(flagged.any(1).mean())}
        else:
            out[name] = {"flagged": float(flagged[:, 1].mean())}
    return out


def verdicts(rng, boots: int, sims: int) -> dict:
    out = {}
    three = Noise("CV 5 %, copy-1 scatters 3x", 0.05, noisy=(("copy-1", 3.0),))
    alike = Noise("CV 5 %", 0.05)
    for name, rule in RULES.items():
        aa = judge_fast(
            simulate_logs(rng, three, sims, boots, [0] * K, LEVELS, NAMES), guard_rule=rule
        )
        wrong = (aa[:, :, 0] != 0).any(-1)
        power = judge_fast(
            simulate_logs(rng, alike, sims, boots, [0, 0.3, 0, 0, 0], LEVELS, NAMES),
            guard_rule=rule,
        )
        out[name] = {
            "aa_noisy_copy": float(wrong[:, 1].mean()),
            "aa_others": float(np.delete(wrong, 1, axis=1).mean()),
            "power_30pct_level16": float((power[:, 0, 0, LEVELS.index(16)] == 1).mean()),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=20000, help="sweeps a row (guard alone)")
    ap.add_argument("--verdict-sims", type=int, default=4000, help="sweeps a row (verdicts)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    start = time.monotonic()
    rng = np.random.default_rng(20261205)
    rows = []
    print(
        f"{'boots':>5} {'rule':>7} {'false alarm':>11} {'any of 5':>8} {'flags 3x':>8} "
        f"{'A/A 3x copy':>11} {'A/A others':>10} {'power +30 %':>11}"
    )
    for boots in BOOTS:
        alike = flags(rng, boots, args.sims, 1.0)
        noisy = flags(rng, boots, args.sims, 3.0)
        judged = verdicts(rng, boots, args.verdict_sims)
        for name in RULES:
            row = {
                "boots": boots,
                "rule": name,
                "false_alarm": alike[name]["flagged"],
                "false_alarm_any_of_5": alike[name]["any"],
                "flags_3x": noisy[name]["flagged"],
                **judged[name],
            }
            rows.append(row)
            print(
                f"{boots:>5} {name:>7} {row['false_alarm']:>11.3f} "
                f"{row['false_alarm_any_of_5']:>8.3f} {row['flags_3x']:>8.3f} "
                f"{row['aa_noisy_copy']:>11.3f} {row['aa_others']:>10.3f} "
                f"{row['power_30pct_level16']:>11.3f}",
                flush=True,
            )
    path = write_result(
        "guard_calibration",
        {
            "what": "the noisy-configuration guard: false alarm under its premise, power, "
            "and the verdicts' A/A and power, before (905492e) and after",
            "levels": list(LEVELS),
            "configurations": K,
            "guard_level": stats.GUARD_LEVEL,
            "sims": args.sims,
            "verdict_sims": args.verdict_sims,
            "seconds": round(time.monotonic() - start, 1),
            "results": rows,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
