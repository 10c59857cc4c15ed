"""plan: every cell's state, launch command and estimated time; launches nothing."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.hunt_run.plan import write_hunt_plan  # noqa: E402
from servesweep.joblog import job_logger  # noqa: E402
from servesweep.sweep.config import load  # noqa: E402
from servesweep.sweep.layout import Paths  # noqa: E402
from servesweep.sweep.plan_text import write_plan  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    sweep = load(sm.config)
    text = (write_hunt_plan if sweep.hunt is not None else write_plan)(
        sweep,
        Paths(Path.cwd()),
        list(sm.params.sweep_files),
        bool(sm.params.is_default),
        sm.output.txt,
        sm.output.json,
    )
    print(text, flush=True)
    log(f"wrote {sm.output.txt} and {sm.output.json}")
