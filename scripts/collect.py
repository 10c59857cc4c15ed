"""collect: every boot's records into results/summary.csv, and the verdicts."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep.joblog import job_logger  # noqa: E402
from servesweep.results.judge.stages import decided_at  # noqa: E402
from servesweep.results.judge.step import collect_and_judge  # noqa: E402
from servesweep.sweep.config import load  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    summary, verdicts = collect_and_judge(
        [Path(p) for p in sm.input.cells],
        load(sm.config),
        Path(sm.output.summary),
        Path(sm.output.verdicts),
        Path(sm.output.correctness),
        decided_at(sm.input.stages),
        Path(sm.output.first_boots),
    )
    log(f"{len(summary)} rows from {len(sm.input.cells)} boots; {len(verdicts)} comparisons")
