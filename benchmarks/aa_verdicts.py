"""A/A: how often identical configurations get a faster / slower verdict, by simulation.

    python benchmarks/aa_verdicts.py [--seeds 200] [--old-seeds 100] [--draws 200]

Each seed is a sweep (tests/fixtures/verdict_sim.py) of a baseline and three variants
identical to it, 3 boots, 4 levels (1, 4, 16, 64; max(16, 1.5 × level) requests a boot), the
five metrics of verdicts.csv (throughput, median and p99 TTFT and TPOT): 20 comparisons a
variant. Judged by the real `verdicts.compare` (after: practical margin 2 % / 5 % and Holm
over each variant's 20); before: each comparison alone at 5 %, no margin, the percentiles by
`stats.two_stage_bootstrap` (the rule until now; throughput by Welch, unchanged). Also the
new intervals with only one of the two rules, to show what each contributes. Reports the
false-verdict rate per comparison and per variant (any of its 20), for two noise models:
boots that scatter (lognormal CV 2 %, requests log-sd 0.3) and requests only. Prints the
table and writes benchmarks/results/aa_verdicts.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from fixtures.verdict_sim import Noise, judged, old_percentile_interval, simulate  # noqa: E402
from record import write_result  # noqa: E402

from servesweep.results.judge.verdicts import ALPHA, FASTER, METRICS, SLOWER  # noqa: E402

LEVELS = (1, 4, 16, 64)
VARIANTS = {"baseline": 0.0, "copy-1": 0.0, "copy-2": 0.0, "copy-3": 0.0}
NOISES = [
    Noise("boots scatter (CV 2 %, requests log-sd 0.3)", 0.02, 0.3, 0),
    Noise("requests only (log-sd 0.3)", 0.0, 0.3, 0),
]


def requests_at(level: int) -> int:
    return max(16, int(1.5 * level))


def rules(c, old: tuple[float, float] | None) -> dict[str, bool]:
    """Which rules call this comparison faster / slower (all of them wrong: truth is 0)."""
    big = abs(c.delta_pct) > c.margin_pct
    out = {
        "after": c.verdict in (FASTER, SLOWER),
        "new intervals, alone at 5 %": c.p_value <= ALPHA,
        "new intervals, margin only": c.p_value <= ALPHA and big,
        "new intervals, Holm only": c.p_holm <= ALPHA,
    }
    if old is not None:
        out["before"] = old[0] > 0 or old[1] < 0
    return out


def run(noise: Noise, seeds: int, old_seeds: int, draws: int) -> dict:
    hits: dict[str, list[bool]] = {}
    per_variant: dict[str, list[bool]] = {}
    for seed in range(seeds):
        rng = np.random.default_rng([seed, int(noise.boot_cv * 1000)])
        sweep = simulate(rng, noise, 3, VARIANTS, LEVELS, requests_at)
        found: dict[tuple[str, str], bool] = {}
        for i, c in enumerate(judged(sweep)):
            old = None
            if seed < old_seeds:
                metric = METRICS[c.metric]
                if metric.from_requests is None:
                    old = (c.delta_lo, c.delta_hi)
                else:
                    old = old_percentile_interval(sweep, c, metric, draws, seed * 1000 + i)
            for rule, wrong in rules(c, old).items():
                hits.setdefault(rule, []).append(wrong)
                found[(rule, c.variant)] = found.get((rule, c.variant), False) or wrong
        for (rule, _), wrong in found.items():
            per_variant.setdefault(rule, []).append(wrong)
    order = ["before", "new intervals, alone at 5 %", "new intervals, margin only"]
    order += ["new intervals, Holm only", "after"]
    return {
        "noise": noise.name,
        "rules": [
            {
                "rule": rule,
                "per_comparison": round(float(np.mean(hits[rule])), 4),
                "comparisons": len(hits[rule]),
                "per_variant": round(float(np.mean(per_variant[rule])), 4),
                "variants": len(per_variant[rule]),
            }
            for rule in order
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--old-seeds", type=int, default=100, help="of them, also judged before")
    ap.add_argument("--draws", type=int, default=200, help="bootstrap draws (before)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    start = time.monotonic()
    results = []
    print(f"{'noise':<44} {'rule':<30} {'per comparison':>14} {'per variant':>11}")
    for noise in NOISES:
        results.append(run(noise, args.seeds, args.old_seeds, args.draws))
        for r in results[-1]["rules"]:
            print(
                f"{noise.name:<44} {r['rule']:<30} {r['per_comparison']:>14.4f} "
                f"{r['per_variant']:>11.4f}",
                flush=True,
            )
    path = write_result(
        "aa_verdicts",
        {
            "what": "false faster/slower verdicts among identical variants (A/A)",
            "boots": 3,
            "levels": list(LEVELS),
            "variants": len(VARIANTS) - 1,
            "comparisons_per_variant": len(LEVELS) * len(METRICS),
            "seeds": args.seeds,
            "old_seeds": args.old_seeds,
            "draws": args.draws,
            "seconds": round(time.monotonic() - start, 1),
            "results": results,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
