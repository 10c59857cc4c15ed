"""Faults through the real workflow: several variants, some failing, with real Snakemake;
and the owner dying mid-level (SIGINT, SIGTERM, SIGKILL) with the next run resuming."""

import csv
import json
import os
import re
import signal
import subprocess
import time

import pytest
from fixtures.faults import (
    config,
    fault_servers_running,
    job_log_pids,
    kill_if_running,
    planned_cells,
    wait_for,
    write,
)
from fixtures.workflow import run_snakemake, snakemake_cmd

from servesweep.server.procs import group_members

pytestmark = pytest.mark.workflow


def test_failing_variants_are_results_and_the_sweep_goes_on(tmp_path):
    variants = {
        "baseline": {"flags": {}},
        "crashes": {"extends": "baseline", "flags": {"fault": "crash_boot", "signature": "oom"}},
        "dies-at-16": {
            "extends": "baseline",
            "flags": {"fault": "die_at", "at": 10, "signature": "nccl"},
        },
    }
    cfg = config(variants)
    # Two jobs at a time: nothing here depends on the order cells run in (the boots that
    # must run in order are test_boots_interleave's, below), and three boots run in two turns.
    run = run_snakemake(
        tmp_path, "results/report.html", "--cores", "2", "--configfile", write(tmp_path, cfg)
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not fault_servers_running(tmp_path)

    rows = list(csv.DictReader(open(tmp_path / "results" / "summary.csv")))
    by = {(r["variant"], int(r["level"])): r for r in rows}
    assert len(rows) == 3 * 3
    assert {by[("baseline", lv)]["status"] for lv in (1, 4, 16)} == {"ok"}
    assert by[("crashes", 1)]["failure_stage"] == "boot"
    assert by[("crashes", 1)]["failure_cause"] == "oom"
    assert [by[("dies-at-16", lv)]["status"] for lv in (1, 4, 16)] == ["ok", "ok", "failed"]
    assert by[("dies-at-16", 16)]["failure_cause"] == "nccl"

    html = (tmp_path / "results" / "report.html").read_text()
    failures = html[html.index("Failures") :]
    assert "oom" in failures and "nccl" in failures and "CUDA out of memory" in failures

    # A failure is final by default: nothing to do.
    assert (
        planned_cells(
            run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", write(tmp_path, cfg))
        )
        == []
    )
    # With the switch on, exactly the failed cells rerun, a bounded number of times.
    cfg["retries"] = {"failed_cells": True, "max_attempts": 2}
    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", write(tmp_path, cfg))
    assert planned_cells(dry) == ["crashes", "dies-at-16"], dry.stdout
    rerun = run_snakemake(
        tmp_path, "results/report.html", "--cores", "2", "--configfile", write(tmp_path, cfg)
    )
    assert rerun.returncode == 0
    cell = json.loads((tmp_path / "results/cells/test/tiny/crashes/r0/cell.json").read_text())
    assert cell["attempt"] == 1 and cell["status"] == "failed"
    # max_attempts reached: no further retries.
    assert (
        planned_cells(
            run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", write(tmp_path, cfg))
        )
        == []
    )


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM-job", "SIGKILL-job", "SIGTERM-snakemake"])
def test_owner_death_leaves_nothing_and_the_next_run_resumes(tmp_path, how):
    variants = {
        "baseline": {"flags": {}},
        # Slow enough (40 requests x 8 tokens x 8 ms, ~2.6 s) that a level is in progress
        # when the owner dies (0.5 s after it started) and its cell is not finished; the
        # rerun measures it again in full (and SIGTERM-snakemake lets it finish).
        "slow": {"flags": {"gap-ms": 8}},
    }
    cfg = config(variants, levels=(1,), min_prompts=40)
    cfg_path = write(tmp_path, cfg)

    # Like a terminal: Snakemake leads its own process group. One job at a time, in
    # priority order: the baseline's boot has finished when the slow one's level starts.
    owner = subprocess.Popen(
        snakemake_cmd(tmp_path, "results/report.html", "--cores", "1", "--configfile", cfg_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    job_log = tmp_path / "results" / "logs" / "run_cell" / "test" / "tiny" / "slow" / "r0.log"
    try:
        job_pid, server_pid = wait_for(lambda: job_log_pids(job_log), 60, "the level to start")
        time.sleep(0.5)
        if how == "SIGINT":
            os.killpg(owner.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
        elif how == "SIGTERM-job":
            os.kill(job_pid, signal.SIGTERM)  # e.g. SLURM ending the job step
        elif how == "SIGKILL-job":
            os.kill(job_pid, signal.SIGKILL)  # no chance to clean up: the watchdog must
        else:
            owner.send_signal(signal.SIGTERM)  # Snakemake's graceful stop
        start = time.monotonic()
        wait_for(lambda: not group_members(server_pid), 30, "the server's group to end")
        gone_s = time.monotonic() - start
        owner.wait(timeout=60)
    finally:
        kill_if_running(owner)
    assert not fault_servers_running(tmp_path)
    baseline_cell = tmp_path / "results/cells/test/tiny/baseline/r0/cell.json"
    measured = json.loads(baseline_cell.read_text())
    assert measured["status"] == "ok"
    slow_cell = tmp_path / "results/cells/test/tiny/slow/r0/cell.json"
    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", cfg_path)
    if how == "SIGTERM-snakemake":
        # Snakemake's own SIGTERM semantics: running jobs finish (and tear down),
        # nothing new starts; the next run only collects and reports.
        assert gone_s < 30
        assert json.loads(slow_cell.read_text())["status"] == "ok"
        assert not (tmp_path / "results" / "report.html").exists()
        assert planned_cells(dry) == [], dry.stdout[-3000:]
    else:
        assert gone_s < 15, f"server outlived its owner by {gone_s:.1f} s"
        assert not slow_cell.exists()  # an interrupted cell is no result
        assert planned_cells(dry) == ["slow"], dry.stdout[-3000:]
    again = run_snakemake(tmp_path, "results/report.html", "--cores", "1", "--configfile", cfg_path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert json.loads(slow_cell.read_text())["status"] == "ok"
    # The boot finished before the owner died is kept as it was.
    assert json.loads(baseline_cell.read_text())["started_at"] == measured["started_at"]
    assert not fault_servers_running(tmp_path)


def test_boots_interleave_a_crashed_boot_is_one_result_and_a_new_repeat_runs_alone(tmp_path):
    # `crash_once` crashes the first launch of the variant (its marker file does not exist
    # yet) and serves normally afterwards: boot r0 fails, r1 is fine.
    marker = tmp_path / "crashed-once"
    variants = {
        "baseline": {"flags": {}},
        "flaky": {"flags": {"fault": "crash_once", "marker": str(marker), "signature": "oom"}},
    }
    cfg = config(variants, levels=(1, 4), retries={"boot": 0})
    cfg["benchmark"]["repeats"] = 2
    cfg["analysis"] = {"min_steady_fraction": 0}
    run = run_snakemake(
        tmp_path, "results/report.html", "--cores", "1", "--configfile", write(tmp_path, cfg)
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    boots = []
    for variant in variants:
        for r in (0, 1):
            cell = json.loads(
                (tmp_path / f"results/cells/test/tiny/{variant}/r{r}/cell.json").read_text()
            )
            boots.append((cell["started_at"], cell["variant"], cell["repeat"], cell["status"]))
    # Every cell's first boot, then every cell's second: variants interleave, in the order
    # Snakemake started them (started_at is to the second: a crash and the next boot can
    # share one).
    started = re.findall(
        r"rule run_cell:.*?variant=([\w.-]+), repeat=(\d+)", run.stdout + run.stderr, re.S
    )
    assert started == [("baseline", "0"), ("flaky", "0"), ("baseline", "1"), ("flaky", "1")]
    assert max(b[0] for b in boots if b[2] == 0) <= min(b[0] for b in boots if b[2] == 1)
    assert {(v, r): s for _, v, r, s in boots}[("flaky", 0)] == "failed"
    assert {(v, r): s for _, v, r, s in boots}[("flaky", 1)] == "ok"

    rows = list(csv.DictReader(open(tmp_path / "results" / "summary.csv")))
    flaky = {(int(r["repeat"]), int(r["level"])): r for r in rows if r["variant"] == "flaky"}
    assert flaky[(0, 1)]["failure_cause"] == "oom" and flaky[(0, 1)]["status"] == "not_run"
    assert flaky[(1, 4)]["status"] == "ok"
    verdicts = list(csv.DictReader(open(tmp_path / "results" / "verdicts.csv")))
    headline = [v for v in verdicts if v["metric"] == "output_throughput"]
    assert {(v["variant"], v["n"], v["n_ref"]) for v in headline} == {("flaky", "1", "2")}
    # Its one boot is judged on the scatter pooled at the level (the baseline's two boots:
    # 1 df), as every cell is.
    assert {(v["df"], v["variance"]) for v in headline} == {("1.0", "pooled")}

    # One more boot of every cell: only the new boots run.
    cfg["benchmark"]["repeats"] = 3
    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", write(tmp_path, cfg))
    jobs = re.findall(r"rule run_cell:.*?variant=([\w.-]+), repeat=(\d+)", dry.stdout, re.S)
    assert sorted(jobs) == [("baseline", "2"), ("flaky", "2")], dry.stdout[-3000:]


def test_a_variant_that_changes_the_answers_is_flagged_next_to_its_speed(tmp_path):
    # The fixture answers greedily and deterministically; `flipped` flips one token in a
    # quarter of its answers (seeded), which the correctness pass must find.
    variants = {
        "baseline": {"flags": {"greedy": True}},
        "flipped": {"extends": "baseline", "flags": {"flip-fraction": 0.25}},
    }
    cfg = config(variants, levels=(1,))
    cfg["correctness"] = {"prompts": 16, "max_tokens": 8}
    # Two jobs at a time: the flips are fixed by (seed, prompt), not by timing or order.
    run = run_snakemake(
        tmp_path, "results/report.html", "--cores", "2", "--configfile", write(tmp_path, cfg)
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "results" / "correctness.csv")))
    against = {
        r["mode"]: r
        for r in rows
        if (r["variant"], r["compared_to_variant"]) == ("flipped", "baseline")
    }
    assert set(against) == {"one_at_a_time", "all_together"}
    for r in against.values():
        assert r["changes_outputs"] == "True"
        assert 0 < float(r["exact_match_rate"]) < 1
    same = [r for r in rows if r["variant"] == "baseline"]
    assert same and all(r["changes_outputs"] == "False" for r in same)
    html = (tmp_path / "results" / "report.html").read_text()
    assert "changes outputs (exact match" in html
    boot = json.loads((tmp_path / "results/cells/test/tiny/flipped/r0/cell.json").read_text())
    assert boot["correctness"]["status"] == "done" and boot["correctness"]["prompts"] == 16
