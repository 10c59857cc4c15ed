"""A hunt's plan: where it stands after the records on disk, the boots it asks for next
with their exact commands, the worst case of the whole hunt and of what is left, and the
budget. Launches nothing; like the sweep's plan, it reads the records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from servesweep.hunt import spec as hs
from servesweep.hunt import state as hstate
from servesweep.hunt.rounds import PLAN_DF
from servesweep.hunt.state import BootKey
from servesweep.hunt_run.observe import observe_cells, read_cells
from servesweep.records import CellRecord
from servesweep.sweep.config import Sweep, spec_hash
from servesweep.sweep.hunt import SweepHunt
from servesweep.sweep.layout import Paths
from servesweep.sweep.plan import AssumedRates, PlannedCell, earlier_records, plan_sweep
from servesweep.sweep.plan_text import plan_json, render, write_text_and_json
from servesweep.sweep.scatter_advice import scatter_advice, stated_rule, verdict_rows


def current_records(sweep: Sweep, paths: Paths, keys) -> dict[BootKey, CellRecord]:
    """The records of `keys` that exist and were measured with the spec in force."""
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep

    def in_force(key: BootKey) -> str:
        return spec_hash(sweep.spec(h.stack_of(key.variant), h.model, key.variant))

    cells = read_cells(sweep, paths, keys)
    return {key: cell for key, cell in cells.items() if cell.get("spec_hash") == in_force(key)}


def state_from_records(sweep: Sweep, paths: Paths) -> hstate.HuntState:
    """The hunt as far as current records take it (stage by stage, as its steps do)."""
    obs: dict = {}
    while True:
        state = hstate.replay(cast(SweepHunt, sweep.hunt).spec, obs)
        found, _ = observe_cells(sweep, paths, current_records(sweep, paths, state.needed))
        if not found:
            return state
        obs.update(found)


def plan_hunt(sweep: Sweep, paths: Paths) -> tuple[hstate.HuntState, list[PlannedCell]]:
    """The hunt's state and the run_cell jobs of the boots it asks for next."""
    state = state_from_records(sweep, paths)
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    jobs = [(h.stack_of(k.variant), h.model, k.variant, k.boot) for k in state.needed]
    return state, plan_sweep(sweep, paths, jobs)


def _cost(cost: hstate.Cost) -> str:
    return f"{cost.boots} boots, {cost.gpu_hours:.2f} GPU-hours"


def plan_words(spec, plan: hs.RoundPlan) -> str:
    """What a round's design says about its power, in one line (the report's words)."""
    alpha = spec.alpha / (plan.arms * len(spec.objective.levels))
    return hs.design_words(plan, spec.min_effect_pct, alpha, hs.power_of(spec, plan))


def outlook_lines(sweep: Sweep, state: hstate.HuntState) -> list[str]:
    """Before the boots are spent: what the power asks of the round in progress (or, with
    no scatter yet, at a boot CV of 2, 5 and 10 %)."""
    s = cast(SweepHunt, sweep.hunt).spec
    screening = s.design == "screen" and (not state.rounds or state.rounds[-1].kind == "search")
    if state.done or screening:  # the screen tests nothing: its checks are sized later
        return []
    k = len(state.rounds) or 1
    if state.outlook is not None:
        return [f"power (round {k}): {plan_words(s, state.outlook)}"]
    arms = max(len(state.rounds[-1].arms) if state.rounds else len(s.candidates), 1)
    cells = []
    for cv in (2, 5, 10):
        # as the round will be sized: on a pool of PLAN_DF df at its first look
        variance = math.log1p((cv / 100) ** 2)
        _, plan = hs.round_design(s, arms, variance, float(PLAN_DF), s.boots_min)
        cells.append(f"{plan.needed} at CV {cv} % (power {hs.power_of(s, plan):.2f})")
    return [
        f"power (round {k}, {arms} arms): sized once the boots' pooled scatter has "
        f"{PLAN_DF} df; a gain of {s.min_effect_pct:g} % with power {s.power:g} needs, a "
        "side, " + ", ".join(cells) + f"; the cap (boots.max) is {s.boots_max}"
    ]


def design_lines(spec: hs.HuntSpec) -> list[str]:
    if spec.design != "screen":
        return []
    return [
        f"design: screen: one pass over the candidates in listing order, each on "
        f"{spec.screen_boots} counted boots on top of what the pass kept, kept when its "
        "mean over the counted levels beats the incumbent's; then the confirm and an "
        "ablation of every kept member on fresh boots (sequential, non-inferior at every "
        f"level, alpha {spec.alpha:g} a check round) decide what stays: a member stays only "
        "when its ablation shows it needed"
    ]


def cost_lines(spec: hs.HuntSpec, state: hstate.HuntState) -> list[str]:
    """Before the boots are spent: the expected and the worst-case cost of the round in
    progress and of the whole hunt, and how the budget is granted."""
    hours = hs.max_gpu_hours(spec)
    cvs = (state.outlook.cv_pct,) if state.outlook is not None else (2.0, 5.0, 10.0)
    at = "at the boot CV seen so far" if state.outlook is not None else "at a boot CV of"
    at += " " + " / ".join(f"{cv:.1f}" for cv in cvs) + " %"

    def both(boots: Sequence[float]) -> str:
        text = " / ".join(f"{b:.0f}" for b in boots)
        return f"{text} boots" + (
            f" ({' / '.join(f'{b * hours:.2f}' for b in boots)} GPU-hours)" if hours else ""
        )

    lines = []
    r = state.rounds[-1] if state.rounds and not state.done else None
    if r is not None and r.kind == "search" and spec.design == "screen":
        each = hs.screen_variant_boots(spec)
        lines.append(
            f"cost of the screen: {each} boots a variant ({spec.screen_boots} counted), "
            f"{(1 + len(spec.candidates)) * each} for the start and {len(spec.candidates)} "
            "candidates at most; then the checks (below)"
        )
    elif r is not None and r.kind == "search":
        arms = sum(1 for a in r.arms if a.verdict != "dropped") or len(r.arms)
        new = arms + (r.index == 0)
        expected = [hstate.expected_round(spec, arms, cv, new) for cv in cvs]
        worst = hs.round_boots(spec, arms, new)
        lines.append(
            f"cost of round {r.index + 1} ({arms} arms): expected about {both(expected)} "
            f"if no arm gains, {at}; worst case {both([worst])} (every arm to boots.max)"
        )
    whole = [hstate.expected_case(spec, cv).boots for cv in cvs]
    path = (
        "every candidate kept, then one check round of all of them, each arm deciding as one "
        "that gains nothing"
        if spec.design == "screen"
        else "each round adopting one candidate, its other arms gaining nothing"
    )
    lines.append(
        f"expected cost of the whole hunt: about {both(whole)}, {at}, on its longest path ({path})"
    )
    if spec.budget_boots is None and spec.budget_gpu_hours is None:
        return lines
    least = hs.minimum_budget(spec)
    if spec.design == "screen":
        granted = (
            "the budget is granted step by step: a step is asked for only when its boots fit "
            f"with the checks' first look kept back (the first step's: {least} boots), and "
            "the pass ends at the first that does not; the checks then run on what it kept, "
            "look by look, and decide what the bounds allow"
        )
    else:
        granted = (
            "the budget is granted look by look: a round starts when its first look fits "
            f"(round 1's, with the checks' first look kept back: {least} boots), and the "
            "look it runs out at is the round's last: it decides what the bounds allow and "
            "leaves the rest undecided"
        )
    lines.append(granted)
    return lines


def _within(spec: hs.HuntSpec, state: hstate.HuntState) -> str:
    """What the budget leaves of the worst case (the hunt stops there)."""
    if spec.budget_boots is None or spec.budget_boots - state.spent.boots >= (
        state.worst_case_left.boots
    ):
        return ""
    return f"; the budget leaves {spec.budget_boots - state.spent.boots} boots"


def header(sweep: Sweep, state: hstate.HuntState) -> list[str]:
    h = cast(SweepHunt, sweep.hunt)  # a hunt's sweep
    s = h.spec
    names = ", ".join(c.name for c in s.candidates)
    budget = [f"{s.budget_boots} boots"] if s.budget_boots is not None else []
    budget += [f"{s.budget_gpu_hours:g} GPU-hours"] if s.budget_gpu_hours is not None else []
    lines = [
        f"hunt from {s.start.name} on {h.stack} / {h.model}: candidates {names}",
        f"objective: {h.metric} ({'higher' if s.objective.higher_is_better else 'lower'} "
        f"is better) at levels {', '.join(map(str, h.levels))}; adopt a gain of "
        f">= {s.min_effect_pct:g} % at one level, no level worse than {hs.margin(s):g} %; "
        f"alpha {s.alpha:g} a round (the chance that a round adopts an arm that gains "
        f"nothing), power {s.power:g} (the chance that it adopts one that gains "
        f"{s.min_effect_pct:g} %); boots per side {s.boots_min}..{s.boots_max} "
        f"(+{s.stage} a look); first boots: {state.first_boots.why}",
        *design_lines(s),
        *outlook_lines(sweep, state),
        f"worst case of the whole hunt: {_cost(hstate.worst_case(s))} "
        f"({s.gpu_hours_per_boot:.3g} GPU-hours a boot, as budget.boot_minutes states)",
        *([] if state.done else cost_lines(s, state)),
        f"budget: {' and '.join(budget) or 'none'}",
        f"spent so far: {_cost(state.spent)}",
    ]
    if state.done:
        lines.append(
            f"done: {state.stop_reason}; final {state.final_variant} "
            "(results/hunt/hunt.json has the path and the ledger)"
        )
    else:
        r = state.rounds[-1]
        arms = ", ".join(f"{a.candidate} ({a.verdict})" for a in r.arms)
        screen = s.design == "screen"
        if r.kind == "check":
            now = f"the checks (round {r.index + 1})"
        elif screen:  # the screen's search rounds are its steps
            now = f"step {r.index + 1} of the screen"
        else:
            now = f"round {r.index + 1} ({r.kind})"
        lines += [
            f"now: {now}, reference {r.reference}; arms: {arms}",
            f"worst case left: {_cost(state.worst_case_left)}" + _within(s, state),
            f"next: {len(state.needed)} boots (the jobs below; later "
            f"{'boots and steps' if screen else 'stages and rounds'} follow from what these "
            "measure)",
        ]
    return lines + [""]


def write_hunt_plan(
    sweep: Sweep, paths: Paths, sweep_files: list[str], is_default: bool, out_txt, out_json
) -> str:
    """A hunt's plan as text and JSON: where it stands, then its next boots as cells."""
    state, planned = plan_hunt(sweep, paths)
    order = "the reference's and each arm's boots interleaved, boot by boot"
    # Where the last verdicts' scatter came from at the counted levels: more requests a
    # boot before more boots where a boot's own measurements are most of it.
    counted = {str(level) for level in cast(SweepHunt, sweep.hunt).levels}
    rows = [r for r in verdict_rows(paths) if r.get("level") in counted]
    stated = stated_rule(sweep.benchmark)  # compared with the σ_B measured
    advice = scatter_advice(rows, earlier_records(paths), stated) if rows else []
    assumed = AssumedRates.of(sweep)
    text = render(planned, sweep_files, is_default, order=order, advice=advice, assumed=assumed)
    first, rest = text.split("\n", 1)
    text = "\n".join([first, *header(sweep, state), rest])
    data = plan_json(planned, sweep_files, is_default, assumed=assumed)
    data["hunt"] = {"header": header(sweep, state)[:-1], "done": state.done}
    return write_text_and_json(text, data, out_txt, out_json)
