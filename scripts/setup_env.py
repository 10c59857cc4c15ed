"""setup_env: build or adopt a stack and write its manifest; a failed build is a manifest
too (status failed), so the job succeeds and the sweep goes on."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.resources.setup import run_setup, split_params  # noqa: E402
from servesweep.resources.stacks import setup_stack  # noqa: E402

sm = snakemake  # noqa: F821
name, dest = sm.wildcards.stack, Path(sm.output[0]).parent
stack, attempt = split_params(sm.params.stack)
with job_logger(sm.log[0]) as log:
    run_setup(
        "stack",
        name,
        lambda: setup_stack(name, stack, dest, log=log),
        dest,
        Path(sm.log[0]),
        attempt,
        identity={"stack": name, "kind": stack.get("kind")},
        log=log,
        config=stack,
    )
