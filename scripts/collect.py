"""collect: every cell's records into the tidy results/summary.csv."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.results.collect import collect  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    table = collect([Path(p) for p in sm.input], Path(sm.output[0]))
    log(f"{len(table)} rows from {len(sm.input)} cells")
