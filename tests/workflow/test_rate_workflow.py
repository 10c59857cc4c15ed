"""A small rate sweep through real Snakemake against the scripted SSE server, whose
timings are known, so goodput under the SLO has a known true value.

The server cycles each request's TTFT through a list, counting every completion request
it gets, in arrival order. Within a level nothing else reaches it (the liveness probe runs
before the level), so any 4k consecutive requests hold exactly k of each TTFT in the list,
whatever the offset: with TTFTs [30, 30, 30, 400] ms and an SLO of TTFT ≤ 200 ms exactly
3/4 of a level's requests meet it; with [30, 30, 250, 400], exactly 1/2.
"""

import csv
import json
import sys

import pytest
from fixtures.configs import stub_model
from fixtures.faults import write
from fixtures.paths import ROOT
from fixtures.workflow import run_snakemake

SSE_SERVER = ROOT / "tests" / "fixtures" / "sse_server.py"
COMMAND = f"{{python}} {SSE_SERVER} --host {{host}} --port {{port}}"

pytestmark = pytest.mark.workflow

RATES = [10, 40, "inf"]
MEASURED = {"10": 20, "40": 80, "inf": 8}  # per_level 2 × rate, min 8: multiples of 4
TRUE_SHARE = {"fast": 0.75, "slow": 0.5}


def rate_config() -> dict:
    def variant(ttfts):
        return {
            "command": COMMAND,
            "model_name": "scripted",
            "flags": {"script": {"ttft_ms": ttfts, "gap_ms": 5}},
        }

    return {
        "stacks": {"test": {"kind": "existing", "python": sys.executable}},
        "models": {"tiny": stub_model()},
        "engine": "command",
        "server": {"boot_timeout_s": 15, "teardown_grace_s": 3},
        "variants": {"baseline": variant([30, 30, 30, 400]), "slow": variant([30, 30, 250, 400])},
        "benchmark": {
            "rate": RATES,
            "arrival": {"distribution": "poisson", "seed": 3},
            "warmup": 0,
            "num_prompts": {"per_level": 2, "min": 8},
            "workload": {"kind": "random", "input_tokens": 8, "output_tokens": 8, "seed": 1},
            "stall_timeout_s": 5,
        },
        "slo": {"ttft_ms": 200, "tpot_ms": 50},
        "correctness": False,
        "analysis": {"min_steady_fraction": 0},
    }


def test_rate_sweep_goodput_matches_the_truth(tmp_path):
    run = run_snakemake(
        tmp_path,
        "results/report.html",
        "--cores",
        "1",
        "--configfile",
        write(tmp_path, rate_config()),
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "results" / "summary.csv")))
    assert len(rows) == 2 * len(RATES)
    schedules = {}
    for r in rows:
        variant, level = r["variant"], r["level"]
        truth = TRUE_SHARE["fast" if variant == "baseline" else "slow"]
        n = MEASURED[level]
        assert r["status"] == "ok" and r["load"] == "rate", r
        assert int(r["completed"]) == n
        assert int(r["slo_met"]) == round(truth * n), (variant, level, r["slo_met"])
        assert float(r["slo_met_share"]) == pytest.approx(truth)
        duration = float(r["duration_s"])
        assert float(r["goodput_request_rate"]) == pytest.approx(truth * n / duration, rel=1e-3)
        # Every token is one word; every good request streamed its 8.
        assert float(r["goodput_output_throughput"]) == pytest.approx(
            truth * n * 8 / duration, rel=1e-3
        )
        assert r["rate_short"] == "False" and r["valid"] == "True", r["invalid_reasons"]
        if level != "inf":
            assert float(r["target_rate"]) == float(level)
            assert float(r["achieved_ratio"]) == pytest.approx(1.0, abs=0.05)
        levels_dir = tmp_path / f"results/cells/test/tiny/{variant}/r0/levels"
        records = [json.loads(x) for x in open(levels_dir / f"L{level}_i0.requests.jsonl")]
        schedules[(variant, level)] = [
            round(x["scheduled_s"] - records[0]["scheduled_s"], 6) for x in records
        ]
    # Seeded and recorded: both variants got the same arrival schedule at each rate.
    for level in ("10", "40"):
        # (scheduled_s is stored to the µs on each boot's own clock origin)
        assert schedules[("baseline", level)] == pytest.approx(schedules[("slow", level)], abs=3e-6)
        assert len(set(schedules[("baseline", level)])) == MEASURED[level]
    html = (tmp_path / "results" / "report.html").read_text()
    section = html[html.index('id="load"') :]
    assert "goodput req/s" in section and "ttft_ms ≤ 200" in section
    assert "Pareto plot" in section and "overall" in section


def test_capacity_search_stays_under_the_servers_true_capacity(tmp_path):
    """A server of fixed capacity: `max_streams` streams at once, each 10 ms to the first
    token and 7 gaps of 5 ms (45 ms a request), the rest queued in arrival order. It serves
    at most mu = max_streams / 45 ms requests per second. Above mu the queue grows at
    (rate - mu) per second; a level of T = 4 s of arrivals then has more than 10 % of its
    requests waiting over 90 ms (TTFT over the 100 ms target) once rate > mu (1 + 0.1 / T)
    = 1.025 mu, in the fluid picture; a sampled Poisson schedule of n >= 320 arrivals is
    itself within about 2 / sqrt(n) = 11 % of its target rate. So the search must end below
    1.15 mu, inside the configured levels' bracket, with every probe a recorded level."""
    config = rate_config()
    config["variants"]["wide"] = config["variants"].pop("slow")
    for name, streams in (("baseline", 1), ("wide", 2)):
        config["variants"][name]["flags"]["script"] = {
            "ttft_ms": 10,
            "gap_ms": 5,
            "max_streams": streams,
        }
    config["benchmark"]["rate"] = [5, 80]
    config["benchmark"]["num_prompts"] = {"per_level": 4, "min": 16}
    config["benchmark"]["search"] = {"probes": 3, "attainment": 0.9}
    config["slo"] = {"ttft_ms": 100}
    run = run_snakemake(
        tmp_path,
        "results/report.html",
        "--cores",
        "1",
        "--configfile",
        write(tmp_path, config),
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "results" / "summary.csv")))
    capacities = {}
    for variant, streams in (("baseline", 1), ("wide", 2)):
        cell = json.loads(
            (tmp_path / f"results/cells/test/tiny/{variant}/r0/cell.json").read_text()
        )
        cap = cell["capacity"]
        assert 5 <= cap["value"] < 1.15 * streams / 0.045, cap
        assert cap["high"] is not None and cap["high"] <= 80
        assert 1 <= len(cap["probes"]) <= 3
        mine = [r for r in rows if r["variant"] == variant]
        probed = [float(r["level"]) for r in mine if r.get("probe") == "True"]
        assert probed == [float(p) for p in cap["probes"]]
        # The bracket is what the rows say: every level up to the value met the SLO for
        # >= 90 % of its requests, the bracket's top did not.
        share = {float(r["level"]): float(r["slo_met_share"]) for r in mine}
        assert all(s >= 0.9 for lv, s in share.items() if lv <= cap["value"])
        assert share[float(cap["high"])] < 0.9
        capacities[variant] = cap["value"]
    assert capacities["wide"] > capacities["baseline"]
    # Compared like any other metric: a verdicts.csv row (one boot a side: no interval).
    verdicts = list(csv.DictReader(open(tmp_path / "results" / "verdicts.csv")))
    (cap_row,) = [v for v in verdicts if v["metric"] == "max_load_within_slo"]
    assert (cap_row["variant"], cap_row["compared_variant"]) == ("wide", "baseline")
    assert float(cap_row["mean"]) == capacities["wide"]
    assert float(cap_row["mean_ref"]) == capacities["baseline"]
    assert cap_row["verdict"] == "inconclusive (too few boots)"
    html = (tmp_path / "results" / "report.html").read_text()
    assert "Max load within the SLO" in html
