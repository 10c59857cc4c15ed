"""The actual coverage of the verdicts' 95 % intervals, by simulation with known truth.

    python benchmarks/verdict_coverage.py [--sims 2000] [--old-sims 200] [--draws 400]

A variant 10 % above its baseline (throughput × 1.1, every latency × 1.1) is compared at 2,
3 and 5 boots a side under two noise models (tests/fixtures/verdict_sim.py): (a) boot-level,
each boot a lognormal effect of CV 1 or 5 % and 200 requests of log-sd 0.3; (b)
request-level, no boot effect, 24 requests a boot of log-sd 0.6. Coverage is the share of
simulations whose interval holds +10 %. The intervals come from the real functions:
throughput from `verdicts.welch_delta` (unchanged); TTFT median and p99 before from
`stats.two_stage_bootstrap` (the rule until now) and after from `verdicts.percentile_delta`
(Welch on the boots' log percentiles). Prints the table and writes
benchmarks/results/verdict_coverage.json.
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

from fixtures.verdict_sim import (  # noqa: E402
    BOOT_LEVEL,
    REQUEST_LEVEL,
    SIM_METRICS,
    draw_boots,
    side,
)
from record import write_result  # noqa: E402

from servesweep import stats  # noqa: E402
from servesweep.results.judge.verdicts import percentile_delta, welch_delta  # noqa: E402

TRUTH = 0.10
BOOTS = (2, 3, 5)
NOISES = [*BOOT_LEVEL, REQUEST_LEVEL]


def after(metric: str, mine: list, ref: list) -> tuple[float, float]:
    if metric == "output_throughput":
        d = welch_delta(side(mine).stats, side(ref).stats)
    else:
        requests = {("v", r): b[1] for r, b in enumerate(mine)}
        requests |= {("b", r): b[1] for r, b in enumerate(ref)}

        def values(cell, repeat, level, field):
            return requests[(cell[2], repeat)].tolist()

        d = percentile_delta(
            SIM_METRICS[metric],
            side(mine, ("s", "m", "v"), column=metric),
            side(ref, ("s", "m", "b"), column=metric),
            values,
        )
    return d.low, d.high


def before(metric: str, mine: list, ref: list, draws: int, seed: int) -> tuple[float, float]:
    if metric == "output_throughput":
        return after(metric, mine, ref)  # Welch, unchanged
    q = SIM_METRICS[metric].from_requests[1]
    _, low, high = stats.two_stage_bootstrap(
        [b[1] for b in mine],
        [b[1] for b in ref],
        lambda v: float(np.percentile(v, q)),
        draws=draws,
        seed=seed,
    )
    return (low - 1) * 100, (high - 1) * 100


def coverage(intervals: list[tuple[float, float]]) -> float:
    truth = TRUTH * 100
    return float(np.mean([lo <= truth <= hi for lo, hi in intervals]))


def run(sims: int, old_sims: int, draws: int, seed: int) -> list[dict]:
    rows = []
    for noise in NOISES:
        for boots in BOOTS:
            rng = np.random.default_rng([seed, boots, int(noise.boot_cv * 1000)])
            pairs = [
                (draw_boots(rng, noise, boots, TRUTH), draw_boots(rng, noise, boots, 0.0))
                for _ in range(sims)
            ]
            for metric in SIM_METRICS:
                new = [after(metric, a, b) for a, b in pairs]
                old = [before(metric, a, b, draws, i) for i, (a, b) in enumerate(pairs[:old_sims])]
                width = float(np.median([hi - lo for lo, hi in new]))
                rows.append(
                    {
                        "noise": noise.name,
                        "boots": boots,
                        "metric": metric,
                        "before": round(coverage(old), 3),
                        "before_sims": len(old),
                        "after": round(coverage(new), 3),
                        "after_sims": len(new),
                        "after_median_width_pct": round(width, 1),
                    }
                )
                print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict) -> str:
    return (
        f"{r['noise']:<40} {r['boots']:>5} {r['metric']:<18} {r['before']:>7.3f} "
        f"{r['after']:>6.3f} {r['after_median_width_pct']:>8.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulations per row (after)")
    ap.add_argument("--old-sims", type=int, default=200, help="of them, bootstrapped (before)")
    ap.add_argument("--draws", type=int, default=400, help="bootstrap draws (before)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    print(f"{'noise':<40} {'boots':>5} {'metric':<18} {'before':>7} {'after':>6} {'width %':>8}")
    start = time.monotonic()
    rows = run(args.sims, args.old_sims, args.draws, args.seed)
    path = write_result(
        "verdict_coverage",
        {
            "what": "actual coverage of the verdicts' nominal 95 % intervals, truth +10 %",
            "truth_pct": TRUTH * 100,
            "sims": args.sims,
            "old_sims": args.old_sims,
            "draws": args.draws,
            "seed": args.seed,
            "seconds": round(time.monotonic() - start, 1),
            "rows": rows,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
