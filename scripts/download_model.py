"""download_model: materialize a model (synthetic, hf or path) and its file manifest; a
model that cannot be had is a manifest too (status failed), so the sweep goes on."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.resources.models import materialize  # noqa: E402
from servesweep.resources.setup import run_setup, split_params  # noqa: E402

sm = snakemake  # noqa: F821
name, dest = sm.wildcards.model, Path(sm.output[0]).parent
source, attempt = split_params(sm.params.source)
with job_logger(sm.log[0]) as log:
    manifest = run_setup(
        "model",
        name,
        lambda: materialize(name, source, dest),
        dest,
        Path(sm.log[0]),
        attempt,
        identity={"model": name, "source": source},
        log=log,
        config=source,
    )
    if manifest["status"] == "ok":
        log(
            f"model {name!r}: {len(manifest['files'])} files, "
            f"{manifest['total_bytes']} bytes at {manifest['path']}"
        )
