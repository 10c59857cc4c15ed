"""run_cell: launch one server, benchmark every level, tear down; failures are results."""

import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.run.cell import run_cell  # noqa: E402
from servesweep.run.scheduler import job_deadline  # noqa: E402
from servesweep.server.procs import end_with_parent  # noqa: E402
from servesweep.sweep.config import load, spec_from_json  # noqa: E402
from servesweep.sweep.layout import Paths  # noqa: E402

STARTED = time.time()


def _terminate(signum, frame):
    # SIGTERM (Snakemake shutting down, SLURM preemption) unwinds through the
    # teardown in run_cell's finally block.
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _terminate)
# Snakemake SIGKILLed (or a SLURM step's parent gone): end as on SIGTERM, no boot left.
end_with_parent()

sm = snakemake  # noqa: F821
sweep = load(sm.config)
# By layout, not sm.input: a boot that stands for its manifests may take none as inputs.
paths = Paths(Path("."))
with job_logger(sm.log.job) as log:
    run_cell(
        spec=spec_from_json(sm.params.spec),
        stack_manifest=json.loads(paths.stack_manifest(sm.wildcards.stack).read_text()),
        model_manifest=json.loads(paths.model_manifest(sm.wildcards.model).read_text()),
        out_dir=Path(sm.output.cell).parent,
        server_log=Path(sm.log.server),
        log=log,
        attempt=int(sm.params.attempt),
        repeat=int(sm.wildcards.repeat),
        # When SLURM (or the `runtime` resource) will end this job; not a param either.
        deadline=job_deadline(sm.resources.get("runtime"), STARTED),
        # Not a param: tuning retries must not rerun measured cells.
        boot_retries=sweep.retries["boot"],
        # Which GPUs the server gets on this host; not a param either.
        gpu_slots=sweep.gpu_slots,
    )
