"""collect: cell.json files -> tidy summary.csv (docs/records.md)."""

import json

import pandas as pd
import pytest
from fixtures.cells import LEVELS, REPEATS, STACK_MANIFEST, tput, write_cell, write_sweep

from servesweep.results.collect import CELL_COLUMNS, collect, read_summary


def test_summary_rows_and_statuses(tmp_path):
    paths, expected = write_sweep(tmp_path)
    out = tmp_path / "results" / "summary.csv"
    df = collect(paths, out, levels=LEVELS)

    back = read_summary(out)
    assert len(back) == len(df) == len(paths) * len(LEVELS) * REPEATS
    assert list(back.columns[: len(CELL_COLUMNS)]) == CELL_COLUMNS
    got = {(r.variant, r.level, r.repeat): r.status for r in back.itertuples()}
    assert got == expected

    cells = back.drop_duplicates("variant").set_index("variant")
    assert cells.loc["baseline", "cell_status"] == "ok"
    assert cells.loc["bootfail", "failure_stage"] == "boot"
    assert cells.loc["bootfail", "failure_cause"] == "boot_timeout"
    assert pd.isna(cells.loc["bootfail", "boot_s"])
    assert cells.loc["midfail", "failure_cause"] == "died"
    assert cells.loc["midfail", "client_version"] == "0"  # kept as text
    assert cells.loc["cb", "spec_hash"] == "0123456789ab"

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


def test_missing_levels_become_not_run(tmp_path):
    path = write_cell(tmp_path, "baseline", "failed", [], {"stage": "launch", "cause": "oom"})
    df = collect([path], tmp_path / "a.csv", levels=LEVELS)
    assert list(df.level) == LEVELS and set(df.status) == {"not_run"}
    # Without the configured levels the cell still shows up, as one row.
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
