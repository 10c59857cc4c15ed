"""Goodput, the capacity search's bracket, capacity against the baseline, the Pareto
frontier and the prefix-cache hit rate, on hand-built inputs with hand-computed answers."""

import math

import pandas as pd
import pytest

from servesweep.capacity import search as probes
from servesweep.capacity.goodput import goodput, request_meets_slo
from servesweep.results.collect.derived import prefix_cache_hit_rate
from servesweep.results.judge.capacity import capacity_comparisons, capacity_rows
from servesweep.results.report.pareto import frontier, pareto_points


def _r(ttft, tpot, e2e, out=10, ok=True, warmup=False):
    return {
        "ok": ok,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2el_ms": e2e,
        "output_tokens": out,
        "warmup": warmup,
    }


def test_goodput_by_hand():
    slo = {"ttft_ms": 100, "tpot_ms": 20}
    records = [
        _r(50, 10, 200),  # meets
        _r(100, 20, 300),  # meets: the bounds are inclusive
        _r(101, 10, 200),  # TTFT over
        _r(50, 25, 200),  # TPOT over
        _r(50, None, 60, out=1),  # one token: no TPOT, meets
        _r(None, None, 5, ok=False),  # failed: never meets
        _r(1, 1, 1, warmup=True),  # warmup: not counted at all
    ]
    g = goodput(records, slo, duration_s=2.0)
    assert g.slo_met == 3
    assert g.slo_met_share == pytest.approx(3 / 6, abs=1e-4)
    assert g.goodput_request_rate == 1.5
    assert g.goodput_output_throughput == (10 + 10 + 1) / 2
    assert not request_meets_slo(_r(10, 10, 501), {"e2e_ms": 500})


def test_bracket_and_probes_by_hand():
    met = {1: True, 4: True, 16: False, 64: False}
    b = probes.bracket(met)
    assert b == (4, 16)
    assert probes.next_probe(b, rate=False) == 10
    assert probes.next_probe(b, rate=True) == 8.0  # sqrt(4 × 16)
    assert probes.next_probe(probes.Bracket(11.3, 16), rate=True) == 13.4  # sqrt(180.8), 3 s.f.
    assert probes.next_probe(probes.Bracket(4, 5), rate=False) is None  # nothing between
    assert probes.next_probe(probes.Bracket(None, 1), rate=False) is None  # none passed
    assert probes.next_probe(probes.Bracket(64, None), rate=False) is None  # all passed
    assert probes.next_probe(probes.Bracket(16, math.inf), rate=True) is None
    # A pass above a failure (a burst absorbed) does not lift the capacity past the failure.
    assert probes.bracket({1: True, 4: False, 16: True, 64: False}) == (1, 4)
    assert probes.bracket({4: True, 16: True, 64: False, math.inf: True}) == (16, 64)
    summary = {"status": "ok", "client_bound": False}
    assert probes.level_meets_slo(summary, 0.9, 0.9) and not probes.level_meets_slo(
        summary, 0.89, 0.9
    )
    assert not probes.level_meets_slo({**summary, "rate_short": True}, 1.0, 0.9)


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
