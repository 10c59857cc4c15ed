"""download_model: materialize a model (synthetic, hf or path) and its file manifest."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.resources.models import materialize  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    manifest = materialize(sm.wildcards.model, dict(sm.params.source), Path(sm.output[0]).parent)
    log(
        f"model {sm.wildcards.model!r}: {len(manifest['files'])} files, "
        f"{manifest['total_bytes']} bytes at {manifest['path']}"
    )
