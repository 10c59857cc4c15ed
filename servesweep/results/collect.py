"""Gather every cell's cell.json into the tidy results/summary.csv (see docs/records.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

# Cell-level columns, first in every row.
CELL_COLUMNS = [
    "stack",
    "model",
    "variant",
    "engine",
    "spec_hash",
    "client_version",
    "cell_status",
    "failure_stage",
    "failure_cause",
    "boot_s",
]

# Level-summary fields in the order docs/records.md lists them; unknown extra fields
# found in the files are appended after these so nothing is lost.
_LATENCY = [
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2el", "chunk_gap")
    for stat in ("mean", "median", "std", "p90", "p99")
]
LEVEL_FIELDS = [
    "level",
    "repeat",
    "status",
    "cause",
    "num_prompts",
    "warmup",
    "completed",
    "failed",
    "errors",
    "duration_s",
    "steady_window_s",
    "total_input_tokens",
    "total_output_tokens",
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
    "steady_output_throughput",
    "steady_total_token_throughput",
    "peak_output_throughput",
    "achieved_concurrency",
    "concurrency",
    "client_bound",
    *_LATENCY,
    "retokenized_mismatch",
    "client_cpu_s",
    "client_cpu_share",
    "client_workers",
    "client_max_loop_lag_ms",
    "energy_j",
    "joules_per_output_token",
    "started_at",
]

STACK_FIELDS = [
    "stack",
    "kind",
    "python",
    "python_version",
    "torch",
    "torch_cuda",
    "transformers",
    "sglang",
    "vllm",
    "flashinfer",
    "nccl",
    "cpu_model",
    "gpus",
    "driver",
    "nvcc",
    "topology",
    "freeze_sha256",
    "freeze_count",
    "installer",
    "built_at",
    "build_s",
]

# Columns that must stay strings when summary.csv is read back (a spec hash of all
# digits or a client version "1" would otherwise turn into numbers).
TEXT_COLUMNS = [c for c in CELL_COLUMNS if c != "boot_s"] + [
    "status",
    "cause",
    "errors",
    "started_at",
]

CELL_STATUSES = ("ok", "failed")
LEVEL_STATUSES = ("ok", "failed", "not_run")


def load_cell(path: Path) -> dict:
    """Read and check one cell.json; raise ValueError naming the file on any problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"{path}: cannot read cell record: {e.strerror or e}") from e
    try:
        cell = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: invalid JSON: {e.msg} at line {e.lineno} col {e.colno}") from e
    problem = _cell_problem(cell)
    if problem:
        raise ValueError(f"{path}: invalid cell record: {problem}")
    return cell


def _cell_problem(cell) -> str | None:
    if not isinstance(cell, dict):
        return f"top level is {type(cell).__name__}, expected an object"
    for key in ("stack", "model", "variant"):
        if not isinstance(cell.get(key), str) or not cell[key]:
            return f"'{key}' missing or not a non-empty string"
    if cell.get("status") not in CELL_STATUSES:
        return f"'status' is {cell.get('status')!r}, expected one of {', '.join(CELL_STATUSES)}"
    failure = cell.get("failure")
    if failure is not None and not isinstance(failure, dict):
        return "'failure' must be null or an object"
    for key in ("stack_manifest", "model_manifest"):
        if cell.get(key) is not None and not isinstance(cell[key], dict):
            return f"'{key}' must be null or an object"
    levels = cell.get("levels", [])
    if not isinstance(levels, list):
        return "'levels' must be a list"
    for i, lev in enumerate(levels):
        if not isinstance(lev, dict):
            return f"levels[{i}] is not an object"
        if not isinstance(lev.get("level"), int) or isinstance(lev.get("level"), bool):
            return f"levels[{i}].level missing or not an integer"
        if lev.get("status") not in LEVEL_STATUSES:
            return f"levels[{i}].status is {lev.get('status')!r}"
    return None


def _flat(value):
    # Lists and dicts go into one CSV cell as JSON so they survive a round trip.
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def _level_rows(cell: dict, levels: list[int] | None, repeats: list[int]) -> list[dict]:
    rows = [dict(lev) for lev in cell.get("levels") or []]
    for r in rows:
        r.setdefault("repeat", 0)
    if levels is not None:
        # Every configured (level, repeat) gets a row, even if the writer left it out.
        have = {(r["level"], r["repeat"]) for r in rows}
        for level in levels:
            for rep in repeats:
                if (level, rep) not in have:
                    rows.append({"level": level, "repeat": rep, "status": "not_run"})
        order = {lv: i for i, lv in enumerate(levels)}
        rows.sort(key=lambda r: (order.get(r["level"], len(order)), r["repeat"]))
    if not rows:
        # Keep a cell that never reached a level visible in the table.
        rows = [{"status": "not_run"}]
    return rows


def collect(cell_paths: list[Path], out_csv: Path, levels: list[int] | None = None) -> pd.DataFrame:
    """Write summary.csv: one row per cell x level x repeat; return it as a DataFrame.

    `levels` (the configured levels) adds not_run rows for any level a cell.json lacks;
    levels a cell has beyond the list are kept.
    """
    cells = [load_cell(p) for p in cell_paths]
    # Repeat indices seen anywhere stand in for the configured repeats when filling gaps.
    repeats = sorted({lev.get("repeat", 0) for c in cells for lev in c.get("levels") or []}) or [0]

    level_extra: list[str] = []
    stack_extra: list[str] = []
    rows = []
    for cell in cells:
        failure = cell.get("failure") or {}
        base = {
            "stack": cell["stack"],
            "model": cell["model"],
            "variant": cell["variant"],
            "engine": cell.get("engine"),
            "spec_hash": cell.get("spec_hash"),
            "client_version": cell.get("client_version"),
            "cell_status": cell["status"],
            "failure_stage": failure.get("stage"),
            "failure_cause": failure.get("cause"),
            "boot_s": cell.get("boot_s"),
        }
        manifest = cell.get("stack_manifest") or {}
        stack_cols = {f"stack_{k}": _flat(v) for k, v in manifest.items()}
        stack_extra += [k for k in manifest if k not in STACK_FIELDS and k not in stack_extra]
        for lev in _level_rows(cell, levels, repeats):
            level_extra += [k for k in lev if k not in LEVEL_FIELDS and k not in level_extra]
            rows.append(base | {k: _flat(v) for k, v in lev.items()} | stack_cols)

    columns = (
        CELL_COLUMNS
        + LEVEL_FIELDS
        + level_extra
        + [f"stack_{k}" for k in STACK_FIELDS + stack_extra]
    )
    df = pd.DataFrame(rows, columns=columns)
    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    return df


def read_summary(path: Path) -> pd.DataFrame:
    """Read summary.csv back with text columns kept as text and client_bound as bool."""
    header = pd.read_csv(path, nrows=0).columns
    text = [c for c in header if c in TEXT_COLUMNS or c.startswith("stack_")]
    df = pd.read_csv(path, dtype={c: str for c in text})
    if "client_bound" in df:
        df["client_bound"] = df["client_bound"].map(lambda v: str(v).lower() == "true")
    return df
