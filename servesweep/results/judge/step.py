"""collect's whole step: every boot's records into summary.csv, then the verdicts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from servesweep.correctness.compare import sweep_rows, write_csv
from servesweep.jsonfile import read_json
from servesweep.records import CellRecord
from servesweep.results.collect.cells import Analysis, collect_cells, load_cells
from servesweep.results.collect.requests import RequestStore
from servesweep.results.judge.board import (
    FIRST_BOOTS_CSV,
    judged_first_boots,
    write_first_boots,
)
from servesweep.results.judge.capacity import capacity_comparisons, capacity_rows
from servesweep.results.judge.verdicts import Judging, compare, to_frame
from servesweep.sweep.config import Sweep
from servesweep.sweep.hunt import CAPACITY


def analysis_of(sweep: Sweep) -> Analysis:
    return Analysis(
        levels=list(sweep.levels),
        repeats_in_boot=sweep.benchmark.repeats_in_boot,
        error_rate_threshold=sweep.benchmark.error_rate_threshold,
        gates=sweep.analysis,
        slo=sweep.raw.get("slo"),
    )


def judging_of(sweep: Sweep) -> Judging:
    """How the sweep is judged: its `analysis`, the objective and counted levels the
    hunt's where it hunts (so the hunt and the verdict table judge the same family)."""
    settings = sweep.analysis
    if sweep.hunt is not None and sweep.hunt.metric != CAPACITY:
        return Judging.of(settings, sweep.hunt.metric, sweep.hunt.levels)
    return Judging.of(settings)


def pass_records(cells: list[tuple[CellRecord, Path]]) -> dict[tuple[str, str, str], dict]:
    """Per cell, the correctness pass of its first boot that ran one (the pass is greedy:
    every boot answers the same, so one boot speaks for the cell)."""
    records: dict[tuple[str, str, str], dict] = {}
    for cell, path in sorted(cells, key=lambda c: c[0].get("repeat", 0)):
        key = (cell["stack"], cell["model"], cell["variant"])
        record = read_json(Path(path).parent / "correctness.json")
        if key not in records and record and record.get("modes"):
            records[key] = record
    return records


def collect_and_judge(
    cell_paths: list[Path],
    sweep: Sweep,
    summary_csv: Path,
    verdicts_csv: Path,
    correctness_csv: Path | None = None,
    stages: dict | None = None,
    first_boots_csv: Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`stages` (repeats: auto): per (stack, model, variant), the stage rule's decision,
    written beside the variant's primary comparisons (`stage_look`, `stage_outcome`).
    The first-boot decisions go to `first_boots_csv` (default: first_boots.csv beside
    verdicts.csv), where the report reads them."""
    cells = load_cells(cell_paths)  # every cell.json read once
    summary = collect_cells(cells, summary_csv, analysis_of(sweep))
    dirs = {
        (c["stack"], c["model"], c["variant"], c.get("repeat", 0)): Path(p).parent for c, p in cells
    }
    judging = judging_of(sweep)
    first = judged_first_boots(summary, judging)
    write_first_boots(first, first_boots_csv or Path(verdicts_csv).with_name(FIRST_BOOTS_CSV))
    comparisons = compare(
        summary,
        judging,
        list(sweep.stacks),
        list(sweep.variants),
        RequestStore(dirs, summary),
        first=first,
    )
    baseline = sweep.analysis.baseline
    capacity = capacity_rows([c for c, _ in cells], list(sweep.variants), baseline)
    comparisons += capacity_comparisons(capacity, baseline, sweep.analysis.noise_cv)
    verdicts = with_stages(to_frame(comparisons), stages)
    Path(verdicts_csv).parent.mkdir(parents=True, exist_ok=True)
    verdicts.to_csv(verdicts_csv, index=False)
    if correctness_csv is not None:
        rows = sweep_rows(
            pass_records(cells),
            must_match={v: sweep.must_match(v) for v in sweep.variants},
            reference_stack=sweep.analysis.reference_stack or next(iter(sweep.stacks)),
            threshold=sweep.analysis.correctness_threshold,
            baseline=sweep.analysis.baseline,
        )
        write_csv(Path(correctness_csv), rows)
    return summary, verdicts


def with_stages(verdicts: pd.DataFrame, stages: dict | None) -> pd.DataFrame:
    """The look (1 = the first stage) at which `repeats: auto` decided each variant, and
    how (faster / slower / within margin / out of reach / cap / open), on its primary
    rows; absent when the sweep's repeats are fixed."""
    if not stages or verdicts.empty:
        return verdicts
    looks, outcomes = [], []
    for r in verdicts.itertuples():
        d = (
            stages.get((r.stack, r.model, r.variant))
            if r.family == "primary" and r.kind == "variant"
            else None
        )
        looks.append(None if d is None or d["look"] is None else d["look"] + 1)
        outcomes.append(None if d is None else d["outcome"])
    out = verdicts.copy()
    out["stage_look"] = pd.array(looks, dtype="Int64")
    out["stage_outcome"] = outcomes
    return out
