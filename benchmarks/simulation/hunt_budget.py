"""The hunt within a budget: what it spends, how often it ends at the
planted right end and is confirmed, and how often a world with no gain adopts something,
against the same hunt with no budget (the comparator: what the budget's truncation costs).

    python -m benchmarks.simulation.hunt_budget [--seeds 40] [--null-seeds 100] [--out FILE]

Planted world: eight candidates over 2 counted levels, two winners (+10 % at one level,
+8 % at both; the right end is both), three nulls, a loser (-7 %), a crasher, one that
changes answers; boot CV 3 % with every configuration's first boot twice as slow (the
workflow test's shape), and CV 5 %. Null world: eight candidates that gain nothing, no
checks, budgets that cut round 1 short: the share of hunts adopting one (at most α = 0.025
plus sampling error is the claim). "old rule starts": whether the rule before (a round
starts only if its worst case and the checks' fit) would have started round 1.
Writes benchmarks/results/hunt_budget.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np

from servesweep.hunt import spec as hs
from servesweep.hunt.simulate import Noise, Truth, run
from tests.fixtures.hunt_world import BASE, PLANTED, TRUTH

SCENARIOS = {
    "cv3-first-boots": Noise(0.03, first_boot={1: 0.5, 256: 0.5}),
    "cv5": Noise(0.05),
}
BUDGETS = (None, 200, 100, 60)
NULL_BUDGETS = (40, 60)


def make_spec(names, budget: int | None, **kw) -> hs.HuntSpec:
    return hs.from_dict(
        {
            "start": {"name": "baseline", "stack": "s", "flags": {}},
            "candidates": {n: {"flags": {n: True}} for n in names},
            "objective": {"metric": "output_throughput", "levels": [1, 256]},
            "budget_boots": budget,
            **kw,
        }
    )


def old_rule_starts(spec: hs.HuntSpec) -> bool:
    m = len(hs.applicable(spec, (), ()))
    worst = hs.round_boots(spec, m, m + 1) + hs.check_boots(spec, 1)
    return spec.budget_boots is None or worst <= spec.budget_boots


def planted(budget, noise: Noise, seeds: int) -> dict:
    spec = make_spec(PLANTED, budget)
    boots, right, confirmed, started, cut, undecided = [], [], [], [], [], []
    for seed in range(seeds):
        s = run(spec, TRUTH, noise, seed).state
        boots.append(s.spent.boots)
        right.append(set(s.final) == {"w1", "w2"})
        checks = [a for r in s.rounds if r.kind == "check" for a in r.arms if a.role == "confirm"]
        confirmed.append(any(a.verdict == "confirmed" for a in checks))
        started.append(bool(s.rounds))
        cut.append(any(r.cut is not None for r in s.rounds))
        undecided.append(bool(s.undecided))
    return {
        "budget": budget,
        "seeds": seeds,
        "old_rule_starts": old_rule_starts(spec),
        "minimum_budget": hs.minimum_budget(spec),
        "boots_mean": float(np.mean(boots)),
        "boots_max": int(np.max(boots)),
        "started": float(np.mean(started)),
        "right_end": float(np.mean(right)),
        "confirmed": float(np.mean(confirmed)),
        "cut": float(np.mean(cut)),
        "some_undecided": float(np.mean(undecided)),
    }


def null(budget: int, cv: float, seeds: int) -> dict:
    spec = make_spec([f"n{i}" for i in range(8)], budget, confirm=False, ablate=False)
    states = [run(spec, Truth(BASE, {}), Noise(cv), seed).state for seed in range(seeds)]
    adopted = float(np.mean([s.rounds[0].adopted is not None for s in states]))
    return {
        "budget": budget,
        "cv": cv,
        "seeds": seeds,
        "boots_max": max(s.spent.boots for s in states),
        "cut": float(np.mean([s.rounds[0].cut is not None for s in states])),
        "adopted": adopted,
        "se": math.sqrt(spec.alpha * (1 - spec.alpha) / seeds),
        "alpha": spec.alpha,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--null-seeds", type=int, default=100)
    p.add_argument("--out", default="benchmarks/results/hunt_budget.json")
    a = p.parse_args()
    started = time.monotonic()
    rows = {
        name: [planted(b, noise, a.seeds) for b in BUDGETS] for name, noise in SCENARIOS.items()
    }
    nulls = [null(b, cv, a.null_seeds) for b in NULL_BUDGETS for cv in (0.02, 0.05)]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    out = {
        "commit": commit,
        "wall_s": round(time.monotonic() - started, 1),
        "planted": rows,
        "null": nulls,
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for name, cells in rows.items():
        print(name)
        print("  budget  old-starts  boots mean/max  started  right  confirmed  cut  undecided")
        for r in cells:
            print(
                f"  {str(r['budget']):6}  {str(r['old_rule_starts']):10}  "
                f"{r['boots_mean']:6.1f} / {r['boots_max']:3}  {r['started']:.2f}     "
                f"{r['right_end']:.2f}   {r['confirmed']:.2f}       {r['cut']:.2f} "
                f"{r['some_undecided']:.2f}"
            )
    print("null world (8 candidates, no checks): budget, CV, boots max, cut, adopted (se)")
    for r in nulls:
        print(
            f"  {r['budget']}  {r['cv']:.2f}  {r['boots_max']}  {r['cut']:.2f}  "
            f"{r['adopted']:.3f} ({r['se']:.3f})"
        )
    print(f"{out['wall_s']} s")


if __name__ == "__main__":
    main()
