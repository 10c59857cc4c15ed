"""Gather every boot's cell.json into the tidy results/summary.csv (see docs/records.md).

One row per cell × boot (repeat) × level × measurement within the boot. A level summary of
an older metric definition is recomputed from its stored requests first
(`servesweep.results.collect.recompute`), and every row carries its validity gates
(`servesweep.results.collect.validity`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, cast

import pandas as pd

from servesweep.capacity.goodput import level_goodput
from servesweep.level import Level
from servesweep.records import (
    CellRead,
    CellRecord,
    FailureRead,
    LevelColumns,
    LevelGates,
    LevelRead,
    LevelSummary,
    StackColumns,
    SummaryCell,
)
from servesweep.results.collect.derived import prefix_cache_hit_rate
from servesweep.results.collect.recompute import needs_recompute, recompute
from servesweep.results.collect.validity import invalid_reasons
from servesweep.sweep.analysis import AnalysisSettings
from servesweep.sweep.layout import level_name

# summary.csv's columns, declared once in servesweep.records: the cell's first, then the level
# summary's with collect's gates after its status and cause (any other level field found is
# appended after these, so nothing is lost), then the stack manifest's, prefixed `stack_`.
CELL_COLUMNS = list(SummaryCell.__annotations__)
_LEVEL = list(LevelColumns.__annotations__)
_GATES_AT = _LEVEL.index("cause") + 1
LEVEL_FIELDS = [*_LEVEL[:_GATES_AT], *LevelGates.__annotations__, *_LEVEL[_GATES_AT:]]
STACK_FIELDS = list(StackColumns.__annotations__)

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

LevelJson = int | float | str  # a level as records write it (Level.json)

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


def _cell_problem(cell: Any) -> str | None:
    if not isinstance(cell, dict):
        return f"top level is {type(cell).__name__}, expected an object"
    for key in ("stack", "model", "variant"):
        if not isinstance(cell.get(key), str) or not cell[key]:
            return f"'{key}' missing or not a non-empty string"
    c = CellRead.of(cell, levels=[])
    if c.status not in CELL_STATUSES:
        return f"'status' is {c.status!r}, expected one of {', '.join(CELL_STATUSES)}"
    failure = c.failure
    if failure is not None and not isinstance(failure, dict):
        return "'failure' must be null or an object"
    for key in ("stack_manifest", "model_manifest"):
        if cell.get(key) is not None and not isinstance(cell[key], dict):
            return f"'{key}' must be null or an object"
    levels = c.levels
    if not isinstance(levels, list):
        return "'levels' must be a list"
    for i, lev in enumerate(levels):
        if not isinstance(lev, dict):
            return f"levels[{i}] is not an object"
        read = LevelRead.of(lev)
        value, status = read.level, read.status
        if isinstance(value, bool) or not (isinstance(value, int | float) or value == "inf"):
            return f"levels[{i}].level missing or not a number"
        if status not in LEVEL_STATUSES:
            return f"levels[{i}].status is {status!r}"
    return None


def _flat(value: Any) -> Any:
    # Lists and dicts go into one CSV cell as JSON so they survive a round trip.
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def _level_rows(cell: CellRecord, plan: list[tuple[LevelJson, int]] | None) -> list[LevelSummary]:
    """The boot's level summaries; every planned (level, in_boot) gets a row, even one the
    writer left out (as not_run)."""
    rows = [LevelSummary(**lev) for lev in CellRead.of(cell).levels or []]
    for r in rows:
        r.setdefault("in_boot", 0)
    if plan is not None:
        have = {(r["level"], r["in_boot"]) for r in rows}
        rows += [
            LevelSummary(level=lv, in_boot=i, status="not_run")
            for lv, i in plan
            if (lv, i) not in have
        ]
        order = {key: n for n, key in enumerate(plan)}
        rows.sort(key=lambda r: order.get((r["level"], r["in_boot"]), len(order)))
    if not rows:
        # Keep a boot that never reached a level visible in the table.
        rows = [LevelSummary(status="not_run")]
    return rows


class Analysis(NamedTuple):
    """What collect needs of the sweep: its levels, boots' plan and how to judge levels."""

    levels: list[Level] | None = None  # the configured levels
    repeats_in_boot: int = 1
    error_rate_threshold: float = 0.5
    gates: AnalysisSettings = AnalysisSettings()  # the config's `analysis` section
    slo: dict | None = None  # the config's `slo` section: goodput per level

    @property
    def plan(self) -> list[tuple[LevelJson, int]] | None:
        """Every (level, in_boot) a boot measures, the level as its summary writes it."""
        if self.levels is None:
            return None
        return [(lv.json, i) for lv in self.levels for i in range(self.repeats_in_boot)]


def _checked(
    cell: CellRecord, lev: LevelSummary, levels_dir: Path, analysis: Analysis
) -> dict[str, Any]:
    """A level summary recomputed where its definition is older, with its gates."""
    if needs_recompute(lev) and "level" in lev:
        name = level_name(lev["level"], LevelRead.of(lev).in_boot)
        fresh = recompute(lev, levels_dir / f"{name}.requests.jsonl", analysis.error_rate_threshold)
        if fresh is not None:
            lev = fresh
    read = LevelRead.of(lev)
    row = cast(dict[str, Any], lev)  # the summary, with collect's columns as they are added
    if read.status == "ok":
        row = {**row, "prefix_cache_hit_rate": prefix_cache_hit_rate(lev)}
    if analysis.slo and read.status == "ok" and "level" in row:
        path = levels_dir / f"{level_name(read.level, read.in_boot)}.requests.jsonl"
        row = {**row, **level_goodput(path, analysis.slo, read.duration_s)}
    client_version = CellRead.of(cell).client_version
    reasons = invalid_reasons(row, client_version, AnalysisSettings.of(analysis.gates))
    return {**row, **LevelGates(valid=not reasons, invalid_reasons="; ".join(reasons) or None)}


def load_cells(cell_paths: list[Path]) -> list[tuple[CellRecord, Path]]:
    """Every cell.json, read and checked once, beside its path."""
    return [(load_cell(path), Path(path)) for path in cell_paths]


def checked_levels(cell: CellRecord, cell_dir: Path, analysis: Analysis) -> list[dict]:
    """One boot's level summaries as summary.csv has them: every planned level (not_run
    where missing), recomputed where older, with goodput and their validity gates."""
    rows = _level_rows(cell, analysis.plan)
    return [_checked(cell, lev, Path(cell_dir) / "levels", analysis) for lev in rows]


def summary_cell(cell: CellRecord) -> SummaryCell:
    """The cell's columns of its rows."""
    c = CellRead.of(cell)
    failure = FailureRead.of(c.failure)
    return SummaryCell(
        stack=cell["stack"],
        model=cell["model"],
        variant=cell["variant"],
        repeat=c.repeat,
        engine=c.engine,
        spec_hash=c.spec_hash,
        client_version=c.client_version,
        attempt=c.attempt,
        cell_status=cell["status"],
        failure_stage=failure.stage,
        failure_cause=failure.cause,
        boot_s=c.boot_s,
        machine=(c.machine or {}).get("key"),
    )


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
        base = summary_cell(cell)
        manifest = CellRead.of(cell).stack_manifest or {}
        stack_cols = {f"stack_{k}": _flat(v) for k, v in manifest.items()}
        stack_extra += [k for k in manifest if k not in STACK_FIELDS and k not in stack_extra]
        for lev in _level_rows(cell, analysis.plan):
            row = _checked(cell, lev, Path(path).parent / "levels", analysis)
            row.pop("repeat", None)  # the boot's own, in base
            level_extra += [k for k in row if k not in LEVEL_FIELDS and k not in level_extra]
            rows.append(base | {k: _flat(v) for k, v in row.items()} | stack_cols)

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
