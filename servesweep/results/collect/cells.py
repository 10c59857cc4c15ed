"""Gather every boot's cell.json into the tidy results/summary.csv (see docs/records.md).

One row per cell × boot (repeat) × level × measurement within the boot. A level summary of
an older metric definition is recomputed from its stored requests first
(`servesweep.results.collect.recompute`), and every row carries its validity gates
(`servesweep.results.collect.validity`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from servesweep.capacity.goodput import level_goodput
from servesweep.records import CellRecord
from servesweep.results.collect.derived import prefix_cache_hit_rate
from servesweep.results.collect.recompute import needs_recompute, recompute
from servesweep.results.collect.validity import invalid_reasons
from servesweep.sweep.layout import level_name

# Cell-level columns, first in every row.
CELL_COLUMNS = [
    "stack",
    "model",
    "variant",
    "repeat",
    "engine",
    "spec_hash",
    "client_version",
    "attempt",
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
    "in_boot",
    "status",
    "cause",
    "valid",
    "invalid_reasons",
    "metrics_version",
    "recomputed_from",
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
TEXT_COLUMNS = [c for c in CELL_COLUMNS if c not in ("boot_s", "repeat", "attempt")] + [
    "status",
    "cause",
    "errors",
    "started_at",
    "invalid_reasons",
    "metrics_version",
    "recomputed_from",
]

CELL_STATUSES = ("ok", "failed")
LEVEL_STATUSES = ("ok", "failed", "not_run")


def load_cell(path: Path) -> CellRecord:
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
        value = lev.get("level")
        if isinstance(value, bool) or not (isinstance(value, int | float) or value == "inf"):
            return f"levels[{i}].level missing or not a number"
        if lev.get("status") not in LEVEL_STATUSES:
            return f"levels[{i}].status is {lev.get('status')!r}"
    return None


def _flat(value):
    # Lists and dicts go into one CSV cell as JSON so they survive a round trip.
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def _level_rows(cell: dict, plan: list[tuple[int, int]] | None) -> list[dict]:
    """The boot's level summaries; every planned (level, in_boot) gets a row, even one the
    writer left out (as not_run)."""
    rows = [dict(lev) for lev in cell.get("levels") or []]
    for r in rows:
        r.setdefault("in_boot", 0)
    if plan is not None:
        have = {(r["level"], r["in_boot"]) for r in rows}
        rows += [
            {"level": lv, "in_boot": i, "status": "not_run"}
            for lv, i in plan
            if (lv, i) not in have
        ]
        order = {key: n for n, key in enumerate(plan)}
        rows.sort(key=lambda r: order.get((r["level"], r["in_boot"]), len(order)))
    if not rows:
        # Keep a boot that never reached a level visible in the table.
        rows = [{"status": "not_run"}]
    return rows


class Analysis(NamedTuple):
    """What collect needs of the sweep: its levels, boots' plan and how to judge levels."""

    levels: list[int] | None = None
    repeats_in_boot: int = 1
    error_rate_threshold: float = 0.5
    gates: dict | None = None  # the config's `analysis` section
    slo: dict | None = None  # the config's `slo` section: goodput per level

    @property
    def plan(self) -> list[tuple[int, int]] | None:
        if self.levels is None:
            return None
        return [(lv, i) for lv in self.levels for i in range(self.repeats_in_boot)]


DEFAULT_GATES = {"max_failed_fraction": 0.01, "min_steady_fraction": 0.2}


def _checked(cell: dict, lev: dict, levels_dir: Path, analysis: Analysis) -> dict:
    """A level summary recomputed where its definition is older, with its gates."""
    if needs_recompute(lev) and "level" in lev:
        name = level_name(lev["level"], lev.get("in_boot", 0))
        fresh = recompute(lev, levels_dir / f"{name}.requests.jsonl", analysis.error_rate_threshold)
        if fresh is not None:
            lev = fresh
    if lev.get("status") == "ok":
        lev = {**lev, "prefix_cache_hit_rate": prefix_cache_hit_rate(lev)}
    if analysis.slo and lev.get("status") == "ok" and "level" in lev:
        name = level_name(lev["level"], lev.get("in_boot", 0))
        path = levels_dir / f"{name}.requests.jsonl"
        lev = {**lev, **level_goodput(path, analysis.slo, lev.get("duration_s"))}
    reasons = invalid_reasons(lev, cell.get("client_version"), analysis.gates or DEFAULT_GATES)
    return {**lev, "valid": not reasons, "invalid_reasons": "; ".join(reasons) or None}


def load_cells(cell_paths: list[Path]) -> list[tuple[CellRecord, Path]]:
    """Every cell.json, read and checked once, beside its path."""
    return [(load_cell(path), Path(path)) for path in cell_paths]


def checked_levels(cell: dict, cell_dir: Path, analysis: Analysis) -> list[dict]:
    """One boot's level summaries as summary.csv has them: every planned level (not_run
    where missing), recomputed where older, with goodput and their validity gates."""
    rows = _level_rows(cell, analysis.plan)
    return [_checked(cell, lev, Path(cell_dir) / "levels", analysis) for lev in rows]


def collect(
    cell_paths: list[Path], out_csv: Path, analysis: Analysis | None = None
) -> pd.DataFrame:
    """Write summary.csv from the cell.json files (collect_cells)."""
    return collect_cells(load_cells(cell_paths), out_csv, analysis)


def collect_cells(
    cells: list[tuple[CellRecord, Path]], out_csv: Path, analysis: Analysis | None = None
) -> pd.DataFrame:
    """Write summary.csv: one row per cell × boot × level × in-boot measurement; return it.

    `analysis.levels` (the configured levels) adds not_run rows for any level a boot lacks;
    levels a boot has beyond the list are kept.
    """
    analysis = analysis or Analysis()
    level_extra: list[str] = []
    stack_extra: list[str] = []
    rows = []
    for cell, path in cells:
        failure = cell.get("failure") or {}
        base = {
            "stack": cell["stack"],
            "model": cell["model"],
            "variant": cell["variant"],
            "repeat": cell.get("repeat", 0),
            "engine": cell.get("engine"),
            "spec_hash": cell.get("spec_hash"),
            "client_version": cell.get("client_version"),
            "attempt": cell.get("attempt", 0),
            "cell_status": cell["status"],
            "failure_stage": failure.get("stage"),
            "failure_cause": failure.get("cause"),
            "boot_s": cell.get("boot_s"),
        }
        manifest = cell.get("stack_manifest") or {}
        stack_cols = {f"stack_{k}": _flat(v) for k, v in manifest.items()}
        stack_extra += [k for k in manifest if k not in STACK_FIELDS and k not in stack_extra]
        for lev in _level_rows(cell, analysis.plan):
            lev = _checked(cell, lev, Path(path).parent / "levels", analysis)
            lev.pop("repeat", None)  # the boot's own, in base
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
    """Read summary.csv back with text columns kept as text, flags as booleans."""
    header = pd.read_csv(path, nrows=0).columns
    text = [c for c in header if c in TEXT_COLUMNS or c.startswith("stack_")]
    df = pd.read_csv(path, dtype={c: str for c in text})
    for flag in ("client_bound", "valid"):
        if flag in df:
            df[flag] = df[flag].map(lambda v: str(v).lower() == "true")
    return df
