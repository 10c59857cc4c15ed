"""Capacity against the baseline, the Pareto frontier and the prefix-cache hit rate, on
hand-built inputs with hand-computed answers (goodput and the search's bracket:
tests/unit/capacity/test_capacity.py)."""

import pandas as pd
import pytest

from servesweep.results.collect.derived import prefix_cache_hit_rate
from servesweep.results.judge.capacity import capacity_comparisons, capacity_rows
from servesweep.results.report.pareto import frontier, pareto_points


def _cell(variant, repeat, value, low, high):
    return {
        "stack": "s",
        "model": "m",
        "variant": variant,
        "repeat": repeat,
        "status": "ok",
        "capacity": {"value": value, "low": low, "high": high, "probes": []},
    }


def test_capacity_against_baseline_by_hand():
    cells = [
        _cell("baseline", 0, 5, 5, 8),
        _cell("baseline", 1, 5, 5, 8),
        _cell("cb", 0, 10, 10, 16),
        _cell("cb", 1, 12, 12, 16),
    ]
    rows = {r.variant: r for r in capacity_rows(cells, ["baseline", "cb"], "baseline")}
    cb = rows["cb"]
    assert cb.mean == 11 and cb.delta_pct == pytest.approx(120.0)
    # Welch: var 2 and 0, n 2 each: se 1, df 1, t(0.975, 1) = 12.706; diff 6 ± 12.706 over 5.
    assert cb.ci_low == pytest.approx((6 - 12.7062) / 5 * 100, abs=0.01)
    assert cb.ci_high == pytest.approx((6 + 12.7062) / 5 * 100, abs=0.01)
    assert cb.verdict == "no significant change"
    assert rows["baseline"].boots == ["r0: 5 [5, 8)", "r1: 5 [5, 8)"]


def test_capacity_interval_keeps_the_brackets_when_boots_agree():
    # Both boots of each side stop in the same bracket: Welch has no spread ([+182.8, +182.8]),
    # but the capacities may lie anywhere in their brackets.
    apart = [
        _cell("baseline", 0, 32, 32, 38.1),
        _cell("baseline", 1, 32, 32, 38.1),
        _cell("cb", 0, 90.5, 90.5, 108),
        _cell("cb", 1, 90.5, 90.5, 108),
    ]
    cb = {r.variant: r for r in capacity_rows(apart, ["baseline", "cb"], "baseline")}["cb"]
    assert cb.delta_pct == pytest.approx(182.8125)
    assert cb.ci_low == pytest.approx((90.5 / 38.1 - 1) * 100)  # +137.5 %
    assert cb.ci_high == pytest.approx((108 / 32 - 1) * 100)  # +237.5 %
    assert cb.verdict == "faster"  # shown as "higher" in the report
    rows = capacity_rows(apart, ["baseline", "cb"], "baseline")
    (csv_row,) = capacity_comparisons(rows, "baseline", noise_cv=0.05)
    assert (csv_row.metric, csv_row.level, csv_row.compared_variant) == (
        "max_load_within_slo",
        "",
        "baseline",
    )
    assert (csv_row.n, csv_row.n_ref, csv_row.mean, csv_row.mean_ref) == (2, 2, 90.5, 32.0)
    assert (csv_row.delta_lo, csv_row.delta_hi) == (cb.ci_low, cb.ci_high)
    assert csv_row.cv == 0 and not csv_row.noisy
    # Overlapping brackets: the same two equal boots a side decide nothing.
    overlap = [
        _cell("baseline", 0, 32, 32, 64),
        _cell("baseline", 1, 32, 32, 64),
        _cell("cb", 0, 45.3, 45.3, 64),
        _cell("cb", 1, 45.3, 45.3, 64),
    ]
    cb = {r.variant: r for r in capacity_rows(overlap, ["baseline", "cb"], "baseline")}["cb"]
    assert cb.ci_low == pytest.approx((45.3 / 64 - 1) * 100)
    assert cb.ci_high == pytest.approx(100.0)
    assert cb.verdict == "no significant change"


def test_frontier_by_hand():
    # (per-user, per-gpu): (10, 100) and (50, 40) are on it; (9, 90) is beaten by the first,
    # (30, 30) by the second; (60, 10) is the fastest per user, so it is on it too.
    pts = [(10, 100), (9, 90), (50, 40), (30, 30), (60, 10)]
    assert frontier(pts) == {0, 2, 4}


def test_pareto_points_per_gpu_and_cost():
    summary = pd.DataFrame(
        {
            "stack": ["s"] * 2,
            "model": ["m"] * 2,
            "variant": ["v"] * 2,
            "level": [1, 8],
            "valid": [True, True],
            "median_tpot_ms": [10.0, 40.0],
            "output_throughput": [360.0, 2880.0],
            "joules_per_output_token": [None, 0.5],
        }
    )
    pts = pareto_points(summary, {("s", "m", "v"): 2}, {"usd_per_gpu_hour": 3.6})
    a, b = pts
    assert a.per_user == 100 and a.per_gpu == 180 and b.per_user == 25 and b.per_gpu == 1440
    # $3.6 per GPU-hour = $0.001 per GPU-second; 180 tok/s per GPU -> 1e6 / 180 s per M tokens.
    assert a.usd_per_mtok == pytest.approx(0.001 * 1e6 / 180, abs=1e-3)
    assert b.joules_per_token == 0.5 and a.frontier and b.frontier


def test_prefix_cache_hit_rate_from_counters_or_gauge():
    vllm = {
        "server_counters": {
            'vllm:prefix_cache_queries_total{model="x"}': 400.0,
            'vllm:prefix_cache_hits_total{model="x"}': 300.0,
        }
    }
    assert prefix_cache_hit_rate(vllm) == 0.75
    sglang = {"server_counters": {}, "server_after": {"headline": {"prefix_cache_hit_rate": 0.5}}}
    assert prefix_cache_hit_rate(sglang) == 0.5
    assert prefix_cache_hit_rate({"server_counters": {}, "server_after": {}}) is None
