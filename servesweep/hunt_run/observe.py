"""What a hunt's boots measured, read from their records on disk.

Per boot (`results/cells/<stack>/<model>/<variant>/r<boot>/`): the objective metric at each
counted level, the mean over its in-boot measurements, from the level summaries as collect
sees them (`checked_levels`: recomputed, goodput, validity gates); a boot that failed at
launch or boot, or at a counted level, is a failure with its cause; a counted level that
fails a validity gate gives no value (the state machine drops the arm as invalid there).
Whether it changed answers: its correctness.json against the start variant's first boot's,
by `servesweep.correctness.compare.compare_records`. And its cost: wall time × GPUs.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, cast

from servesweep.correctness.compare import compare_records
from servesweep.hunt.state import BootKey, BootResult
from servesweep.jsonfile import read_json
from servesweep.level import Level, parse_value
from servesweep.records import CellRecord
from servesweep.results.collect.cells import checked_levels
from servesweep.results.judge.step import analysis_of
from servesweep.sweep.config import Sweep
from servesweep.sweep.hunt import CAPACITY, SweepHunt
from servesweep.sweep.layout import Paths


class BootCost(NamedTuple):
    wall_s: float
    gpus: int
    gpu_hours: float


def cell_path(sweep: Sweep, paths: Paths, key: BootKey) -> Path:
    hunt = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    return paths.cell_json(hunt.stack_of(key.variant), hunt.model, key.variant, key.boot)


def _seconds(cell: CellRecord) -> float:
    try:
        start = dt.datetime.fromisoformat(cell["started_at"])
        end = dt.datetime.fromisoformat(cast(str, cell["finished_at"]))  # None: TypeError
    except (KeyError, TypeError, ValueError):
        return 0.0
    return max((end - start).total_seconds(), 0.0)


def boot_cost(cell: CellRecord) -> BootCost:
    """What the boot cost: its wall time (started_at → finished_at) × the GPUs it held."""
    gpus = int((cell.get("spec") or {}).get("gpus") or 0)
    wall = _seconds(cell)
    return BootCost(wall, gpus, wall * gpus / 3600)


def _failure(cell: CellRecord) -> str:
    f: Mapping[str, Any] = cell.get("failure") or {}
    where = f.get("stage") or "?"
    if f.get("level") is not None:
        where += f" at level {Level.parse(f['level']).json}"
    return f"{f.get('cause') or 'failed'} ({where})"


def _changed(sweep: Sweep, variant: str, record: dict | None, reference: dict | None) -> bool:
    """Whether the boot's greedy answers differ from the start's (unknown: False)."""
    if not record or not reference or variant == cast(SweepHunt, sweep.hunt).spec.start.name:
        return False
    found = compare_records(
        record,
        reference,
        sweep.analysis.correctness_threshold,
        sweep.must_match(variant),
    )
    return any(m.changes_outputs for m in found)


def boot_result(
    sweep: Sweep, cell: CellRecord, cell_dir: Path, reference: dict | None
) -> BootResult:
    """One boot's observation (`reference`: the start's correctness.json)."""
    hunt = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    failure: Mapping[str, Any] = cell.get("failure") or {}
    if cell.get("status") == "failed" and failure.get("stage") in (
        "launch",
        "boot",
        None,
    ):
        return BootResult(failure=_failure(cell))
    if hunt.metric == CAPACITY:  # the search's result (None: nothing met the SLO)
        capacity: Mapping[str, Any] = cell.get("capacity") or {}
        value = capacity.get("value")
        values = {CAPACITY: float(value)} if value is not None else {}
        record = read_json(Path(cell_dir) / "correctness.json")
        return BootResult(values, None, _changed(sweep, cell["variant"], record, reference))
    by_level: dict = {}
    for lev in checked_levels(cell, cell_dir, analysis_of(sweep)):
        if "level" not in lev:
            continue
        by_level.setdefault(parse_value(lev["level"]), []).append(lev)
    values = {}
    for level in hunt.levels:
        rows = by_level.get(level) or []
        if not rows or any(r.get("status") != "ok" for r in rows):
            bad: Mapping[str, Any] = next((r for r in rows if r.get("status") != "ok"), {})
            cause = bad.get("cause") or failure.get("cause") or "not run"
            return BootResult(failure=f"{cause} (level {Level.parse(level).json})")
        measured = [r.get(hunt.metric) for r in rows if r.get("valid")]
        measured = [float(v) for v in measured if v is not None and math.isfinite(float(v))]
        if len(measured) == len(rows):
            values[level] = sum(measured) / len(measured)
    record = read_json(Path(cell_dir) / "correctness.json")
    return BootResult(values, None, _changed(sweep, cell["variant"], record, reference))


def read_cells(sweep: Sweep, paths: Paths, keys: Iterable[BootKey]) -> dict[BootKey, CellRecord]:
    """The records of the boots among `keys` that have one, each read once."""
    found = {}
    for key in map(BootKey._make, keys):
        cell = cast("CellRecord | None", read_json(cell_path(sweep, paths, key)))
        if cell is not None:
            found[key] = cell
    return found


def observations(
    sweep: Sweep, paths: Paths, keys: Iterable[BootKey]
) -> tuple[dict[BootKey, BootResult], dict[BootKey, BootCost]]:
    """The observations and costs of the boots whose records exist among `keys`."""
    return observe_cells(sweep, paths, read_cells(sweep, paths, keys))


def observe_cells(
    sweep: Sweep, paths: Paths, cells: Mapping[BootKey, CellRecord]
) -> tuple[dict[BootKey, BootResult], dict[BootKey, BootCost]]:
    """The observations and costs of boots whose records were read (`read_cells`)."""
    hunt = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    start = BootKey(hunt.spec.start.name, 0)
    reference = read_json(cell_path(sweep, paths, start).parent / "correctness.json")
    obs, costs = {}, {}
    for key, cell in cells.items():
        obs[key] = boot_result(sweep, cell, cell_path(sweep, paths, key).parent, reference)
        costs[key] = boot_cost(cell)
    return obs, costs
