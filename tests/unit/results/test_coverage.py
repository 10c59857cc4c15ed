"""The verdicts' 95 % intervals cover the truth at 3 boots a side, by simulation with known
truth (a smaller run of benchmarks/verdict_coverage.py): throughput by Welch, latency
percentiles by Welch on the boots' log percentiles. The two-stage bootstrap they replace
covered 0.80–0.90 here (benchmarks/results/verdict_coverage.json)."""

import numpy as np
import pytest
from fixtures.verdict_sim import BOOT_LEVEL, REQUEST_LEVEL, SIM_METRICS, draw_boots, side

from servesweep.results.judge.verdicts import percentile_delta, welch_delta

TRUTH = 0.10  # the variant is 10 % up on every metric
SIMS = 600


def interval(metric: str, mine: list, ref: list) -> tuple[float, float]:
    if metric == "output_throughput":
        d = welch_delta(side(mine).stats, side(ref).stats)
    else:
        found = {("v", r): b[1] for r, b in enumerate(mine)}
        found |= {("b", r): b[1] for r, b in enumerate(ref)}
        d = percentile_delta(
            SIM_METRICS[metric],
            side(mine, ("s", "m", "v"), column=metric),
            side(ref, ("s", "m", "b"), column=metric),
            lambda cell, repeat, level, field: found[(cell[2], repeat)].tolist(),
        )
    return d.low, d.high


@pytest.mark.parametrize("noise", [BOOT_LEVEL[-1], REQUEST_LEVEL], ids=["boots", "requests"])
def test_coverage_at_three_boots(noise):
    rng = np.random.default_rng(7)
    pairs = [
        (draw_boots(rng, noise, 3, TRUTH), draw_boots(rng, noise, 3, 0.0)) for _ in range(SIMS)
    ]
    for metric in SIM_METRICS:
        covered = [lo <= 100 * TRUTH <= hi for lo, hi in (interval(metric, a, b) for a, b in pairs)]
        assert 0.93 <= np.mean(covered) <= 0.99, (metric, np.mean(covered))
