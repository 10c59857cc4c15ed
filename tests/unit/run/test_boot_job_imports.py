"""A boot job's start-up: scripts/run_cell.py's imports leave scipy and pandas unloaded
(every boot of every sweep pays for what they import: scipy.stats alone was ~0.65 s a boot,
through servesweep.sweep.config -> servesweep.sweep.stages)."""

import subprocess
import sys
from pathlib import Path

# scripts/run_cell.py's own imports from the package.
RUN_CELL_IMPORTS = """
from servesweep.joblog import job_logger
from servesweep.run.cell import run_cell
from servesweep.run.scheduler import job_deadline
from servesweep.server.procs import end_with_parent
from servesweep.sweep.config import load, spec_from_json
from servesweep.sweep.layout import Paths
"""


def test_a_boot_job_does_not_import_scipy_or_pandas():
    code = RUN_CELL_IMPORTS + "import sys; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout
    assert "'scipy'" not in loaded and "'pandas'" not in loaded, loaded


def test_the_imports_listed_are_run_cells_own():
    script = (Path(__file__).resolve().parents[3] / "scripts" / "run_cell.py").read_text()
    for line in RUN_CELL_IMPORTS.strip().splitlines():
        assert line in script, f"scripts/run_cell.py no longer has: {line}"
