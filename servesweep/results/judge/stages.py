"""`repeats: auto` through Snakemake: one checkpoint per stage of boots.

Step s (`results/stages/s<s>.json`) holds `boots` (per cell, the boots measured: what step
s−1 asked for, its inputs) and `next` (per cell, the boots the next stage needs, from
`servesweep.sweep.stages.stage_decisions` over each stack × model's baseline and
variants). Step 0 measured nothing and asks for every cell's first `min` boots, known from
the sweep alone, so `snakemake -n` shows them. The sweep is done at the first step that
asks for nothing new (every variant decided, or boots that failed leave a look short). A
boot is measured once (its run_cell job's output), an interrupted sweep resumes at the
first step whose boots are missing, and a finished one is a chain of up-to-date files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, cast

from servesweep.jsonfile import read_json
from servesweep.level import Level, parse_value
from servesweep.records import CellRecord
from servesweep.sweep.config import Sweep, spec_json
from servesweep.sweep.layout import Paths
from servesweep.sweep.stages import stage_decisions

if TYPE_CHECKING:
    from servesweep.results.judge.board import Judging

STAGE_JSON = "results/stages/s{step}.json"
SEP = "/"  # a cell's key in the records: stack/model/variant


def stage_params(sweep: Sweep) -> str:
    """What every step depends on besides its inputs: the rule and how verdicts are judged."""
    return spec_json(
        {"repeats": sweep.repeats_rule._asdict(), "analysis": sweep.analysis.as_config()}
    )


def _key(stack: str, model: str, variant: str) -> str:
    return SEP.join((stack, model, variant))


def counted_levels(sweep: Sweep, judging: Judging) -> list[Level]:
    if judging.counted_levels is None:
        return list(sweep.levels)
    wanted = {parse_value(v) for v in judging.counted_levels}
    return [lv for lv in sweep.levels if lv.value in wanted]


def boot_values(sweep: Sweep, cell_json: Path, levels: list[Level], metric: str) -> list:
    """One boot's objective at each counted level (the mean of its valid in-boot
    measurements, as collect checks them); None where it failed or is missing."""
    # Here, not at the top: a Snakefile parse reads this module's paths only (pandas and
    # scipy, ~1 s, come with the decisions, in the checkpoint's own job).
    from servesweep.results.collect.cells import checked_levels
    from servesweep.results.judge.step import analysis_of

    cell = read_json(Path(cell_json))
    if cell is None:
        return [None] * len(levels)
    by_level: dict = {}
    record = cast(CellRecord, cell)
    for lev in checked_levels(record, Path(cell_json).parent, analysis_of(sweep)):
        if lev.get("valid") and lev.get(metric) is not None:
            by_level.setdefault(parse_value(lev["level"]), []).append(float(lev[metric]))
    out = []
    for lv in levels:
        got = [v for v in by_level.get(lv.value, []) if math.isfinite(v)]
        out.append(sum(got) / len(got) if got else None)
    return out


def _sample(
    sweep: Sweep,
    paths: Paths,
    boots: dict,
    cell: tuple[str, str, str],
    levels: list[Level],
    column: str,
) -> list:
    """A cell's objective, levels × its boots measured so far."""
    n = boots.get(_key(*cell), 0)
    rows = [boot_values(sweep, paths.cell_json(*cell, r), levels, column) for r in range(n)]
    return [[row[i] for row in rows] for i in range(len(levels))]


def first_record(sweep: Sweep) -> dict:
    """Step 0: nothing measured; the first stage is every cell's `min` boots."""
    first = {_key(*cell): sweep.repeats for cell in sweep.cells}
    return {"step": 0, "boots": {}, "next": first, "done": False, "decisions": {}}


def stage_record(sweep: Sweep, paths: Paths, step: int, previous: dict) -> dict:
    """Step `step` (≥ 1): the decisions over the boots the previous step asked for."""
    from servesweep.results.judge.step import judging_of  # with the decisions (above)

    boots = dict(previous["next"])
    judging = judging_of(sweep)
    settings = sweep.analysis
    metric = judging.metrics()[judging.objective]
    margin = getattr(settings, metric.margin_key)
    levels = counted_levels(sweep, judging)
    rule = sweep.repeats_rule
    baseline = settings.baseline
    wanted = dict(boots)
    decisions = {}
    for stack in sweep.stacks:
        for model in sweep.models:

            def values(variant: str, stack: str = stack, model: str = model) -> list:
                return _sample(sweep, paths, boots, (stack, model, variant), levels, metric.column)

            others = [v for v in sweep.variants if v != baseline]
            stages = stage_decisions(
                rule,
                values(baseline),
                {v: values(v) for v in others},
                [lv.json for lv in levels],
                metric.higher_is_better,
                margin_pct=margin,
                baseline_name=baseline,
            )
            for v, arm in stages.arms.items():
                decisions[_key(stack, model, v)] = arm._asdict()
            for v, n in stages.needed.items():
                key = _key(stack, model, v)
                wanted[key] = max(wanted.get(key, 0), n)
    return {
        "step": step,
        "boots": boots,
        "next": wanted,
        "done": wanted == boots,
        "decisions": decisions,
    }


def _cells(paths: Paths, counts: dict) -> list[str]:
    out = []
    for r in range(max(counts.values(), default=0)):  # boot r of every cell, then r + 1
        for key, n in counts.items():
            if r < n:
                stack, model, variant = cast(tuple[str, str, str], key.split(SEP))
                out.append(str(paths.cell_json(stack, model, variant, r)))
    return out


def next_cells(paths: Paths, step_json: str | Path) -> list[str]:
    """The cell.json of the boots a step asks for (the next step's inputs)."""
    return _cells(paths, (read_json(Path(step_json)) or {}).get("next", {}))


def first_cells(sweep: Sweep, paths: Paths) -> list[str]:
    return _cells(paths, first_record(sweep)["next"])


def measured_cells(paths: Paths, step_json: str | Path) -> list[str]:
    return _cells(paths, (read_json(Path(step_json)) or {}).get("boots", {}))


def step_done(step_json: str | Path) -> bool:
    return bool((read_json(Path(step_json)) or {}).get("done"))


def decided_at(stage_jsons: list[str | Path]) -> dict[tuple[str, str, str], dict]:
    """Per (stack, model, variant): the last step's decision (outcome, look, boots)."""
    if not stage_jsons:
        return {}
    record = read_json(Path(stage_jsons[-1])) or {}
    return {tuple(k.split(SEP)): v for k, v in record.get("decisions", {}).items()}
