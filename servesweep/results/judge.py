"""collect's whole step: every boot's records into summary.csv, then the verdicts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from servesweep.config import Sweep
from servesweep.results.collect import Analysis, collect, load_cell
from servesweep.results.requests import RequestStore
from servesweep.results.verdicts import compare, to_frame


def analysis_of(sweep: Sweep) -> Analysis:
    bench = sweep.benchmark
    return Analysis(
        levels=list(bench["levels"]),
        repeats_in_boot=bench["repeats_in_boot"],
        error_rate_threshold=bench["error_rate_threshold"],
        gates=sweep.analysis,
    )


def collect_and_judge(
    cell_paths: list[Path], sweep: Sweep, summary_csv: Path, verdicts_csv: Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    summary = collect(cell_paths, summary_csv, analysis_of(sweep))
    dirs = {}
    for path in cell_paths:
        cell = load_cell(path)
        dirs[(cell["stack"], cell["model"], cell["variant"], cell.get("repeat", 0))] = Path(
            path
        ).parent
    verdicts = to_frame(
        compare(
            summary,
            sweep.analysis,
            list(sweep.stacks),
            list(sweep.variants),
            RequestStore(dirs, summary),
        )
    )
    Path(verdicts_csv).parent.mkdir(parents=True, exist_ok=True)
    verdicts.to_csv(verdicts_csv, index=False)
    return summary, verdicts
