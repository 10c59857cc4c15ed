"""What one run_cell job is given: the cell's spec, its resources, where it writes, which
boot and attempt, and when it will be killed (one named argument for servesweep.run.cell,
servesweep.run.boot and servesweep.run.record)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servesweep.records import CellSpec, ModelManifest, StackManifest


@dataclass(frozen=True)
class CellJob:
    spec: CellSpec
    stack_manifest: StackManifest
    model_manifest: ModelManifest
    out_dir: Path  # results/cells/{stack}/{model}/{variant}/r{repeat}
    server_log: Path
    attempt: int = 0  # counts reruns of a failed boot
    repeat: int = 0  # which boot of the cell
    deadline: float | None = None  # when the job will be killed (time.time); None: no limit
