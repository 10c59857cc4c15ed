"""collect: cell.json files -> tidy summary.csv (docs/records.md)."""

import json

import pandas as pd
import pytest
from fixtures.cells import (
    CONFIGURED,
    LEVELS,
    REPEATS,
    STACK_MANIFEST,
    level_summary,
    tput,
    write_cell,
    write_sweep,
)

from servesweep import CLIENT_VERSION, METRICS_VERSION
from servesweep.results.collect.cells import CELL_COLUMNS, Analysis, collect, read_summary


def test_summary_rows_and_statuses(tmp_path):
    paths, expected = write_sweep(tmp_path)
    out = tmp_path / "results" / "summary.csv"
    df = collect(paths, out, Analysis(levels=CONFIGURED))

    back = read_summary(out)
    # One row per boot and level (one measurement per boot here).
    assert len(back) == len(df) == len(paths) * len(LEVELS)
    assert list(back.columns[: len(CELL_COLUMNS)]) == CELL_COLUMNS
    got = {(r.variant, r.level, r.repeat): r.status for r in back.itertuples()}
    assert got == expected
    assert set(back["repeat"]) == set(range(REPEATS))

    cells = back.drop_duplicates(["variant", "repeat"]).set_index(["variant", "repeat"])
    assert cells.loc[("baseline", 0), "cell_status"] == "ok"
    assert cells.loc[("bootfail", 1), "failure_stage"] == "boot"
    assert cells.loc[("bootfail", 1), "failure_cause"] == "boot_timeout"
    assert pd.isna(cells.loc[("bootfail", 0), "boot_s"])
    assert cells.loc[("midfail", 0), "failure_cause"] == "died"
    assert cells.loc[("midfail", 1), "cell_status"] == "ok"
    assert cells.loc[("midfail", 0), "client_version"] == "0"  # kept as text
    assert cells.loc[("cb", 1), "spec_hash"] == "0123456789ab"

    ok = back[(back.variant == "cb") & (back.level == 10) & (back.repeat == 1)].iloc[0]
    assert ok.output_throughput == pytest.approx(tput("cb", 10, 1))
    assert bool(ok.client_bound) is False
    assert back[(back.variant == "cb") & (back.level == 1024)].client_bound.all()

    # Stack manifest flattened with a prefix; lists JSON-encoded.
    assert ok.stack_torch == "2.13.0"
    assert json.loads(ok.stack_gpus) == STACK_MANIFEST["gpus"]
    assert ok.stack_freeze_sha256 == STACK_MANIFEST["freeze_sha256"]
    failed = back[(back.variant == "midfail") & (back.status == "failed")].iloc[0]
    assert json.loads(failed.errors) == {"disconnect": failed.failed}


def test_validity_gates_keep_levels_out_and_say_why(tmp_path):
    paths, _ = write_sweep(tmp_path)
    back = collect(paths, tmp_path / "s.csv", Analysis(levels=CONFIGURED))
    reasons = {
        (r.variant, r.level, r.repeat): (
            r.valid,
            None if pd.isna(r.invalid_reasons) else r.invalid_reasons,
        )
        for r in back.itertuples()
    }
    assert reasons[("cb", 10, 0)] == (True, None)
    valid, why = reasons[("cb", 1024, 0)]
    assert not valid and why.startswith("client_bound: achieved concurrency")
    # An older client: stale, even where the level itself was fine.
    valid, why = reasons[("midfail", 10, 1)]
    assert not valid and why == f"stale_client: v0, now v{CLIENT_VERSION}"
    assert reasons[("midfail", 256, 0)] == (False, "not_ok: failed (died)")
    assert reasons[("bootfail", 1, 0)] == (False, "not_ok: not_run")


@pytest.mark.parametrize(
    "change, gate",
    [
        ({"total_output_tokens": 0}, "zero_output: 0 output tokens"),
        ({"failed": 2, "completed": 98}, "failed_requests: 2.0 % > 1 %"),
        ({"usage_mismatch": 3}, "usage_mismatch: 3 requests"),
        ({"steady_window_s": 1.5}, "short_steady_window: 1.50 s of 10.00 s < 20% of the level"),
        ({"steady_window_s": None}, "short_steady_window: none < 20% of the level"),
        ({"metrics_version": "0"}, "stale_metrics: v0"),  # and no requests to recompute from
    ],
)
def test_each_gate(tmp_path, change, gate):
    level = {**level_summary("cb", 10, 0), **change}
    path = write_cell(tmp_path, "cb", 0, "ok", [level])
    row = collect([path], tmp_path / "s.csv").iloc[0]
    assert not row.valid and row.invalid_reasons == gate


def test_an_older_metric_definition_is_recomputed_from_the_stored_requests(tmp_path):
    # A level written under metrics version "0" with a wrong throughput, and the request
    # records it was computed from: collect recomputes it, launching nothing.
    records = []
    for i in range(8):
        sent = 0.1 * i
        chunks = [10.0 * (k + 1) for k in range(4)]  # ms after sent
        records.append(
            {
                "index": i,
                "warmup": False,
                "ok": True,
                "error": None,
                "prompt_tokens": 16,
                "output_tokens": 4,
                "sent_s": sent,
                "end_s": sent + 0.05,
                "ttft_ms": 10.0,
                "tpot_ms": 40 / 3,
                "e2el_ms": 50.0,
                "chunk_times_ms": chunks,
                "chunk_tokens": [1, 1, 1, 1],
                "usage_reported": True,
                "retokenized_tokens": 4,
            }
        )
    old = {
        **level_summary("cb", 2, 0),
        "metrics_version": "0",
        "output_throughput": 1.0,  # what an older definition said
        "num_prompts": 8,
        "gpu": {"available": False},
        "client_cpu_s": 0.3,
    }
    path = write_cell(tmp_path, "cb", 0, "ok", [old])
    levels = path.parent / "levels"
    levels.mkdir()
    (levels / "L2_i0.requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    row = collect([path], tmp_path / "s.csv").iloc[0]
    assert row.recomputed_from == "0" and row.metrics_version == METRICS_VERSION
    # The truth by hand: 8 requests x 4 tokens from the first send (0 s) to the last end
    # (0.75 s): 32 / 0.75 tokens/s.
    assert row.output_throughput == pytest.approx(32 / 0.75, rel=1e-3)
    assert row.client_cpu_s == 0.3  # measured, carried over
    assert "stale_metrics" not in (row.invalid_reasons or "")


def test_missing_levels_become_not_run(tmp_path):
    path = write_cell(tmp_path, "baseline", 0, "failed", [], {"stage": "launch", "cause": "oom"})
    df = collect([path], tmp_path / "a.csv", Analysis(levels=CONFIGURED))
    assert list(df.level) == LEVELS and set(df.status) == {"not_run"}
    # Without the configured levels the boot still shows up, as one row.
    df = collect([path], tmp_path / "b.csv")
    assert len(df) == 1 and df.iloc[0].cell_status == "failed"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected an object"),
        (json.dumps({"stack": "s", "model": "m", "status": "ok"}), "'variant'"),
        (json.dumps({"stack": "s", "model": "m", "variant": "v", "status": "meh"}), "'status'"),
        (
            json.dumps(
                {"stack": "s", "model": "m", "variant": "v", "status": "ok", "levels": [{"x": 1}]}
            ),
            "levels[0].level",
        ),
    ],
)
def test_invalid_cell_json_names_the_file(tmp_path, text, why):
    good, _ = write_sweep(tmp_path)
    bad = tmp_path / "broken" / "cell.json"
    bad.parent.mkdir()
    bad.write_text(text)
    with pytest.raises(ValueError) as e:
        collect([*good, bad], tmp_path / "summary.csv")
    msg = str(e.value)
    assert str(bad) in msg and why in msg and "\n" not in msg


def test_missing_cell_json_names_the_file(tmp_path):
    missing = tmp_path / "nope" / "cell.json"
    with pytest.raises(ValueError, match="nope"):
        collect([missing], tmp_path / "summary.csv")


def test_the_readers_give_older_records_their_defaults():
    from servesweep.records import CellRead, LevelRead, ModelRead, SummaryRow

    old = {"stack": "s", "model": "m", "variant": "v", "status": "ok", "unknown": 1}
    cell = CellRead.of(old)
    assert (cell.repeat, cell.attempt, cell.boot_facts, cell.levels) == (0, 0, None, None)
    assert not hasattr(cell, "unknown") and CellRead.of(old, levels=[]).levels == []
    level = LevelRead.of({"level": 4, "status": "ok", "metrics_version": None})
    assert (level.in_boot, level.metrics_version, level.valid) == (0, None, None)
    assert LevelRead.of({"level": 4}).metrics_version == "0"  # before metrics had versions
    assert ModelRead.of(None, model="m").model == "m"  # no manifest: the cell's model
    assert ModelRead.of({"model": "x"}, model="m").model == "x"  # what is written wins
    row = SummaryRow.of(pd.Series({"stack": "s", "repeat": 1, "valid": True}))
    assert (row.repeat, row.valid, row.invalid_reasons) == (1, True, None)
