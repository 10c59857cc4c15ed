"""The stored request records behind the summary: what the percentile verdicts resample."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from servesweep.level import Level, parse_value
from servesweep.results.collect.recompute import read_requests
from servesweep.sweep.layout import level_name


class RequestStore:
    """Request values of valid measurements, read once per file.

    `cell_dirs` maps (stack, model, variant, repeat) to the boot's directory (where its
    cell.json is); `summary` says which (level, in_boot) measurements of a boot are valid."""

    def __init__(self, cell_dirs: dict[tuple, Path], summary: pd.DataFrame):
        self.cell_dirs = cell_dirs
        self.valid: dict[tuple, list[int]] = {}
        ok = summary[summary["valid"] & summary["level"].notna()]
        for row in ok[["stack", "model", "variant", "repeat", "level", "in_boot"]].itertuples(
            index=False
        ):
            key = (row.stack, row.model, row.variant, int(row.repeat), parse_value(row.level))
            self.valid.setdefault(key, []).append(int(row.in_boot))
        self._cache: dict[Path, list[dict]] = {}

    def _records(self, path: Path) -> list[dict]:
        if path not in self._cache:
            self._cache[path] = read_requests(path) or []
        return self._cache[path]

    def __call__(
        self, cell: tuple, repeat: int, level: Level | float | int | str, field: str
    ) -> list[float]:
        """`field` of every completed, measured request of the boot's valid measurements of
        the level."""
        directory = self.cell_dirs.get((*cell, repeat))
        if directory is None:
            return []
        values: list[float] = []
        for in_boot in self.valid.get((*cell, repeat, level), []):
            path = Path(directory) / "levels" / f"{level_name(level, in_boot)}.requests.jsonl"
            values += [
                r[field]
                for r in self._records(path)
                if r.get("ok") and not r.get("warmup") and r.get(field) is not None
            ]
        return values
