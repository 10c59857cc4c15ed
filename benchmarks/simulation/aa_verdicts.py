"""A/A through the real judge: how often identical configurations are called faster or
slower, per variant and family, by simulation.

    python -m benchmarks.simulation.aa_verdicts [--seeds 150] [--out FILE]

Each seed is a sweep (tests/fixtures/verdict_sim.py `simulate`: real request samples, real
percentiles) of a baseline and three variants identical to it, levels 1, 4, 16 and 64
(max(16, 1.5 × level) requests a boot), judged by the real `verdicts.compare` with the
defaults (`analysis.first_boot: auto`): the primary family (throughput over the 4 levels)
and the secondary one (the four latency percentiles over the 4 levels). Reports the share
of variants called faster or slower anywhere in each family, and of comparisons, for 2, 3
and 5 boots a cell under boot CV 2, 5 and 10 % (requests log-sd 0.3), first boots 30–70 %
slower at level 16, and one copy whose boots scatter 3 times more (its own rate apart).
benchmarks/simulation/verdict_power.py has the same (and the rule before) on many more sweeps
through the vectorised rule; this is the production code path. Writes
benchmarks/results/aa_verdicts.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.support.record import write_result
from servesweep.results.judge.board import PRIMARY
from servesweep.results.judge.verdicts import FASTER, SLOWER
from tests.fixtures.verdict_sim import USER_NOISES, Noise, judged, simulate

LEVELS = (1, 4, 16, 64)
VARIANTS = {"baseline": 0.0, "copy-1": 0.0, "copy-2": 0.0, "copy-3": 0.0}
BOOTS = (2, 3, 5)


def run(noise: Noise, boots: int, seeds: int) -> dict:
    per_family: dict[tuple[str, str], list[bool]] = {}
    comparisons: dict[str, list[bool]] = {}
    for seed in range(seeds):
        rng = np.random.default_rng([seed, boots, int(noise.boot_cv * 1000)])
        found: dict[tuple[str, str], bool] = {}
        for c in judged(simulate(rng, noise, boots, VARIANTS, LEVELS)):
            wrong = c.verdict in (FASTER, SLOWER)
            comparisons.setdefault(c.family, []).append(wrong)
            found[(c.variant, c.family)] = found.get((c.variant, c.family), False) or wrong
        for key, wrong in found.items():
            per_family.setdefault(key, []).append(wrong)

    def share(family, variants=("copy-1", "copy-2", "copy-3")):
        return round(float(np.mean([w for v in variants for w in per_family[(v, family)]])), 4)

    return {
        "noise": noise.name,
        "boots": boots,
        "primary_per_variant": share(PRIMARY),
        "secondary_per_variant": share("secondary"),
        "primary_per_comparison": round(float(np.mean(comparisons[PRIMARY])), 4),
        "copy_1_primary": share(PRIMARY, ("copy-1",)),
        "sweeps": seeds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=150)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    start = time.monotonic()
    results = []
    print(
        f"{'noise':<44} {'boots':>5} {'primary / variant':>18} {'secondary':>10} "
        f"{'per comparison':>15} {'copy-1 alone':>13}"
    )
    for noise in USER_NOISES:
        for boots in BOOTS:
            r = run(noise, boots, args.seeds)
            results.append(r)
            print(
                f"{noise.name:<44} {boots:>5} {r['primary_per_variant']:>18.3f} "
                f"{r['secondary_per_variant']:>10.3f} {r['primary_per_comparison']:>15.4f} "
                f"{r['copy_1_primary']:>13.3f}",
                flush=True,
            )
    path = write_result(
        "aa_verdicts",
        {
            "what": "false faster/slower verdicts among identical variants (A/A), real compare",
            "levels": list(LEVELS),
            "variants": len(VARIANTS) - 1,
            "seeds": args.seeds,
            "seconds": round(time.monotonic() - start, 1),
            "results": results,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
