"""Every valid sweep ends in a report: a matrix of sweep shapes through real Snakemake, each
report opened in headless Chromium.

Factors (tests/fixtures/shapes.py): 1 or 2 variants × concurrency, rate, or rate with a
capacity search × 1 or 2 boots × nothing failed, one boot failed (at its last level, its
earlier levels measured), every boot failed (before ready). The full factorial is 36
Snakemake runs, too slow for CI (about 10 s each on 2 cores), so CI runs a covering design:
every pair of factor values appears in some run, plus the smallest sweep with nothing
measured (the classic one with verdicts is test_aa_workflow.py's run, also opened in
Chromium); `SERVESWEEP_SHAPES=full` runs all 36.
"""

import csv
import json
import os

import pytest
from fixtures.browser import browser_ready, keep_screenshot, render
from fixtures.faults import fault_servers_running, write
from fixtures.shapes import Shape, covering, full_factorial, shape_config
from fixtures.workflow import run_snakemake

pytestmark = pytest.mark.workflow

SHAPES = full_factorial() if os.environ.get("SERVESWEEP_SHAPES") == "full" else covering()


def boots_of(workdir) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(workdir.glob("results/cells/**/cell.json"))]


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_every_shape_ends_in_a_report(tmp_path, shape: Shape):
    cfg = shape_config(shape, tmp_path)
    run = run_snakemake(
        tmp_path, "results/report.html", "--cores", "2", "--configfile", write(tmp_path, cfg)
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not fault_servers_running(tmp_path)

    boots = boots_of(tmp_path)
    assert len(boots) == shape.variants * shape.boots
    failed = [b for b in boots if b["status"] == "failed"]
    expected = {"ok": 0, "one_failed": 1, "all_failed": len(boots)}[shape.outcome]
    assert len(failed) == expected, [(b["variant"], b["repeat"], b["failure"]) for b in failed]
    if shape.outcome == "one_failed":
        (boot,) = failed
        assert boot["failure"]["stage"] == "level" and boot["failure"]["cause"] == "nccl"
        assert boot["levels"][0]["status"] == "ok"  # measured before it died
    if shape.outcome == "all_failed":
        assert {b["failure"]["cause"] for b in failed} == {"oom"}

    rows = list(csv.DictReader(open(tmp_path / "results" / "summary.csv")))
    assert {(r["variant"], r["repeat"]) for r in rows} == {
        (b["variant"], str(b["repeat"])) for b in boots
    }
    html = (tmp_path / "results" / "report.html").read_text()
    assert "Traceback" not in html
    if failed:
        failures = html[html.index('id="failures"') :]
        assert {"one_failed": "nccl", "all_failed": "oom"}[shape.outcome] in failures
    if shape.variants == 1:
        assert "No variant to compare with its baseline." in html
    if shape.load == "search":
        assert "Max load within the SLO" in html
        searched = [b for b in boots if b.get("capacity")]
        if not searched:
            assert "No boot finished its capacity search" in html
        if shape.outcome == "ok":
            assert len(searched) == len(boots)

    if not browser_ready():
        pytest.skip("the report was written; Chromium or Playwright is missing to open it")
    shown = render(tmp_path / "results" / "report.html", tmp_path / "report.png")
    assert shown.messages == []
    assert shown.empty_tables == 0
    assert all(w > 0 for w in shown.image_widths)
    keep_screenshot(shown, f"shape-{shape.name}.png")
