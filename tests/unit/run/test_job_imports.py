"""A boot job's start-up and a Snakefile's parse leave scipy and pandas unloaded: every
boot of every sweep, and every Snakemake call (each SLURM job parses it again), pays for
what they import (scipy.stats alone was ~0.65 s a boot through servesweep.sweep.config ->
servesweep.sweep.stages; the parse took ~1 s more through the hunt's steps and the stage
rule's records: a dry run of the default sweep 2.1 s, 1.4 s without)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# scripts/run_cell.py's own imports from the package.
RUN_CELL_IMPORTS = """
from servesweep.joblog import job_logger
from servesweep.run.cell import run_cell
from servesweep.run.scheduler import job_deadline
from servesweep.server.procs import end_with_parent
from servesweep.sweep.config import load, spec_from_json
from servesweep.sweep.layout import Paths
"""


def loaded_after(imports: str) -> str:
    code = imports + "\nimport sys; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_boot_job_does_not_import_scipy_or_pandas():
    loaded = loaded_after(RUN_CELL_IMPORTS)
    assert "'scipy'" not in loaded and "'pandas'" not in loaded, loaded


def test_a_snakefile_parse_does_not_import_scipy_or_pandas():
    # The package imports at the top of rules/common.smk (multi-line ones included), as
    # Snakemake runs them on every parse.
    common = (ROOT / "rules" / "common.smk").read_text()
    imports = re.findall(r"^from servesweep[\w.]* import (?:\([^)]*\)|.*)$", common, re.M)
    assert len(imports) >= 5, imports
    loaded = loaded_after("\n".join(imports))
    assert "'servesweep'" in loaded
    assert "'scipy'" not in loaded and "'pandas'" not in loaded, loaded


def test_the_imports_listed_are_run_cells_own():
    script = (ROOT / "scripts" / "run_cell.py").read_text()
    for line in RUN_CELL_IMPORTS.strip().splitlines():
        assert line in script, f"scripts/run_cell.py no longer has: {line}"
