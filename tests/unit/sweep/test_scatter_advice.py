"""The plan's word on where the boots' scatter comes from and what to add next."""

import math

import yaml

from servesweep import sizing
from servesweep.sweep.checks import check_precision
from servesweep.sweep.scatter_advice import level_costs, scatter_advice


def row(level, source, boot, within, per_boot, share):
    return {
        "level": str(level), "components_from": source, "sigma_boot_pct": str(boot),
        "sigma_within_pct": str(within), "per_boot": str(per_boot), "within_share": str(share),
        "family": "primary",
    }  # fmt: skip


RECORDS = [
    {"boot_s": 60.0, "levels": [{"level": 1, "duration_s": 40.0, "num_prompts": 20}]},
    {"boot_s": 80.0, "levels": [{"level": 1, "duration_s": 40.0, "num_prompts": 20}]},
]


def test_costs_are_the_records_medians():
    boot_s, per_level = level_costs(RECORDS)
    assert boot_s == 70.0 and per_level == {1: (40.0, 20)}


def test_requests_dominate_the_plan_asks_for_more_requests_a_boot():
    # sigma_B 1 %, sigma_W 20 % a request, R 20: r = sqrt(70 / 2 x 0.04 / 0.0001) = 118.
    lines = scatter_advice([row(1, "batches", 1.0, 20.0, 20, 0.95)], RECORDS)
    want = sizing.cost_optimal_per_boot(0.0001, 0.04, 70.0, 2.0)
    assert round(want) == 118
    assert f"about {want:.0f} requests a boot before more boots" in lines[-1]
    assert "σ_W/√R 4.5 %" in lines[-1] and "95 % of a boot's scatter" in lines[-1]
    # What num_prompts: auto takes to size its levels from the boots' scatter.
    assert "benchmark.precision.boot_cv_pct: 1.0 (the levels' median σ_B" in lines[2]


def test_boots_dominate_the_plan_asks_for_boots():
    lines = scatter_advice([row(1, "batches", 10.0, 5.0, 20, 0.01)], RECORDS)
    assert "cheaper: more boots" in lines[-1]


def test_only_the_total_says_how_to_measure_the_split():
    lines = scatter_advice([row(1, "total", 4.0, math.nan, 1, math.nan)])
    assert "boot scatter 4.0 %, not split" in lines[-1]
    # Not split: the total, which holds the requests' sampling too, said so.
    assert "boot_cv_pct: 4.0 (the levels' median boot scatter, requests' sampling" in lines[2]
    assert scatter_advice([]) == []


def test_levels_whose_boots_scatter_differently_get_a_sigma_each():
    # The H100 of docs/sglang-h200.md: σ_B ~1 % at levels 1 and 10, ~8 % at 256. Their
    # median (1.0) would run 256 to its cap: the advice is one σ_B a level, as the sweep
    # file writes it.
    rows = [row(1, "batches", 1.0, 20.0, 20, 0.9), row(10, "batches", 1.2, 10.0, 20, 0.5)]
    rows.append(row(256, "batches", 8.0, 10.0, 256, 0.1))
    lines = scatter_advice(rows, RECORDS)
    assert (
        "benchmark.precision.boot_cv_pct: {1: 1.0, 10: 1.2, 256: 8.0} (each level's σ_B"
        in (lines[2])
    )
    config = yaml.safe_load(lines[2].split("boot_cv_pct:")[1].split(" (")[0])
    assert config == {1: 1.0, 10: 1.2, 256: 8.0}  # YAML as the sweep file takes it
    # Within 2x of each other: their median, one number.
    close = scatter_advice([row(1, "batches", 1.0, 20.0, 20, 0.9), rows[1]], RECORDS)
    assert "benchmark.precision.boot_cv_pct: 1.1 (the levels' median σ_B" in close[2]


def test_a_level_whose_sigma_came_out_zero_is_in_the_map_the_sweep_file_takes():
    # Level 10's boots scatter no more than their requests explain (σ_B estimated 0): the
    # map still names it (check_precision refuses a map that leaves a measured level out),
    # with the smallest σ_B of the others (a smaller σ_B errs long, never short), and says so.
    rows = [row(1, "batches", 1.5, 20.0, 20, 0.9), row(10, "batches", 0.0, 10.0, 20, 1.0)]
    rows.append(row(256, "batches", 8.0, 10.0, 256, 0.1))
    line = scatter_advice(rows, RECORDS)[2]
    given = yaml.safe_load(line.split("boot_cv_pct:")[1].split(" (")[0])
    assert given == {1: 1.5, 10: 1.5, 256: 8.0}
    assert "level 10: σ_B 0 here (no scatter beyond its requests'), given" in line
    config = {"benchmark": {"levels": [1, 10, 256], "precision": {"boot_cv_pct": given}}}
    check_precision(config)  # raises CheckError naming the key if a level were missing


def test_a_stated_sigma_far_from_the_one_measured_is_named_with_its_cost():
    # Lease D of docs/sglang-h200.md: a σ_B carried from a quiet machine (1.5 %) where this
    # one's boots scatter 12 % at one stream; level 10 within 2x says nothing; level 256
    # stated 8 %, measured 1 %: auto stopped it short.
    rows = [row(1, "batches", 12.0, 3.0, 64, 0.01), row(10, "batches", 2.5, 4.0, 64, 0.05)]
    rows.append(row(256, "in_boot", 1.0, 13.0, 3, 0.9))
    stated = sizing.Precision.of({"precision": {"boot_cv_pct": {1: 1.5, 10: 1.5, 256: 8.0}}})
    lines = scatter_advice(rows, RECORDS, stated)
    gaps = [line for line in lines if "(benchmark.precision.boot_cv_pct)" in line]
    assert len(gaps) == 2
    assert "level 1: σ_B 12.0 % here, 8.0x the 1.5 % stated" in gaps[0]
    assert "ran it longer than its cost optimum" in gaps[0]
    assert "level 256: σ_B 1.0 % here, 8.0x under the 8 % stated" in gaps[1]
    assert "stopped it short of its cost optimum" in gaps[1]
    # Each follows its own level's line.
    assert lines.index(gaps[0]) == 1 + next(i for i, x in enumerate(lines) if "level 1:" in x)
    # One number for every level: compared at each. Fixed requests (no rule), or a rule
    # without a σ_B (the RSE target): nothing to compare.
    one = scatter_advice(rows, RECORDS, sizing.Precision.of({"precision": {"boot_cv_pct": 2.5}}))
    assert sum("(benchmark.precision.boot_cv_pct)" in line for line in one) == 2  # 1 and 256
    assert scatter_advice(rows, RECORDS, sizing.Precision.of({})) == scatter_advice(rows, RECORDS)
    assert not any("stated" in line for line in scatter_advice(rows, RECORDS))
    # σ_B 0 (no scatter beyond the requests'): not compared.
    zero = [row(1, "batches", 0.0, 3.0, 64, 1.0)]
    assert not any("stated" in line for line in scatter_advice(zero, RECORDS, stated))
