"""The screen design through real Snakemake: eight candidates, a budget of 200 boots, boots
scattering 3 %; the screen keeps the planted winners on one boot each (kept short for the
test's wall time: the planted gains are +40 % and more), the confirm and the ablations on
fresh boots decide what stays, and the final is the planted right end, confirmed."""

import json
import time

import pytest
from fixtures.faults import fault_hunt, write
from fixtures.workflow import run_snakemake

pytestmark = pytest.mark.workflow

# Each planted factor divides the server's per-token gap (tests/fixtures/fault_server.py):
# the right end is fast+runner+ep by construction (boost-b helps alone but clashes with
# fast, ep needs runner); noop changes nothing, listed first so the screen meets it first.
CANDIDATES = {
    "noop": {"flags": {"speedup": 1.0}, "description": "changes nothing"},
    "fast": {"env": {"FAULT_BOOST_A": "3.0"}, "description": "a clear winner, through the env"},
    "slow": {"flags": {"speedup": 0.6}, "description": "a loser"},
    "crash": {"flags": {"fault": "die_at", "at": 4, "signature": "nccl"}},
    "wrong": {"flags": {"speedup": 2.5, "flip-fraction": 1.0}, "description": "fast, wrong"},
    "boost-b": {"flags": {"boost-b": 1.5, "clash": 0.6}, "description": "hurts with fast"},
    "runner": {"flags": {"runner": 1.6}},
    "ep": {"flags": {"ep": 1.4}, "requires": "runner", "description": "needs runner"},
}


def screen_config(seed: int = 7) -> dict:
    start = {"greedy": True, "gap-ms": 80, "scatter-cv": 0.03, "seed": seed}
    return fault_hunt(
        start,
        candidates=CANDIDATES,
        min_effect_pct=5,  # design: the default, screen
        boots={"min": 2, "max": 3, "screen": 1},
        first_boot="keep",
        budget={"boots": 200, "boot_minutes": 0.1},
    )


def test_the_screen_finds_the_planted_right_end_within_200_boots(tmp_path):
    cfg_path = write(tmp_path, screen_config())
    started = time.monotonic()
    run = run_snakemake(tmp_path, "results/report.html", "--cores", "2", "--configfile", cfg_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    wall_s = time.monotonic() - started
    hunt = json.loads((tmp_path / "results" / "hunt" / "hunt.json").read_text())
    assert hunt["design"] == "screen"  # the default, through Snakemake
    assert hunt["final_members"] == ["fast", "runner", "ep"], hunt["stop_reason"]
    assert hunt["final"]["variant"] == "baseline+fast+runner+ep"
    checks = [r for r in hunt["rounds"] if r["kind"] == "check"]
    confirm = [a for a in checks[-1]["arms"] if a["role"] == "confirm"]
    assert confirm and confirm[0]["verdict"] == "confirmed", checks[-1]["arms"]
    # the screen: one step a candidate it could apply, in listing order
    screen = {r["arms"][0]["candidate"]: r["arms"][0]["verdict"] for r in hunt["rounds"]}
    assert screen["crash"] == "dropped" and screen["wrong"] == "dropped"
    assert screen["slow"] == "reject" and screen["boost-b"] == "reject"
    assert screen["fast"] == screen["runner"] == screen["ep"] == "adopt"
    # within the budget, every boot measured once and counted
    boots = hunt["spent"]["boots"]
    assert boots == hunt["planned_cost"]["boots"] == sum(r["boots"] for r in hunt["ledger"])
    assert boots <= 200
    print(f"screen hunt: {boots} boots, {wall_s:.0f} s, {len(checks)} check round(s)")
    report = (tmp_path / "results" / "report.html").read_text()
    assert "baseline+fast+runner+ep" in report
