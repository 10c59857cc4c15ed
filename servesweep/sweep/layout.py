"""Where every stage's files live, relative to the working directory (docs/records.md).

The rules spell the same patterns out (a rule file reads best with its paths in it);
tests/test_house.py checks that they agree with these.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from servesweep.level import Level, level_key

STACK_MANIFEST = "resources/stacks/{stack}/manifest.json"
MODEL_MANIFEST = "resources/models/{model}/manifest.json"
CELL_DIR = "results/cells/{stack}/{model}/{variant}/r{repeat}"
CELL_JSON = CELL_DIR + "/cell.json"
LEVELS_DIR = CELL_DIR + "/levels"
SERVER_LOG = CELL_DIR + "/server.log"
CELL_JOB_LOG = "results/logs/run_cell/{stack}/{model}/{variant}/r{repeat}.log"
SUMMARY_CSV = "results/summary.csv"
VERDICTS_CSV = "results/verdicts.csv"
REPORT_HTML = "results/report.html"


def level_name(level: Level | float | int | str, in_boot: int) -> str:
    """The stem of a level's files inside a boot's levels/ directory: L16_i0 (a
    concurrency or a rate of 16), L0.5_i0, Linf_i0. A level read back from a record may
    come in its bare JSON form."""
    return f"L{level_key(level)}_i{in_boot}"


class Paths(NamedTuple):
    """The layout under one working directory."""

    root: Path

    def cell_json(self, stack: str, model: str, variant: str, repeat: int) -> Path:
        return self.root / CELL_JSON.format(
            stack=stack, model=model, variant=variant, repeat=repeat
        )

    def stack_manifest(self, stack: str) -> Path:
        return self.root / STACK_MANIFEST.format(stack=stack)

    def model_manifest(self, model: str) -> Path:
        return self.root / MODEL_MANIFEST.format(model=model)

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def stacks(self) -> Path:
        return self.root / "resources" / "stacks"

    @property
    def models(self) -> Path:
        return self.root / "resources" / "models"

    def cell_records(self) -> list[Path]:
        """Every boot's cell.json under results/cells (of any sweep)."""
        return sorted((self.results / "cells").glob("*/*/*/r*/cell.json"))
