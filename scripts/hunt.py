"""hunt: results/hunt/hunt.json, the path, the final configuration and the ledger."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.hunt_run.steps import hunt_record  # noqa: E402
from servesweep.joblog import job_logger  # noqa: E402
from servesweep.jsonfile import read_json, write_json  # noqa: E402
from servesweep.sweep.config import load  # noqa: E402
from servesweep.sweep.layout import Paths  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    record = hunt_record(load(sm.config), Paths(Path.cwd()), read_json(Path(sm.input[-1])))
    write_json(sm.output[0], record, indent=1)
    log(f"{record['stop_reason']}: final {record['final']['variant']}, spent {record['spent']}")
