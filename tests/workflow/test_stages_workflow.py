"""`benchmark.repeats: auto` through real Snakemake, as users run it: a planted large
speed-up is decided at the first look on `min` boots, an unchanged variant gets boots (and
the baseline beside it) until the cap, a rerun runs nothing, and a dry run shows the first
stage's boots before anything is measured (the scripted fault server: known timings, a
seeded boot-to-boot scatter)."""

import csv
import json
import re

import pytest
from fixtures.faults import config, fault_servers_running, write
from fixtures.workflow import planned_jobs, run_snakemake

pytestmark = pytest.mark.workflow

TIMING = {"gap-ms": 4, "scatter-cv": 0.02}


def staged_config():
    variants = {
        "baseline": {"flags": {**TIMING, "seed": 1}},
        "fast": {"flags": {**TIMING, "seed": 2, "speedup": 3}},
        "same": {"flags": {**TIMING, "seed": 3}},
    }
    cfg = config(variants, levels=(1, 4))
    cfg["benchmark"]["repeats"] = {"min": 2, "max": 3, "stage": 1}
    cfg["correctness"] = False
    return cfg


def boots_of(tmp_path, variant):
    root = tmp_path / "results" / "cells" / "test" / "tiny" / variant
    return sorted(int(p.name[1:]) for p in root.glob("r*") if (p / "cell.json").exists())


def test_boots_are_added_only_where_the_verdict_is_open(tmp_path):
    cfgfile = write(tmp_path, staged_config())
    dry = run_snakemake(tmp_path, "results/report.html", "-n", "--configfile", cfgfile)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    cells = sorted(
        (w["variant"], w["repeat"]) for rule, w in planned_jobs(dry) if rule == "run_cell"
    )
    # The first stage: every cell's min boots, known before anything is measured.
    assert cells == [(v, r) for v in ("baseline", "fast", "same") for r in ("0", "1")]
    # Steps 0 (asks for the first stage) and 1 (decides on it); later ones once it ran.
    assert re.search(r"^repeats_stage\s+2$", dry.stdout, re.M), dry.stdout[-2000:]

    run = run_snakemake(tmp_path, "results/report.html", "--cores", "1", "--configfile", cfgfile)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not fault_servers_running(tmp_path)
    # fast: decided at the first look on 2 boots; same: open, boots to the cap (3), and
    # the baseline beside it.
    assert boots_of(tmp_path, "fast") == [0, 1]
    assert boots_of(tmp_path, "same") == [0, 1, 2]
    assert boots_of(tmp_path, "baseline") == [0, 1, 2]
    last = json.loads((tmp_path / "results" / "stages" / "s2.json").read_text())
    assert last["done"] and last["decisions"]["test/tiny/fast"]["outcome"] == "faster"
    assert last["decisions"]["test/tiny/same"]["outcome"] in ("cap", "within margin")

    rows = list(csv.DictReader(open(tmp_path / "results" / "verdicts.csv")))
    primary = {
        (r["variant"], r["level"]): r
        for r in rows
        if r["family"] == "primary" and r["kind"] == "variant"
    }
    assert {r["stage_look"] for (v, _), r in primary.items() if v == "fast"} == {"1"}
    assert {r["stage_look"] for (v, _), r in primary.items() if v == "same"} == {"2"}
    assert {r["verdict"] for (v, _), r in primary.items() if v == "fast"} == {"faster"}
    assert {r["n"] for (v, _), r in primary.items() if v == "same"} == {"3"}

    again = run_snakemake(tmp_path, "results/report.html", "-n", "--configfile", cfgfile)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, (
        again.stdout[-3000:]
    )
    assert not re.search(r"rule run_cell", again.stdout)
