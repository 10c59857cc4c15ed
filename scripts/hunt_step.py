"""hunt_step: the hunt replayed over the boots earlier steps asked for
(servesweep.hunt_run.steps)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.hunt_run.steps import step_record  # noqa: E402
from servesweep.joblog import job_logger  # noqa: E402
from servesweep.jsonfile import read_json, write_json  # noqa: E402
from servesweep.sweep.config import load  # noqa: E402
from servesweep.sweep.layout import Paths  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    step = int(sm.wildcards.step)
    previous = read_json(Path(sm.input.previous)) if step else None
    record = step_record(load(sm.config), Paths(Path.cwd()), step, previous)
    write_json(sm.output[0], record, indent=1)
    log(
        f"step {step}: round {record['round']}, {len(record['observed'])} boots observed, "
        f"{len(record['needed'])} needed next; done={record['done']} {record['stop_reason']}"
    )
