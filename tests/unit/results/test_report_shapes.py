"""The report of sweeps with nothing to compare or nothing measured, and of a stack that
could not be built: written, every empty section saying so in one line (the shapes through
real Snakemake are tests/workflow/test_shapes.py)."""

import json

import pandas as pd
from fixtures.cells import (
    LEVELS,
    MODEL_MANIFEST,
    SETTINGS,
    STACK,
    STACK_MANIFEST,
    judge_sweep,
    level_summary,
    write_cell,
)

from servesweep.results.judge.verdicts import to_frame
from servesweep.results.report import verdict_views, views
from servesweep.results.report.build import build_report, read_verdicts

BOOT_FAILURE = {
    "stage": "boot",
    "cause": "oom",
    "level": None,
    "repeat": None,
    "message": "CUDA out of memory",
    "log_tail": ["torch.OutOfMemoryError"],
}


def report_of(tmp_path, paths, variants) -> str:
    summary, verdicts = judge_sweep(paths, tmp_path)
    html = tmp_path / "report.html"
    build_report(summary, verdicts, paths, html, SETTINGS._replace(variants=variants))
    return html.read_text()


def test_no_comparison_at_all_is_an_empty_list_not_a_crash(tmp_path):
    empty = to_frame([])
    assert verdict_views.verdict_lines(empty) == []
    assert verdict_views.verdict_lines(empty, kind="stack") == []
    assert verdict_views.stack_tables(empty) == []
    assert verdict_views.resolve_hints(empty, 2.0) == []
    # verdicts.csv as collect writes it with no comparison: a header only.
    empty.to_csv(tmp_path / "verdicts.csv", index=False)
    assert list(read_verdicts(tmp_path / "verdicts.csv").columns) == list(empty.columns)
    (tmp_path / "zero.csv").write_text("")
    assert read_verdicts(tmp_path / "zero.csv").empty


def test_a_one_variant_sweep_has_a_report(tmp_path):
    levels = [level_summary("baseline", lv, 0) for lv in LEVELS]
    html = report_of(tmp_path, [write_cell(tmp_path, "baseline", 0, "ok", levels)], ["baseline"])
    assert "No variant to compare with its baseline." in html
    assert "No failures." in html and "Traceback" not in html


def test_a_sweep_where_every_boot_failed_has_a_report(tmp_path):
    paths = []
    for variant in ("baseline", "cb"):
        levels = [level_summary(variant, lv, 0, "not_run") for lv in LEVELS]
        paths.append(write_cell(tmp_path, variant, 0, "failed", levels, BOOT_FAILURE))
    for path in paths:  # a capacity search that never ran: the section says so
        cell = json.loads(path.read_text())
        cell["spec"] = {"benchmark": {"search": {"probes": 2}}}
        path.write_text(json.dumps(cell))
    html = report_of(tmp_path, paths, ["baseline", "cb"])
    assert "No valid levels to plot." in html
    assert "No boot finished its capacity search" in html
    assert html.count("<b>oom</b>") == 2
    assert "No correctness pass ran" in html


def test_a_failed_stack_is_named_once_at_the_top(tmp_path):
    failed = {
        "stack": STACK,
        "kind": "venv",
        "status": "failed",
        "attempt": 1,
        "failure": {
            "stage": "stack",
            "cause": "install_failed",
            "message": "`pip ...` failed with exit code 1: ERROR: no such file",
            "log_tail": ["ERROR: <no such file>"],
        },
    }
    inherited = {
        "stage": "stack",
        "cause": "install_failed",
        "level": None,
        "repeat": 0,
        "message": "stack 'cpu' could not be set up: `pip ...` failed",
        "log_tail": ["ERROR: <no such file>"],
    }
    paths = []
    for variant in ("baseline", "cb"):
        levels = [level_summary(variant, lv, 0, "not_run") for lv in LEVELS]
        path = write_cell(tmp_path, variant, 0, "failed", levels, inherited)
        cell = json.loads(path.read_text())
        cell.update(stack_manifest=failed, model_manifest=MODEL_MANIFEST, command=[])
        cell["command_str"] = ""
        path.write_text(json.dumps(cell))
        paths.append(path)
    cells = [json.loads(p.read_text()) for p in paths]
    (found,) = views.setup_failures(cells)
    assert found["stage"] == "stack" and found["name"] == STACK
    assert (found["boots"], found["attempt"], found["cause"]) == (2, 1, "install_failed")
    assert views.setup_failures([{**cells[0], "stack_manifest": STACK_MANIFEST}]) == []
    # The cells' rows keep their failure, the setup's log tail is shown once.
    assert [f["log_tail"] for f in views.failures(pd.DataFrame({"status": []}), cells)] == [
        None,
        None,
    ]

    html = report_of(tmp_path, paths, ["baseline", "cb"])
    top = html[: html.index('id="verdicts"')]
    assert f"The stack <code>{STACK}</code> could not be set up" in top
    assert "install_failed" in top and "Its 2 boots did not" in top
    assert html.count("ERROR: &lt;no such file&gt;") == 1  # escaped, once
    assert "(not launched)" in html


def test_a_cell_whose_two_boots_differ_wildly_has_a_report(tmp_path):
    # CI's shapes tier (2 variants, 2 boots): a variant whose scatter the guard sets apart
    # is judged on its own at 0.5 df (1 df of its own, 1 of the rest's), where t(0.975) is
    # ~165; two boots a million-fold apart put the cell's high bound past what exp() can
    # hold, and the report crashed on its plots. The band is unbounded above, not an error.
    paths = []
    for variant, scale in (("baseline", (1.0, 1.02)), ("cb", (1.0, 1e6))):
        for repeat in (0, 1):
            s = level_summary(variant, 1, repeat)
            timed = [k for k in s if k.endswith(("_ms", "throughput"))]
            s.update({k: s[k] * scale[repeat] for k in timed})
            paths.append(write_cell(tmp_path, variant, repeat, "ok", [s]))
    html = report_of(tmp_path, paths, ["baseline", "cb"])
    assert "Traceback" not in html and "[0.0, inf]" in html
