"""run_cell: launch one server, benchmark every level, tear down; failures are results."""

import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.cell import run_cell  # noqa: E402
from servesweep.config import load  # noqa: E402
from servesweep.joblog import job_logger  # noqa: E402


def _terminate(signum, frame):
    # SIGTERM (Snakemake shutting down, SLURM preemption) unwinds through the
    # teardown in run_cell's finally block.
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _terminate)

sm = snakemake  # noqa: F821
with job_logger(sm.log.job) as log:
    run_cell(
        spec=json.loads(sm.params.spec),
        stack_manifest=json.loads(Path(sm.input.stack).read_text()),
        model_manifest=json.loads(Path(sm.input.model).read_text()),
        out_dir=Path(sm.output.cell).parent,
        server_log=Path(sm.log.server),
        log=log,
        attempt=int(sm.params.attempt),
        # Not a param: tuning retries must not rerun measured cells.
        boot_retries=load(sm.config).retries["boot"],
    )
