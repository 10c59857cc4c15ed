"""repeats_stage: which configurations get another boot (servesweep.results.judge.stages)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.jsonfile import read_json, write_json  # noqa: E402
from servesweep.results.judge.stages import first_record, stage_record  # noqa: E402
from servesweep.sweep.config import load  # noqa: E402
from servesweep.sweep.layout import Paths  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    step = int(sm.wildcards.step)
    sweep = load(sm.config)
    if step == 0:
        record = first_record(sweep)
    else:
        record = stage_record(sweep, Paths(Path.cwd()), step, read_json(Path(sm.input.previous)))
    write_json(sm.output[0], record, indent=1)
    open_now = [k for k, d in record["decisions"].items() if d["outcome"] == "open"]
    log(
        f"stage step {step}: {sum(record['boots'].values())} boots measured, "
        f"{sum(record['next'].values())} asked; open: {', '.join(open_now) or 'none'}; "
        f"done={record['done']}"
    )
