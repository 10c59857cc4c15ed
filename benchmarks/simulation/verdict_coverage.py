"""The actual coverage of the verdicts' 95 % intervals, by simulation with known truth.

    python -m benchmarks.simulation.verdict_coverage [--sims 300] [--out FILE]

Each simulated sweep (tests/fixtures/verdict_sim.py `simulate`: real request samples, real
percentiles) holds a baseline, a variant 10 % faster (throughput × 1.1, every latency ÷
1.1) and two unchanged copies, at levels 1, 4, 16 and 64 (max(16, 1.5 × level) requests a
boot, or the noise's own count), 2, 3 and 5 boots a cell, under (a) boot-level noise: each
boot a lognormal effect of CV 1, 5 or 10 %, requests of log-sd 0.3; (b) request-level
noise only: no boot effect, 24 requests a boot of log-sd 0.6. Coverage is the share of the
variant's intervals (every level) that hold the truth. After: the real
`verdicts.compare` (ratio intervals from the pooled boot scatter); before: the rule of
commit 0c0c04b on the same boots (throughput: Welch's interval of the difference of the
raw means over the baseline's mean; a percentile: Welch on the boots' log percentiles).
Prints the table and writes benchmarks/results/verdict_coverage.json.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from benchmarks.support.record import write_result
from servesweep import stats
from tests.fixtures.verdict_sim import BOOT_LEVEL, REQUEST_LEVEL, Noise, judged, simulate

TRUTH = 0.10
BOOTS = (2, 3, 5)
LEVELS = (1, 4, 16, 64)
METRICS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms")
NOISES = [*BOOT_LEVEL, Noise("boot CV 10%", 0.10, 0.3, 200), REQUEST_LEVEL]
VARIANTS = {"baseline": 0.0, "faster": TRUTH, "copy-1": 0.0, "copy-2": 0.0}


def truth_pct(metric: str) -> float:
    """The variant's true Δ %: +10 % throughput, latencies ÷ 1.1."""
    return 100 * TRUTH if metric == "output_throughput" else 100 * (1 / (1 + TRUTH) - 1)


def before(sweep, metric: str, level) -> tuple[float, float]:
    """The interval of the rule before, from the boots' summary values."""
    s = sweep.summary
    here = s[s["level"] == level]
    mine = here.loc[here["variant"] == "faster", metric].to_numpy()
    ref = here.loc[here["variant"] == "baseline", metric].to_numpy()
    if metric == "output_throughput":
        w = stats.welch(mine, ref)
        return w.ci_low / ref.mean() * 100, w.ci_high / ref.mean() * 100
    w = stats.welch(np.log(mine), np.log(ref))
    return math.expm1(w.ci_low) * 100, math.expm1(w.ci_high) * 100


def run(noise: Noise, boots: int, sims: int) -> dict:
    hits = {("after", m): [] for m in METRICS} | {("before", m): [] for m in METRICS}
    rng = np.random.default_rng([boots, int(noise.boot_cv * 1000), noise.requests])
    for _ in range(sims):
        sweep = simulate(rng, noise, boots, VARIANTS, LEVELS)
        for c in judged(sweep):
            if c.variant != "faster" or c.metric not in METRICS:
                continue
            t = truth_pct(c.metric)
            hits[("after", c.metric)].append(c.delta_lo <= t <= c.delta_hi)
            lo, hi = before(sweep, c.metric, c.level)
            hits[("before", c.metric)].append(lo <= t <= hi)
    return {
        "noise": noise.name,
        "boots": boots,
        "coverage": {
            f"{rule} {metric}": round(float(np.mean(v)), 4) for (rule, metric), v in hits.items()
        },
        "intervals": len(hits[("after", METRICS[0])]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    start = time.monotonic()
    results = []
    head = "".join(f"{m:>28}" for m in METRICS)
    print(f"{'noise':<40} {'boots':>5}{head}   (before -> after)")
    for noise in NOISES:
        for boots in BOOTS:
            r = run(noise, boots, args.sims)
            results.append(r)
            cells = "".join(
                f"{r['coverage'][f'before {m}']:>19.3f} -> {r['coverage'][f'after {m}']:.3f}"
                for m in METRICS
            )
            print(f"{noise.name:<40} {boots:>5}{cells}", flush=True)
    path = write_result(
        "verdict_coverage",
        {
            "what": "coverage of the verdicts' 95 % intervals of a +10 % change, before and after",
            "truth_pct": 100 * TRUTH,
            "levels": list(LEVELS),
            "sims": args.sims,
            "seconds": round(time.monotonic() - start, 1),
            "results": results,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
