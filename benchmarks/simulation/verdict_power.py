"""Power and false-verdict rates of the grid verdicts, before and after, by simulation with
known truth.

    python -m benchmarks.simulation.verdict_power [--sims 2000] [--out FILE]

Each simulated sweep (tests/fixtures/verdict_sim.py) is a baseline and four variants,
levels 1, 4, 16 and 64, the five metrics of verdicts.csv, B boots a cell. Judged by
`judge_fast` (the rule of servesweep.results.judge.verdicts, vectorised; checked against
the real `compare` verdict for verdict in tests/unit/results/test_verdict_power.py) and
`judge_before` (the rule of commit 0c0c04b: Welch on raw throughput, Holm over a
variant's 20 comparisons; likewise checked against that commit's code when it was
written). Prints and writes benchmarks/results/verdict_power.json:

- power: one variant changed by +x % (every metric, every level; the other three
  unchanged); the share of sweeps in which it is called `faster` at level 16, for x on a
  grid; and the smallest x on the grid reaching 80 %;
- A/A: all four variants unchanged; the share called faster or slower anywhere in the
  primary family (throughput over the 4 levels), anywhere in the secondary one (latency
  percentiles), and (before) anywhere in its one family of 20;
- the noise users have: boot CV 2, 5 and 10 %; first boots 30–70 % slower at level 16
  (drawn per configuration); one variant whose boots scatter 3 times more (A/A of that
  variant); a boot's effects correlated across its levels (rho 0.5);
- the guard: how often it sends a 3x noisier configuration to its own scatter, against
  the per-level F-test the hunt used before.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

from benchmarks.support.record import write_result
from servesweep import stats
from tests.fixtures.verdict_sim import (
    USER_NOISES,
    Noise,
    judge_before,
    judge_fast,
    simulate_logs,
)

LEVELS = (1, 4, 16, 64)
AT = LEVELS.index(16)
NAMES = ["baseline", "changed", "copy-1", "copy-2", "copy-3"]  # copy-1: the noisier one
EFFECTS = [1, 2, 3, 5, 7, 10, 12, 15, 20, 25, 30, 40, 50, 70, 100, 150, 200, 300, 500, 1000]
BOOTS = (2, 3, 5)


def noises() -> list[Noise]:
    return [*USER_NOISES, Noise("CV 5 %, levels correlated (rho 0.5)", 0.05, level_rho=0.5)]


def power_row(rng, noise: Noise, boots: int, sims: int, rule) -> dict:
    powers = {}
    for x in EFFECTS:
        logs = simulate_logs(rng, noise, sims, boots, [0, x / 100, 0, 0, 0], LEVELS, NAMES)
        v = rule(logs)
        powers[x] = float((v[:, 0, 0, AT] == 1).mean())
    reach = next((x for x in EFFECTS if powers[x] >= 0.8), None)
    return {"power_at": powers, "smallest_80": reach}


def aa_row(rng, noise: Noise, boots: int, sims: int) -> dict:
    logs = simulate_logs(rng, noise, sims, boots, [0, 0, 0, 0, 0], LEVELS, NAMES)
    after, before = judge_fast(logs), judge_before(logs)
    wrong_a, wrong_b = after != 0, before != 0
    return {
        "after_primary": float(wrong_a[:, :, 0].any(-1).mean()),
        "after_secondary": float(wrong_a[:, :, 1:].any((-1, -2)).mean()),
        "after_primary_per_comparison": float(wrong_a[:, :, 0].mean()),
        "before_any_of_20": float(wrong_b.any((-1, -2)).mean()),
        "before_throughput": float(wrong_b[:, :, 0].any(-1).mean()),
        # The noisier copy alone (where there is one): its own A/A.
        "noisy_copy_primary": float(wrong_a[:, 1, 0].any(-1).mean()),
    }


def guard_power(rng, boots: int, sims: int, mult: float = 3.0, levels: int = 4) -> dict:
    """P(flag) for a configuration scattering `mult` x among 4 others (CV 5 %), by the
    guard over its levels and by a per-level F-test (flagged at any level)."""
    k, cv = 5, 0.05
    sd = np.full(k, cv)
    sd[1] *= mult
    y = rng.normal(0, 1, (sims, k, levels, boots)) * sd[None, :, None, None]
    ss = ((y - y.mean(-1, keepdims=True)) ** 2).sum(-1)
    d = boots - 1
    rest_ss, rest_df = ss.sum(1) - ss[:, 1], (k - 1) * d
    per_level = ss[:, 1] / d / (rest_ss / rest_df) > sps.f.isf(0.10, d, rest_df)
    dfs = np.full(ss[:, 1].shape, d)
    over_levels = ~stats.scatter_agrees(
        stats.Scatter(ss[:, 1], dfs), stats.Scatter(rest_ss, rest_df * dfs / d)
    )
    # A configuration that scatters like the rest (here with the 3x one inside the rest):
    # how often the guard flags it.
    same = ~stats.scatter_agrees(
        stats.Scatter(ss[:, 2], dfs), stats.Scatter(ss.sum(1) - ss[:, 2], (k - 1) * dfs)
    )
    return {
        "over_levels": float(over_levels.mean()),
        "per_level_any": float(per_level.any(-1).mean()),
        "per_level_one": float(per_level[:, 0].mean()),
        "false_alarm_over_levels": float(same.mean()),
    }


def first_boot_rules(rng, sims: int) -> list[dict]:
    """Power at level 16 and A/A under analysis.first_boot keep / auto / drop, with and
    without first boots 30-70 % slower there."""
    out = []
    for noise in (
        Noise("CV 5 %", 0.05),
        Noise(
            "CV 5 %, first boots 30-70 % slower at 16", 0.05, first_boot=(0.3, 0.7), first_level=16
        ),
    ):
        for boots in (3, 5):
            row = {"noise": noise.name, "boots": boots}
            for rule in ("keep", "auto", "drop"):

                def judge(logs, rule=rule):
                    return judge_fast(logs, first_boot=rule)

                row[rule] = power_row(rng, noise, boots, sims, judge)["smallest_80"]
                aa = simulate_logs(rng, noise, sims, boots, [0] * 5, LEVELS, NAMES)
                row[f"{rule}_aa"] = float((judge(aa)[:, :, 0] != 0).any(-1).mean())
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    start = time.monotonic()
    rng = np.random.default_rng(20261203)
    results = []
    print(
        f"{'noise':<44} {'boots':>5} {'80 % power before':>18} {'after':>7} "
        f"{'A/A before (20)':>16} {'after primary':>14} {'secondary':>10} {'noisy copy':>10}"
    )
    for noise in noises():
        for boots in BOOTS:
            before = power_row(rng, noise, boots, args.sims, judge_before)
            after = power_row(rng, noise, boots, args.sims, judge_fast)
            aa = aa_row(rng, noise, boots, args.sims)
            results.append(
                {"noise": noise.name, "boots": boots, "before": before, "after": after, "aa": aa}
            )

            def reach(r):
                return f"+{r['smallest_80']} %" if r["smallest_80"] else "never"

            print(
                f"{noise.name:<44} {boots:>5} {reach(before):>18} {reach(after):>7} "
                f"{aa['before_any_of_20']:>16.3f} {aa['after_primary']:>14.3f} "
                f"{aa['after_secondary']:>10.3f} {aa['noisy_copy_primary']:>10.3f}",
                flush=True,
            )
    guard = {b: guard_power(rng, b, args.sims * 5) for b in BOOTS}
    for b, g in guard.items():
        print(
            f"guard, {b} boots: flags a 3x scatter {g['over_levels']:.3f} over 4 levels "
            f"(per-level F at one level {g['per_level_one']:.3f}, at any of 4 "
            f"{g['per_level_any']:.3f}); false alarm {g['false_alarm_over_levels']:.3f}"
        )
    rules = first_boot_rules(rng, args.sims)
    for r in rules:
        print(
            f"first_boot at {r['boots']} boots, {r['noise']}: 80 % power keep / auto / drop "
            f"+{r['keep']} / +{r['auto']} / +{r['drop']} %, A/A {r['keep_aa']:.3f} / "
            f"{r['auto_aa']:.3f} / {r['drop_aa']:.3f}"
        )
    path = write_result(
        "verdict_power",
        {
            "what": "power and A/A of the grid verdicts, before (0c0c04b) and after",
            "levels": list(LEVELS),
            "variants": len(NAMES) - 1,
            "sims": args.sims,
            "effects_pct": EFFECTS,
            "power_level": 16,
            "seconds": round(time.monotonic() - start, 1),
            "results": results,
            "guard": guard,
            "first_boot_rules": rules,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
