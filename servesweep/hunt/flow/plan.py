"""A hunt's plan: where it stands after the records on disk, the boots it asks for next
with their exact commands, the worst case of the whole hunt and of what is left, and the
budget. Launches nothing; like the sweep's plan, it reads the records.
"""

from __future__ import annotations

from servesweep.hunt import state as hstate
from servesweep.hunt.flow.observe import observe_cells, read_cells
from servesweep.hunt.state import BootKey
from servesweep.records import CellRecord
from servesweep.sweep.config import Sweep, spec_hash
from servesweep.sweep.layout import Paths
from servesweep.sweep.plan import PlannedCell, plan_sweep
from servesweep.sweep.plan_text import plan_json, render, write_text_and_json


def current_records(sweep: Sweep, paths: Paths, keys) -> dict[BootKey, CellRecord]:
    """The records of `keys` that exist and were measured with the spec in force."""
    h = sweep.hunt

    def in_force(key: BootKey) -> str:
        return spec_hash(sweep.spec(h.stack_of(key.variant), h.model, key.variant))

    cells = read_cells(sweep, paths, keys)
    return {key: cell for key, cell in cells.items() if cell.get("spec_hash") == in_force(key)}


def replay(sweep: Sweep, paths: Paths) -> hstate.HuntState:
    """The hunt as far as current records take it (stage by stage, as its steps do)."""
    obs: dict = {}
    while True:
        state = hstate.advance(sweep.hunt.spec, obs)
        found, _ = observe_cells(sweep, paths, current_records(sweep, paths, state.needed))
        if not found:
            return state
        obs.update(found)


def plan_hunt(sweep: Sweep, paths: Paths) -> tuple[hstate.HuntState, list[PlannedCell]]:
    """The hunt's state and the run_cell jobs of the boots it asks for next."""
    state = replay(sweep, paths)
    h = sweep.hunt
    jobs = [(h.stack_of(k.variant), h.model, k.variant, k.boot) for k in state.needed]
    return state, plan_sweep(sweep, paths, jobs)


def _cost(cost: hstate.Cost) -> str:
    return f"{cost.boots} boots, {cost.gpu_hours:.2f} GPU-hours"


def header(sweep: Sweep, state: hstate.HuntState) -> list[str]:
    h = sweep.hunt
    s = h.spec
    names = ", ".join(c.name for c in s.candidates)
    budget = [f"{s.budget_boots} boots"] if s.budget_boots is not None else []
    budget += [f"{s.budget_gpu_hours:g} GPU-hours"] if s.budget_gpu_hours is not None else []
    lines = [
        f"hunt from {s.start.name} on {h.stack} / {h.model}: candidates {names}",
        f"objective: {h.metric} ({'higher' if s.objective.higher_is_better else 'lower'} "
        f"is better) at levels {', '.join(map(str, h.levels))}; adopt a gain of "
        f">= {s.min_effect_pct:g} %, alpha {s.alpha:g}, power {s.power:g}; boots per side "
        f"{s.boots_min}..{s.boots_max} (+{s.stage} a look)",
        f"worst case of the whole hunt: {_cost(hstate.worst_case(s))} "
        f"({s.gpu_hours_per_boot:.3g} GPU-hours a boot, as budget.boot_minutes states)",
        f"budget: {' and '.join(budget) or 'none'}",
        f"spent so far: {_cost(state.spent)}",
    ]
    if state.done:
        lines.append(
            f"done: {state.stop_reason}; final {state.incumbent_variant} "
            "(results/hunt/hunt.json has the path and the ledger)"
        )
    else:
        r = state.rounds[-1]
        arms = ", ".join(f"{a.candidate} ({a.verdict})" for a in r.arms)
        lines += [
            f"now: round {r.index + 1} ({r.kind}), reference {r.reference}; arms: {arms}",
            f"worst case left: {_cost(state.worst_case_left)}",
            f"next: {len(state.needed)} boots (the jobs below; later stages and rounds "
            "follow from what these measure)",
        ]
    return lines + [""]


def write_hunt_plan(
    sweep: Sweep, paths: Paths, sweep_files: list[str], is_default: bool, out_txt, out_json
) -> str:
    """A hunt's plan as text and JSON: where it stands, then its next boots as cells."""
    state, planned = plan_hunt(sweep, paths)
    text = render(planned, sweep_files, is_default).replace(
        "every cell's first boot, then every cell's second, ...",
        "the reference's and each arm's boots interleaved, boot by boot",
    )
    first, rest = text.split("\n", 1)
    text = "\n".join([first, *header(sweep, state), rest])
    data = plan_json(planned, sweep_files, is_default)
    data["hunt"] = {"header": header(sweep, state)[:-1], "done": state.done}
    return write_text_and_json(text, data, out_txt, out_json)
