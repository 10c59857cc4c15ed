"""report: the self-contained results/report.html."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821

from servesweep import CLIENT_VERSION  # noqa: E402
from servesweep.joblog import job_logger  # noqa: E402
from servesweep.jsonfile import read_json  # noqa: E402
from servesweep.results.judge.step import judging_of  # noqa: E402
from servesweep.results.report.build import ReportSettings, build_report  # noqa: E402
from servesweep.sweep.config import load  # noqa: E402

sm = snakemake  # noqa: F821
with job_logger(sm.log[0]) as log:
    sweep = load(sm.config)
    build_report(
        Path(sm.input.summary),
        Path(sm.input.verdicts),
        [Path(p) for p in sm.input.cells],
        Path(sm.output[0]),
        ReportSettings(
            list(sweep.stacks),
            list(sweep.variants),
            sweep.analysis,
            slo=sweep.raw.get("slo"),
            cost=sweep.raw.get("cost"),
            judging=judging_of(sweep),
            repeats=sweep.repeats_rule,
        ),
        current_client_version=CLIENT_VERSION,
        correctness_csv=Path(sm.input.correctness),
        hunt=read_json(Path(sm.input.hunt[0])) if sm.input.hunt else None,
        first_boots_csv=Path(sm.input.first_boots),
    )
    log(f"wrote {sm.output[0]}")
