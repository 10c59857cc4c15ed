"""The real workflow with real Snakemake: dry runs, lint, format, bad configs, and the
whole chain end to end with the real `transformers serve` on a small workload."""

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures.browser import browser_ready, keep_screenshot, render
from fixtures.configs import BAD_CONFIGS, TINY_MODEL, base_config
from fixtures.workflow import leftover_processes, planned_jobs, write_config
from fixtures.workflow import run_snakemake as snakemake

ROOT = Path(__file__).resolve().parents[2]


def test_default_config_dry_run_plans_the_whole_chain(tmp_path):
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    result = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(ROOT / "config" / "config.yaml")
    )
    assert result.returncode == 0, result.stderr
    rules = sorted(rule for rule, _ in planned_jobs(result))
    # Two cells, two boots each (the default measures every cell twice).
    assert rules == sorted(
        ["setup_env", "download_model", *["run_cell"] * 4, "collect", "report", "all"]
    )


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
def test_end_to_end_with_transformers_serve(tmp_path, cpu_stack):
    config = {
        "stacks": {"cpu": {"kind": "existing", "python": cpu_stack["python"]}},
        "models": {"tiny": TINY_MODEL},
        "engine": "transformers",
        "server": {"boot_timeout_s": 240},
        "variants": {
            "baseline": {"flags": {"device": "cpu"}},
            "continuous-batching": {
                "extends": "baseline",
                "flags": {
                    "continuous-batching": True,
                    "cb-num-blocks": 256,
                    "cb-block-size": 32,
                    "cb-max-batch-tokens": 1024,
                },
            },
        },
        "benchmark": {
            "levels": [1, 4, 16],
            "warmup": 1,
            "num_prompts": {"per_level": 1, "min": 8},
            "workload": {"kind": "random", "input_tokens": 16, "output_tokens": 8, "seed": 3},
            "stall_timeout_s": 60,
        },
        # 8-16 prompts per level leave no steady window to require.
        "analysis": {"min_steady_fraction": 0},
    }
    config_path = write_config(tmp_path, config)
    # Targets go before --configfile, which takes every argument after it.
    run = snakemake(
        tmp_path, "results/report.html", "--cores", "1", "--configfile", str(config_path)
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert not leftover_processes(str(tmp_path / "resources" / "models")), "server left behind"

    with open(tmp_path / "results" / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 3
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

    html = (tmp_path / "results" / "report.html").read_text()
    assert "synthetic" in html and "continuous-batching" in html
    assert "data:image/png;base64," in html
    assert "--continuous-batching" in html
    # The real report in a real browser: no console error, the verdicts and the plots.
    if browser_ready():
        shown = render(tmp_path / "results" / "report.html", tmp_path / "report.png")
        assert shown.messages == [], shown.messages
        assert shown.verdict_rows == 3  # header, baseline, continuous-batching
        assert shown.image_widths and all(w > 0 for w in shown.image_widths)
        keep_screenshot(shown, "engine-report.png")

    for variant in ("baseline", "continuous-batching"):
        cell_dir = tmp_path / "results" / "cells" / "cpu" / "tiny" / variant / "r0"
        assert sorted(p.name for p in (cell_dir / "levels").glob("*.json")) == [
            "L16_i0.json",
            "L1_i0.json",
            "L4_i0.json",
        ]
        assert (cell_dir / "server.log").stat().st_size > 0

    # Only what changed reruns.
    dry = snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(config_path))
    assert dry.returncode == 0
    assert planned_jobs(dry) == [], dry.stdout

    config["variants"]["continuous-batching"]["flags"]["cb-block-size"] = 16
    dry = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(tmp_path, config))
    )
    jobs = planned_jobs(dry)
    assert sorted(rule for rule, _ in jobs) == ["all", "collect", "report", "run_cell"], dry.stdout
    assert [w["variant"] for rule, w in jobs if rule == "run_cell"] == ["continuous-batching"]

    config["benchmark"]["levels"].append(32)
    dry = snakemake(
        tmp_path, "-n", "--cores", "1", "--configfile", str(write_config(tmp_path, config))
    )
    cells = sorted(w["variant"] for rule, w in planned_jobs(dry) if rule == "run_cell")
    assert cells == ["baseline", "continuous-batching"]


@pytest.mark.parametrize("mutate, key", BAD_CONFIGS)
def test_every_bad_config_is_refused_by_snakemake_before_any_job(tmp_path, mutate, key):
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
