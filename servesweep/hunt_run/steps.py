"""The hunt through Snakemake: one checkpoint per stage of boots, and the final hunt.json.

Step s (`results/hunt/steps/s<s>.json`) is the hunt replayed (`servesweep.hunt.state.replay`)
over every boot that steps 0..s-1 asked for: step 0 over nothing, step s over step s-1's
`observed` plus its `needed`, whose cell.json are the inputs of step s. So each step's output
is a function of its declared inputs and the hunt's spec (a param); a boot is measured once
(its run_cell job's output), an interrupted hunt resumes at the first step whose boots are
missing, and a finished one is a chain of up-to-date files. `results/hunt/hunt.json` is the
last step (the first whose `done` is true) with the ledger: every decision's boots and their
measured GPU-hours.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from servesweep.hunt import spec as hs
from servesweep.hunt import state as hstate
from servesweep.hunt.record import (
    BudgetRecord,
    CandidateRecord,
    HuntRecord,
    LaunchRecord,
    LedgerArm,
    LedgerReference,
    LedgerRound,
    MeasuredCost,
    RoundRecord,
)
from servesweep.hunt.state import BootKey
from servesweep.hunt_run.observe import BootCost, cell_path, observations
from servesweep.jsonfile import read_json
from servesweep.level import Level
from servesweep.server.engines import launch_env
from servesweep.sweep.config import Sweep, spec_hash, spec_json
from servesweep.sweep.hunt import SweepHunt
from servesweep.sweep.layout import Paths

STEP_JSON = "results/hunt/steps/s{step}.json"
HUNT_JSON = "results/hunt/hunt.json"


def jsonable(value: Any) -> Any:
    """NamedTuples as objects, level keys and non-finite numbers as JSON can hold them."""
    if hasattr(value, "_asdict"):
        return {k: jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, Mapping):
        return {
            str(Level.parse(k).json) if not isinstance(k, str) else k: jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else Level.parse(value).json
    return value


def hunt_params(sweep: Sweep) -> str:
    """What every step depends on besides its inputs (a Snakemake param: editing the hunt,
    its start or a candidate re-decides): the spec, the objective and the validity gates.
    What a boot measures is its cell's spec: a change reruns the cell, and so the steps
    that read it."""
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    return spec_json(
        {
            "spec": repr(h.spec),
            "stack": h.stack,
            "model": h.model,
            "metric": h.metric,
            "levels": [v if isinstance(v, str) else Level.parse(v).json for v in h.levels],
            "analysis": sweep.analysis.as_config(),
        }
    )


def step_record(sweep: Sweep, paths: Paths, step: int, previous: dict | None) -> dict:
    """Step `step`: the replay over the boots steps before it asked for."""
    keys = [] if previous is None else previous["observed"] + previous["needed"]
    obs, _ = observations(sweep, paths, [BootKey(*k) for k in keys])
    state = hstate.replay(cast(SweepHunt, sweep.hunt).spec, obs)
    return {
        "step": step,
        "observed": [list(k) for k in keys if BootKey(*k) in obs],
        "needed": [list(k) for k in state.needed],
        "done": state.done,
        "stop_reason": state.stop_reason,
        "round": len(state.rounds),
        "spent": jsonable(state.spent),
        "worst_case_left": jsonable(state.worst_case_left),
    }


def needed_cells(sweep: Sweep, paths: Paths, step_json: str | Path) -> list[str]:
    """The cell.json of the boots a step asks for (the next step's inputs)."""
    record = read_json(Path(step_json)) or {}
    return [str(cell_path(sweep, paths, BootKey(*k))) for k in record.get("needed", [])]


def first_cells(sweep: Sweep, paths: Paths) -> list[str]:
    """The boots step 0 asks for, from the spec alone (nothing is measured before it)."""
    keys = hstate.replay(cast(SweepHunt, sweep.hunt).spec, {}).needed
    return [str(cell_path(sweep, paths, k)) for k in keys]


def step_done(step_json: str | Path) -> bool:
    return bool((read_json(Path(step_json)) or {}).get("done"))


def observed_cells(sweep: Sweep, paths: Paths, step_json: str | Path) -> list[str]:
    record = read_json(Path(step_json)) or {}
    return [str(cell_path(sweep, paths, BootKey(*k))) for k in record.get("observed", [])]


def _cost(costs: Mapping[BootKey, BootCost], variant: str, boots) -> MeasuredCost:
    mine = [costs[BootKey(variant, b)] for b in boots if BootKey(variant, b) in costs]
    return {
        "boots": len(mine),
        "wall_s": round(sum(c.wall_s for c in mine), 3),
        "gpu_hours": round(sum(c.gpu_hours for c in mine), 6),
    }


def ledger(state: hstate.HuntState, costs: Mapping[BootKey, BootCost]) -> list[LedgerRound]:
    """Per round: the reference's and each arm's boots and their measured cost."""
    out: list[LedgerRound] = []
    for r in state.rounds:
        arms: list[LedgerArm] = [
            {
                "candidate": a.candidate,
                "variant": a.variant,
                "role": a.role,
                "verdict": a.verdict,
                **_cost(costs, a.variant, a.boots),
            }
            for a in r.arms
        ]
        ref: LedgerReference = {
            "variant": r.reference,
            **_cost(costs, r.reference, r.reference_boots),
        }
        total = _total(ref, arms)
        out.append({"round": r.index, "kind": r.kind, "reference": ref, "arms": arms, **total})
    return out


def _total(ref: MeasuredCost, arms: list[LedgerArm]) -> MeasuredCost:
    """A round's boots and cost: the reference's and its arms'."""
    return {
        "boots": ref["boots"] + sum(a["boots"] for a in arms),
        "wall_s": ref["wall_s"] + sum(a["wall_s"] for a in arms),
        "gpu_hours": ref["gpu_hours"] + sum(a["gpu_hours"] for a in arms),
    }


def launch(sweep: Sweep, variant: str) -> LaunchRecord:
    """The composed variant's stack, flags, env and (placeholder) launch command."""
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    spec = sweep.spec(h.stack_of(variant), h.model, variant)
    return {
        "variant": variant,
        "stack": spec["stack"]["name"],
        "model": h.model,
        "flags": spec["flags"],
        "env": launch_env(spec),
        "command": spec["command"],
        "spec_hash": spec_hash(spec),
    }


def budget(spec) -> BudgetRecord:
    """The stated budget and what a boot is taken to cost (None: no limit)."""
    return {
        "boots": spec.budget_boots,
        "gpu_hours": spec.budget_gpu_hours,
        "gpu_hours_per_boot": spec.gpu_hours_per_boot,
    }


def candidates(sweep: Sweep) -> dict[str, CandidateRecord]:
    """Each candidate as the sweep file states it, in listing order."""
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    return {
        c.name: {
            "description": h.descriptions.get(c.name) or "",
            "flags": dict(c.flags),
            "env": dict(c.env),
            "stack": c.stack,
            "requires": list(c.requires),
            "conflicts": list(c.conflicts),
        }
        for c in h.spec.candidates
    }


def rounds_record(spec, state: hstate.HuntState) -> list[RoundRecord]:
    """The rounds as hunt.json holds them; each round's design with the power it has at δ
    at the scatter it was sized on, and whether the cap cut it short."""
    out: list[RoundRecord] = jsonable(state.rounds)
    for r, record in zip(state.rounds, out, strict=True):
        if r.plan is not None and (plan := record.get("plan")) is not None:
            plan |= {
                "capped": r.plan.capped,
                "power_at_delta": hs.power_of(spec, r.plan),
                "alpha_per_arm_and_level": spec.alpha / (r.plan.arms * len(spec.objective.levels)),
            }
    return out


def hunt_record(sweep: Sweep, paths: Paths, last_step: dict) -> HuntRecord:
    """results/hunt/hunt.json: the path, the final configuration and the ledger."""
    keys = [BootKey(*k) for k in last_step["observed"]]
    obs, costs = observations(sweep, paths, keys)
    state = hstate.replay(cast(SweepHunt, sweep.hunt).spec, obs)
    spent: MeasuredCost = {
        "boots": len(costs),
        "wall_s": round(sum(c.wall_s for c in costs.values()), 3),
        "gpu_hours": round(sum(c.gpu_hours for c in costs.values()), 6),
    }
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    return {
        "start": h.spec.start.name,
        "stack": h.stack,
        "model": h.model,
        "objective": {
            "metric": h.metric,
            "higher_is_better": h.spec.objective.higher_is_better,
            "levels": [v if isinstance(v, str) else Level.parse(v).json for v in h.levels],
            "min_effect_pct": h.spec.min_effect_pct,
            "margin_pct": hs.margin(h.spec),
            "alpha": h.spec.alpha,
            "power": h.spec.power,
            "boots_max": h.spec.boots_max,
        },
        "design": h.spec.design,
        "screen_boots": h.spec.screen_boots,
        "steps": last_step["step"] + 1,
        "done": state.done,
        "stop_reason": state.stop_reason,
        "incumbent": list(state.incumbent),
        "final_members": list(state.final),
        "final": launch(sweep, state.final_variant),
        "first_boots": jsonable(state.first_boots),
        "excluded": dict(state.excluded),
        "undecided": dict(state.undecided),
        "rounds": rounds_record(h.spec, state),
        "ledger": ledger(state, costs),
        "spent": spent,
        "planned_cost": jsonable(state.spent),
        "worst_case": jsonable(hstate.worst_case(h.spec)),
        "budget": budget(h.spec),
        "candidates": candidates(sweep),
        "cells": [str(cell_path(sweep, Paths(Path(".")), k)) for k in sorted(costs, key=tuple)],
        "spec_digest": hashlib.sha256(hunt_params(sweep).encode()).hexdigest()[:12],
    }
