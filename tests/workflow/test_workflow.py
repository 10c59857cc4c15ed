"""The real workflow with real Snakemake: dry runs, lint, format, bad configs, and the
whole chain end to end with the real `transformers serve` on a small workload (the
session's one real-engine sweep, tests/fixtures/engine_sweep.py)."""

import copy
import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures.browser import browser_ready, keep_screenshot, render
from fixtures.configs import BAD_CONFIGS, base_config
from fixtures.engine_sweep import VARIANTS as ENGINE_VARIANTS
from fixtures.paths import ROOT
from fixtures.workflow import leftover_processes, planned_jobs, write_config
from fixtures.workflow import run_snakemake as snakemake

from servesweep.sweep.stages import repeats_rule


def test_default_config_dry_run_plans_the_whole_chain(tmp_path):
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    result = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(ROOT / "config" / "config.yaml")
    )
    assert result.returncode == 0, result.stderr
    rules = sorted(rule for rule, _ in planned_jobs(result))
    # Boots in stages (`repeats: auto`): the first stage, two boots of each of the two cells,
    # is planned before anything is measured; the stage checkpoints decide on the rest.
    repeats = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["benchmark"]["repeats"]
    assert repeats == "auto"
    first = repeats_rule(repeats).min
    assert first == 2
    assert rules == sorted(
        ["setup_env", "download_model", *["run_cell"] * (2 * first), "collect", "report", "all"]
    )
    assert re.search(r"^repeats_stage\s+2$", result.stdout, re.M), result.stdout[-2000:]


def test_lint_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Lints for" not in result.stdout + result.stderr


def test_snakefmt_is_clean():
    snakefmt = shutil.which("snakefmt") or str(Path(sys.executable).parent / "snakefmt")
    result = subprocess.run(
        [snakefmt, "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["variants"]["continuous-batching"].update(extends="nope"),
            "config: variants.continuous-batching.extends: unknown variant 'nope'",
        ),
        (
            lambda c: c["benchmark"].update(levels=[1, 1]),
            "config: benchmark.levels: [1, 1] has non-unique elements",
        ),
        (
            lambda c: (
                c["variants"].pop("baseline")
                and c["variants"]["continuous-batching"].pop("extends")
            ),
            "config: variants: missing 'baseline'",
        ),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, edit, message):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    edit(config)
    result = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(tmp_path, config))
    )
    assert result.returncode != 0
    # Snakemake prints errors on stdout when not attached to a terminal.
    assert message in result.stdout + result.stderr
    assert not (tmp_path / "resources").exists()


def test_bad_port_is_one_line_naming_the_key(tmp_path):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["server"]["port"] = "eighty"
    result = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(tmp_path, config))
    )
    output = result.stdout + result.stderr
    lines = [ln for ln in output.splitlines() if ln.startswith("config: ")]
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("config: server.port: "), output


@pytest.mark.workflow
@pytest.mark.engine
def test_end_to_end_with_transformers_serve(engine_sweep):
    # The session's one real-engine sweep (tests/fixtures/engine_sweep.py): baseline,
    # continuous batching and bfloat16, levels 1, 4 and 16, one boot each.
    tmp_path, config, run = engine_sweep.workdir, engine_sweep.config, engine_sweep.run
    assert run.returncode == 0, run.stderr[-4000:]
    assert not leftover_processes(str(tmp_path / "resources" / "models")), "server left behind"

    with open(tmp_path / "results" / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 3
    assert {r["status"] for r in rows} == {"ok"}, [(r["variant"], r["failure_cause"]) for r in rows]
    for row in rows:
        assert int(row["completed"]) == int(row["num_prompts"]) == max(8, int(row["level"]))
        # The synthetic model never stops early: exactly max_tokens per request.
        assert int(row["total_output_tokens"]) == 8 * int(row["completed"])
        assert float(row["output_throughput"]) > 0
        assert row["stack_torch"].startswith("2.13.0")
    speed = {(r["variant"], int(r["level"])): float(r["output_throughput"]) for r in rows}
    # Continuous batching serves 16 streams together; the baseline serves one at a time.
    assert speed[("continuous-batching", 16)] > 1.2 * speed[("baseline", 16)], speed

    # The correctness pass through the workflow: bfloat16 changes the answers and is
    # flagged beside its speed; continuous batching answers as the baseline does.
    flagged = {
        r["variant"]
        for r in csv.DictReader(open(tmp_path / "results" / "correctness.csv"))
        if r["changes_outputs"] == "True"
    }
    assert flagged == {"bf16"}, flagged

    html = (tmp_path / "results" / "report.html").read_text()
    assert "synthetic" in html and "continuous-batching" in html
    assert "data:image/png;base64," in html
    assert "--continuous-batching" in html
    assert "changes outputs (exact match" in html
    # The real report in a real browser: no console error, the verdicts and the plots.
    if browser_ready():
        shown = render(tmp_path / "results" / "report.html", tmp_path / "report.png")
        assert shown.messages == [], shown.messages
        assert shown.verdict_rows == 4  # header, baseline, continuous-batching, bf16
        assert shown.image_widths and all(w > 0 for w in shown.image_widths)
        keep_screenshot(shown, "engine-report.png")

    for variant in ENGINE_VARIANTS:
        cell_dir = engine_sweep.cell_dir(variant)
        assert sorted(p.name for p in (cell_dir / "levels").glob("*.json")) == [
            "L16_i0.json",
            "L1_i0.json",
            "L4_i0.json",
        ]
        assert (cell_dir / "server.log").stat().st_size > 0

    # Only what changed reruns (dry runs: the sweep's results stay as they are).
    config = copy.deepcopy(config)
    edited = tmp_path / "edited"
    edited.mkdir(exist_ok=True)
    dry = snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(engine_sweep.config_path))
    assert dry.returncode == 0
    assert planned_jobs(dry) == [], dry.stdout

    config["variants"]["continuous-batching"]["flags"]["cb-block-size"] = 16
    dry = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(edited, config))
    )
    jobs = planned_jobs(dry)
    assert sorted(rule for rule, _ in jobs) == ["all", "collect", "report", "run_cell"], dry.stdout
    assert [w["variant"] for rule, w in jobs if rule == "run_cell"] == ["continuous-batching"]

    config["benchmark"]["levels"].append(32)
    dry = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(edited, config))
    )
    cells = sorted(w["variant"] for rule, w in planned_jobs(dry) if rule == "run_cell")
    assert cells == sorted(ENGINE_VARIANTS)


# Every bad config is refused in-process by the same `load` that rules/common.smk calls
# (tests/unit/sweep/test_config.py, all of BAD_CONFIGS); Snakemake only relays its one line.
# Through real Snakemake (about 3.5 s a start) runs one of each way a message is made: the
# schema (an index, the top level, a custom message, a required key), the semantic checks
# before and after `extends` is resolved and after defaults are filled, and the one that
# reads a file relative to the working directory (plus the default sweep's cases above),
# and a sweep file whose mapping has YAML's int keys (a per-level σ_B missing a level).
THROUGH_SNAKEMAKE = {
    "benchmark.levels[0]",
    "(top level)",
    "models.m.hf",
    "stacks.cpu.requirements",
    "variants.baseline",
    "variants.cb.command",
    "benchmark.num_prompts",
    "benchmark.precision.boot_cv_pct: no σ_B for level 4 (benchmark.levels: 1, 4)",
}


@pytest.mark.parametrize("mutate, key", [c for c in BAD_CONFIGS if c[1] in THROUGH_SNAKEMAKE])
def test_bad_configs_are_refused_by_snakemake_before_any_job(tmp_path, mutate, key):
    config = base_config()
    mutate(config)
    result = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(tmp_path, config))
    )
    output = result.stdout + result.stderr
    lines = [ln for ln in output.splitlines() if ln.startswith("config: ")]
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith(f"config: {key}"), output[-2000:]
    assert not (tmp_path / "resources").exists() and not (tmp_path / "results").exists()
