"""A stack that cannot be built or a model that cannot be had is a result: through real
Snakemake, the other stack's (model's) cells run, the broken one's cells are failed results
naming it, the report is written with the failure at the top, Snakemake exits 0, and the
next invocation sets the failed one up again (and measures its cells once it works)."""

import csv
import json
import sys

import pytest
from fixtures.browser import browser_ready, keep_screenshot, render
from fixtures.configs import stub_model
from fixtures.faults import config, fault_servers_running, write
from fixtures.workflow import planned_jobs, run_snakemake

pytestmark = pytest.mark.workflow


def small(cfg: dict) -> dict:
    cfg["benchmark"]["workload"]["output_tokens"] = 4
    cfg["correctness"] = {"prompts": 2, "max_tokens": 4}
    return cfg


def cells_of(workdir) -> dict:
    found = {}
    for path in workdir.glob("results/cells/*/*/*/r*/cell.json"):
        cell = json.loads(path.read_text())
        found[(cell["stack"], cell["model"])] = cell
    return found


def test_a_stack_that_cannot_be_built_is_a_result(tmp_path):
    # pip cannot resolve a requirement (a local path that is not there): fails fast, offline.
    (tmp_path / "broken.txt").write_text("./no-such-package-dir\n")
    cfg = small(config({"baseline": {"flags": {}}}, levels=(1,), min_prompts=4))
    cfg["stacks"] = {
        "good": {"kind": "existing", "python": sys.executable},
        "broken": {"kind": "venv", "requirements": "broken.txt", "installer": "pip"},
    }
    cfg_path = write(tmp_path, cfg)
    run = run_snakemake(tmp_path, "results/report.html", "--cores", "2", "--configfile", cfg_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not fault_servers_running(tmp_path)

    manifest = json.loads((tmp_path / "resources/stacks/broken/manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["attempt"] == 0
    failure = manifest["failure"]
    assert failure["stage"] == "stack" and failure["cause"] == "install_failed"
    assert "no-such-package-dir" in "\n".join(failure["log_tail"])
    good = json.loads((tmp_path / "resources/stacks/good/manifest.json").read_text())
    assert good["status"] == "ok"

    cells = cells_of(tmp_path)
    assert cells[("good", "tiny")]["status"] == "ok"
    broken = cells[("broken", "tiny")]
    assert broken["status"] == "failed" and broken["server_pid"] is None
    assert broken["failure"]["stage"] == "stack"
    assert broken["failure"]["cause"] == "install_failed"
    assert "stack 'broken' could not be set up" in broken["failure"]["message"]
    assert {lev["status"] for lev in broken["levels"]} == {"not_run"}

    rows = list(csv.DictReader(open(tmp_path / "results" / "summary.csv")))
    assert {(r["stack"], r["cell_status"], r["failure_stage"]) for r in rows} == {
        ("good", "ok", ""),
        ("broken", "failed", "stack"),
    }
    html = (tmp_path / "results" / "report.html").read_text()
    top = html[: html.index('id="verdicts"')]
    assert "The stack <code>broken</code> could not be set up" in top
    assert "install_failed" in top

    # The plan says so, and the next invocation sets the stack up again, then its cells.
    plan = run_snakemake(tmp_path, "results/plan.txt", "--cores", "1", "--configfile", cfg_path)
    assert plan.returncode == 0, plan.stdout[-3000:]
    text = (tmp_path / "results" / "plan.txt").read_text()
    assert "stack broken failed to set up (install_failed)" in text
    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", cfg_path)
    jobs = planned_jobs(dry)
    assert ("setup_env", {"stack": "broken"}) in jobs, dry.stdout[-3000:]
    assert [w["stack"] for rule, w in jobs if rule == "run_cell"] == ["broken"]

    if browser_ready():
        shown = render(tmp_path / "results" / "report.html", tmp_path / "report.png")
        assert shown.messages == [] and shown.empty_tables == 0
        keep_screenshot(shown, "report-broken-stack.png")


def test_a_model_that_cannot_be_had_is_a_result_and_is_retried(tmp_path):
    missing = tmp_path / "weights"  # not there yet
    cfg = small(config({"baseline": {"flags": {}}}, levels=(1,), min_prompts=4))
    cfg["models"] = {"tiny": stub_model(), "local": {"path": str(missing)}}
    cfg_path = write(tmp_path, cfg)
    run = run_snakemake(tmp_path, "results/report.html", "--cores", "2", "--configfile", cfg_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    manifest = json.loads((tmp_path / "resources/models/local/manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["failure"]["cause"] == "path_missing"
    cells = cells_of(tmp_path)
    assert cells[("test", "tiny")]["status"] == "ok"
    local = cells[("test", "local")]
    assert (local["status"], local["failure"]["stage"]) == ("failed", "model")
    assert "model 'local' could not be set up" in local["failure"]["message"]
    html = (tmp_path / "results" / "report.html").read_text()
    assert "The model <code>local</code> could not be set up" in html[: html.index('id="verdicts"')]

    # The user puts the model there: the next invocation sets it up and measures its cells,
    # and only those.
    measured = cells[("test", "tiny")]["finished_at"]
    tiny_files = tmp_path / "resources/models/tiny/files"
    missing.symlink_to(tiny_files, target_is_directory=True)
    again = run_snakemake(tmp_path, "results/report.html", "--cores", "2", "--configfile", cfg_path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert cells_of(tmp_path)[("test", "tiny")]["finished_at"] == measured
    manifest = json.loads((tmp_path / "resources/models/local/manifest.json").read_text())
    assert (manifest["status"], manifest["attempt"]) == ("ok", 1)
    assert cells_of(tmp_path)[("test", "local")]["status"] == "ok"
    html = (tmp_path / "results" / "report.html").read_text()
    assert "could not be set up" not in html
    # A setup that succeeded keeps its attempt: nothing left to do.
    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", cfg_path)
    assert planned_jobs(dry) == [], dry.stdout[-3000:]
