"""Every shipped sweep's cells keep their spec hashes (the identity Snakemake reruns on).

`spec_hashes.json` beside this file was dumped from main before the cell spec got its type
(`python tests/unit/sweep/test_spec_hashes.py --dump` writes it again; do that only for a
change meant to rerun the cells). A hunt has no fixed cells: its declared variants on every
stack and model stand in, with its start and each single-candidate composition on the hunt's
own stack.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from servesweep.sweep.config import load_file, spec_hash

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).with_name("spec_hashes.json")
SWEEPS = [ROOT / "config" / "config.yaml", *sorted((ROOT / "config" / "examples").glob("*.yaml"))]


def cells(sweep) -> list[tuple[str, str, str]]:
    if sweep.hunt is None:
        return sweep.cells
    h = sweep.hunt
    declared = list(itertools.product(sweep.stacks, sweep.models, sweep.variants))
    start = h.spec.start.name
    composed = [start, *(f"{start}+{c.name}" for c in h.spec.candidates)]
    return declared + [(h.stack_of(v), h.model, v) for v in composed]


def hashes(path: Path) -> dict[str, str]:
    sweep = load_file(path)
    return {"/".join(cell): spec_hash(sweep.spec(*cell)) for cell in cells(sweep)}


def all_hashes() -> dict[str, dict[str, str]]:
    return {str(path.relative_to(ROOT)): hashes(path) for path in SWEEPS}


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_cell_keeps_its_spec_hash(path):
    golden = json.loads(GOLDEN.read_text())[str(path.relative_to(ROOT))]
    assert golden, "a sweep with no cells compares nothing"
    assert hashes(path) == golden


def test_every_shipped_sweep_is_compared():
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(
        str(p.relative_to(ROOT)) for p in SWEEPS
    )


if __name__ == "__main__" and sys.argv[1:] == ["--dump"]:
    GOLDEN.write_text(json.dumps(all_hashes(), indent=1, sort_keys=True) + "\n")
