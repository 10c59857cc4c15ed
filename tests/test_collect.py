"""collect: cell.json files -> tidy summary.csv (docs/records.md)."""

import json

import pandas as pd
import pytest

from servesweep import CLIENT_VERSION
from servesweep.collect import CELL_COLUMNS, collect, read_summary

LEVELS = [1, 10, 256, 1024]
REPEATS = 2
STACK = "cpu"
MODEL = "synthetic"

# The planted log line: must come out escaped in the report.
EVIL = "<script>alert('pwned')</script> & more"


def tput(variant: str, level: int, repeat: int) -> float:
    """Fabricated output tok/s; repeats differ so confidence intervals are non-zero."""
    scale = {"baseline": 1.0, "cb": 3.2, "midfail": 2.0}[variant]
    return round(scale * 40 * level**0.5 + 7 * repeat, 3)


def level_summary(variant, level, repeat, status="ok", cause=None) -> dict:
    if status == "not_run":
        return {"level": level, "repeat": repeat, "status": "not_run", "cause": None}
    t = tput(variant, level, repeat) if status == "ok" else 0.0
    num = max(5 * level, 50)
    # The 1024 level is fabricated as client-bound (achieved well under target).
    achieved = min(level, num) * (0.6 if level == 1024 else 0.99)
    s = {
        "level": level,
        "repeat": repeat,
        "status": status,
        "cause": cause,
        "num_prompts": num,
        "warmup": 2,
        "completed": num if status == "ok" else num // 2,
        "failed": 0 if status == "ok" else num - num // 2,
        "errors": {} if status == "ok" else {"disconnect": num - num // 2},
        "duration_s": 10.0,
        "steady_window_s": 8.0,
        "total_input_tokens": num * 128,
        "total_output_tokens": int(t * 10),
        "output_throughput": t,
        "total_token_throughput": t * 2,
        "request_throughput": num / 10,
        "steady_output_throughput": round(t * 1.05, 3),
        "steady_total_token_throughput": t * 2.1,
        "peak_output_throughput": t * 1.3,
        "achieved_concurrency": achieved,
        "client_bound": achieved < 0.95 * min(level, num),
        "retokenized_mismatch": 0,
        "client_cpu_s": 1.5,
        "client_max_loop_lag_ms": 3.0,
        "started_at": "2025-01-01T00:00:00+00:00",
    }
    for metric, base in (("ttft", 20), ("tpot", 5), ("itl", 5), ("e2el", 700), ("chunk_gap", 6)):
        for i, stat in enumerate(("mean", "median", "std", "p90", "p99")):
            s[f"{stat}_{metric}_ms"] = base * (1 + level / 100) * (1 + i / 10)
    return s


STACK_MANIFEST = {
    "stack": STACK,
    "kind": "venv",
    "python": "/work/.venvs/cpu/bin/python",
    "python_version": "3.11.7",
    "torch": "2.13.0",
    "torch_cuda": None,
    "transformers": "5.24.0",
    "sglang": None,
    "vllm": None,
    "flashinfer": None,
    "nccl": None,
    "cpu_model": "Fake CPU @ 2.0GHz",
    "gpus": [{"index": 0, "name": "Fake GPU", "memory_total_mib": 1024}],
    "driver": None,
    "nvcc": None,
    "topology": None,
    "freeze_sha256": "ab" * 32,
    "freeze_count": 42,
    "installer": "uv",
    "built_at": "2025-01-01T00:00:00+00:00",
    "build_s": 61.5,
}

MODEL_MANIFEST = {
    "model": MODEL,
    "source": {"synthetic": {"layers": 2}},
    "path": "/work/resources/models/synthetic",
    "synthetic": True,
    "files": [
        {"path": "config.json", "size": 700, "sha256": "00" * 32},
        {"path": "model.safetensors", "size": 6_000_000, "sha256": "11" * 32},
    ],
    "total_bytes": 6_000_700,
}


def command_str(variant: str) -> str:
    # A quote and an ampersand check the report escapes commands too.
    return (
        f"transformers serve /work/resources/models/synthetic --host 127.0.0.1 --port 8000 "
        f"--device cpu --tag '{variant} & co'"
    )


def write_cell(root, variant, status, levels, failure=None, client_version=CLIENT_VERSION):
    path = root / "cells" / STACK / MODEL / variant / "cell.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    cell = {
        "stack": STACK,
        "model": MODEL,
        "variant": variant,
        "engine": "transformers",
        "spec_hash": "0123456789ab",  # all digits would also be kept as text
        "spec": {},
        "client_version": client_version,
        "status": status,
        "failure": failure,
        "command": command_str(variant).split(),
        "command_str": command_str(variant),
        "env": {"OMP_NUM_THREADS": "2", "SERVESWEEP_VARIANT": variant},
        "host": "127.0.0.1",
        "port": 8000,
        "boot_s": None if failure and failure["stage"] == "boot" else 9.5,
        "started_at": "2025-01-01T00:00:00+00:00",
        "finished_at": "2025-01-01T00:05:00+00:00",
        "stack_manifest": STACK_MANIFEST,
        "model_manifest": MODEL_MANIFEST,
        "levels": levels,
    }
    path.write_text(json.dumps(cell, indent=1))
    return path


def write_sweep(root):
    """Four cells: baseline and cb ok; bootfail failed at boot; midfail died at level 256.

    Returns (paths, expected) with expected[(variant, level, repeat)] = level status.
    """
    expected = {}
    paths = []

    def ok_levels(variant):
        out = []
        for lv in LEVELS:
            for r in range(REPEATS):
                out.append(level_summary(variant, lv, r))
                expected[(variant, lv, r)] = "ok"
        return out

    paths.append(write_cell(root, "baseline", "ok", ok_levels("baseline")))
    paths.append(write_cell(root, "cb", "ok", ok_levels("cb")))

    boot_levels = []
    for lv in LEVELS:
        for r in range(REPEATS):
            boot_levels.append(level_summary("bootfail", lv, r, "not_run"))
            expected[("bootfail", lv, r)] = "not_run"
    boot_failure = {
        "stage": "boot",
        "cause": "boot_timeout",
        "level": None,
        "repeat": None,
        "message": "server not ready after 600 s",
        "log_tail": ["INFO loading model", EVIL, "WARNING still loading"],
    }
    paths.append(write_cell(root, "bootfail", "failed", boot_levels, boot_failure))

    mid_levels = []
    for lv in LEVELS:
        for r in range(REPEATS):
            if lv < 256:
                status = "ok"
                mid_levels.append(level_summary("midfail", lv, r))
            elif (lv, r) == (256, 0):
                status = "failed"
                mid_levels.append(level_summary("midfail", lv, r, "failed", "died"))
            else:
                status = "not_run"
                mid_levels.append(level_summary("midfail", lv, r, "not_run"))
            expected[("midfail", lv, r)] = status
    mid_failure = {
        "stage": "level",
        "cause": "died",
        "level": 256,
        "repeat": 0,
        "message": "server exited with code -9 during level 256",
        "log_tail": ["Killed"],
    }
    paths.append(write_cell(root, "midfail", "failed", mid_levels, mid_failure, client_version="0"))
    return paths, expected


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
