"""setup_env: build or adopt a stack and write its manifest."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.resources.stacks import setup_stack  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    setup_stack(sm.wildcards.stack, sm.params.stack, Path(sm.output[0]).parent, log=log)
