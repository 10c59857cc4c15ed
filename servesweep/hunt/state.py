"""The hunt as a pure, deterministic state machine: `replay(spec, observations)` replays
the hunt from its start over what has been measured and returns the path so far and the
boots still needed next.

Boot indices: each composed variant counts its boots from 0 in the order the replay
requests them (the reference of round 2 continues after its boots as a candidate in round
1, and so on), so the same observations always give the same requests, an interrupted hunt
resumes where it stopped, no (variant, boot) is ever requested twice, and a finished hunt
needs nothing. A request stays at the stage it belongs to: the next stage is requested only
when every boot of the current one is in. One round's looks are `servesweep.hunt.rounds`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from servesweep.hunt import spec as hs
from servesweep.hunt.rounds import (
    PLAN_DF,
    ArmVerdict,
    BootKey,
    BootResult,
    FirstBoots,
    Replay,
    Role,
    RoundRun,
    Side,
    run_round,
    variance,
)
from servesweep.hunt.screen import run_screen

__all__ = ["ArmVerdict", "BootKey", "BootResult", "HuntState", "replay", "worst_case"]


class Arm(NamedTuple):
    candidate: str  # the candidate tested (confirm: the final's members, "+" joined)
    variant: str
    role: Role
    verdict: ArmVerdict
    reason: str
    gain_pct: float  # candidate over reference (confirm / ablation: final over this arm)
    low_pct: float
    high_pct: float
    rank_pct: float  # the lower bound adopted arms are ranked by (sequential.Look)
    level: Any
    boots: tuple[int, ...]  # boot indices of this arm's variant requested in this round
    uncounted: tuple[int, ...]  # of those, measured but left out of the decision (r0)
    gpu_hours: float


class Round(NamedTuple):
    # hunt.json's name; mypy objects to a field that shadows tuple.index.
    index: int  # type: ignore[assignment]
    kind: Literal["search", "check"]
    reference: str  # the incumbent's variant (check: the final variant)
    reference_boots: tuple[int, ...]
    arms: tuple[Arm, ...]
    adopted: str | None  # the candidate that became the next incumbent
    gpu_hours: float
    plan: hs.RoundPlan | None  # its arms, boots a side and the gain tested (None: not yet)
    reference_uncounted: tuple[int, ...] = ()
    cut: int | None = None  # the budget ended it after the look at this many boots a side
    more_boots: int = 0  # about how many more boots would settle its undecided arms


class Cost(NamedTuple):
    boots: int
    gpu_hours: float


class HuntState(NamedTuple):
    rounds: tuple[Round, ...]
    incumbent: tuple[str, ...]  # adopted candidates, canonical order
    incumbent_variant: str
    final: tuple[str, ...]  # the incumbent less a member the ablation found not needed
    final_variant: str
    excluded: Mapping[str, str]  # candidate -> why it is out of later rounds
    done: bool
    stop_reason: str
    needed: tuple[BootKey, ...]  # what to measure next (stage order, interleaved)
    members: Mapping[str, tuple[str, ...]]  # every variant named so far -> its candidates
    spent: Cost
    worst_case_left: Cost
    first_boots: FirstBoots  # whether each variant's r0 is left out, and why
    outlook: hs.RoundPlan | None  # the current round's design, or the one the scatter seen
    # so far gives it (None: too little scatter yet)
    undecided: Mapping[str, str] = {}  # candidate (or check) -> why, and what would settle it


def _arm(rp: Replay, s: Side) -> Arm:
    """A side's record once its round is replayed (its boots counted as spent)."""
    g = lo = hi = rk = math.nan
    level = None
    if s.look is not None:
        g, lo, hi, rk = s.look.gain_pct, s.look.low_pct, s.look.high_pct, s.look.rank_pct
        level = s.look.level
    hours = rp.count(s.variant, s.boots)
    rp.next_boot[s.variant] = s.start + s.requested
    rp.asked_boots += s.requested
    rp.asked_hours += s.requested * rp.hours(s.variant)
    uncounted = tuple(b for b in s.boots if rp.uncounted(b))
    return Arm(s.candidate, s.variant, s.role, s.verdict, s.reason, g, lo, hi, rk, level,
               s.boots, uncounted, hours)  # fmt: skip


def _finish(rp: Replay, kind, index: int, run: RoundRun) -> tuple[list[Arm], Round]:
    arms = [_arm(rp, a) for a in run.arms]
    ref = run.reference
    hours = _reference_spent(rp, ref)
    if not run.pending:  # this round's samples join the pool of later rounds' looks
        rp.samples += [ref, *(a for a in run.arms if a.verdict != ArmVerdict.DROPPED)]
    uncounted = tuple(b for b in ref.boots if rp.uncounted(b))
    r = Round(index, kind, ref.variant, ref.boots, tuple(arms), None,
              hours + sum(a.gpu_hours for a in arms), run.plan, uncounted,
              run.cut, run.more)  # fmt: skip
    return arms, r


def _reference_spent(rp: Replay, ref: Side) -> float:
    """A reference's boots counted as spent and asked for; returns what they cost."""
    hours = rp.count(ref.variant, ref.boots)
    rp.next_boot[ref.variant] = ref.start + ref.requested
    rp.asked_boots += ref.requested
    rp.asked_hours += ref.requested * rp.hours(ref.variant)
    return hours


def _pick(arms: Sequence[Arm], order: Mapping[str, int]) -> Arm | None:
    """The adopted arm with the largest lower bound (rank_pct); ties: the larger estimate,
    then the candidate listed first in the spec."""
    adopted = [a for a in arms if a.verdict == ArmVerdict.ADOPT]
    return max(adopted, key=lambda a: (a.rank_pct, a.gain_pct, -order[a.candidate]), default=None)


def replay(spec: hs.HuntSpec, observations: Mapping[BootKey, BootResult]) -> HuntState:
    """Replay the hunt over `observations` ((variant, boot) -> BootResult): the search
    rounds, then the check round; observations the hunt never asked for are ignored."""
    rp = Replay(spec, observations)
    order = {c.name: i for i, c in enumerate(spec.candidates)}
    rounds: list[Round] = []
    incumbent: tuple[str, ...] = ()
    excluded: dict[str, str] = {}
    pending: list[BootKey] = []
    rp.name(())
    stop = ""
    if spec.design == "screen":
        return _screen_hunt(rp)
    while True:  # search rounds
        names = hs.applicable(spec, incumbent, excluded)
        if not names:
            stop = "candidates exhausted"
            break
        if not _first_look_fits(spec, rp, incumbent, names):
            stop = "budget: the next round's first look could exceed it"
            break
        arms = [rp.side((*incumbent, c), candidate=c) for c in names]
        reserve = _check_first_look(spec, len(incumbent) + 1)
        run = run_round(rp, rp.side(incumbent), arms, check=False, reserve=reserve)
        out, r = _finish(rp, "search", len(rounds), run)
        pending = run.pending
        best = None if pending or run.failure else _pick(out, order)
        rounds.append(r._replace(adopted=best.candidate if best else None))
        if pending:
            break
        if run.failure:
            stop = f"{run.failure}: {r.reference} failed more than {spec.reference_retries} boots"
            break
        for a in out:
            if a.verdict == ArmVerdict.DROPPED or (
                a.verdict == ArmVerdict.REJECT and not spec.retest_rejected
            ):
                excluded[a.candidate] = f"round {len(rounds) - 1}: {a.reason}"
        if run.cut is not None:
            stop = _cut_words(r)
            if best is not None:
                incumbent = hs.canonical(spec, (*incumbent, best.candidate))
            break
        if best is None:
            stop = "a round adopted nothing"
            break
        incumbent = hs.canonical(spec, (*incumbent, best.candidate))
    final = incumbent
    if not pending and incumbent and (spec.confirm or spec.ablate):
        r, pending, failure = _check_round(rp, incumbent, len(rounds))
        rounds.append(r)
        if failure and not pending:
            stop += f"; checks: {failure}"
        elif r.cut is not None and not pending:
            stop += f"; checks: {_cut_words(r)}"
        if not pending:
            final = _pruned(spec, incumbent, r)
    return _state(rp, rounds, incumbent, final, excluded, pending, stop)


def _state(rp: Replay, rounds, incumbent, final, excluded, pending, stop) -> HuntState:
    spec = rp.spec
    return HuntState(
        rounds=tuple(rounds),
        incumbent=incumbent,
        incumbent_variant=hs.variant_name(spec, incumbent),
        final=final,
        final_variant=hs.variant_name(spec, final),
        excluded=dict(excluded),
        done=not pending,
        stop_reason="" if pending else stop,
        needed=tuple(pending),
        members=dict(rp.members),
        spent=Cost(rp.spent_boots, rp.spent_hours),
        worst_case_left=_left(spec, rounds, incumbent, excluded, len(pending)),
        first_boots=rp.first,
        outlook=_outlook(rp, rounds) if pending else None,
        undecided={
            _arm_name(a): f"round {r.index + 1}: {a.reason}"
            for r in rounds
            for a in r.arms
            if a.verdict == ArmVerdict.UNDECIDED and (a.boots or a.role == "candidate")
        },
    )


def _screen_hunt(rp: Replay) -> HuntState:
    """`design: screen`: the pass (`hunt.screen`, one search round a step), then the check
    round on what it kept, which decides what stays (`_gate`): checked again, on fresh
    boots, while it leaves two or more members in doubt."""
    spec = rp.spec
    reserve = _check_first_look(spec, 1)
    run = run_screen(rp, reserve)
    hours = _reference_spent(rp, run.start)
    rounds, excluded = [], {}
    for i, (ref, side) in enumerate(run.steps):
        arm = _arm(rp, side)
        boots = run.start.boots if i == 0 else ()
        uncounted = tuple(b for b in boots if rp.uncounted(b))
        adopted = arm.candidate if arm.verdict == ArmVerdict.ADOPT else None
        cost = arm.gpu_hours + (hours if i == 0 else 0.0)
        r = Round(i, "search", ref.variant, boots, (arm,), adopted, cost, None, uncounted)
        rounds.append(r)
        if arm.verdict in (ArmVerdict.DROPPED, ArmVerdict.REJECT):
            excluded[arm.candidate] = f"round {i}: {arm.reason}"
    pending = run.pending
    if pending:
        return _state(rp, rounds, run.kept, run.kept, excluded, pending, "")
    rp.samples += [run.start, *(s.arm for s in run.steps if s.arm.verdict != ArmVerdict.DROPPED)]
    stop = run.failure or "candidates exhausted"
    if run.cut:
        stop = "budget: the screen's next step could exceed it"
    final = run.kept
    while final and not run.failure and (spec.confirm or spec.ablate):
        r, pending, failure = _check_round(rp, final, len(rounds))
        rounds.append(r)
        if pending:
            break
        if failure:
            stop += f"; checks: {failure}"
            final = ()
            break
        if r.cut is not None:
            stop += f"; checks: {_cut_words(r)}"
        final, again = _gate(spec, final, r)
        if not again or r.cut is not None:
            break
    return _state(rp, rounds, run.kept, final, excluded, pending, "" if pending else stop)


def _gate(spec: hs.HuntSpec, members: tuple[str, ...], check: Round) -> tuple[tuple, bool]:
    """What stays after a check round of the screen design, and whether to check again: the
    start when the confirm did not show the set better; else the set less a member whose
    ablation did not show it needed (not needed, or undecided), the one of smallest
    contribution with its dependants; checked again when another one is in doubt too
    (the smaller set was not measured as such)."""
    confirm = [a for a in check.arms if a.role == "confirm"]
    if confirm and confirm[0].verdict != ArmVerdict.CONFIRMED:
        return (), False
    doubt = [a for a in check.arms if a.role == "ablation" and a.verdict != ArmVerdict.NEEDED]
    if not doubt:
        return members, False
    least = min(doubt, key=lambda a: (_finite(a.gain_pct), a.candidate))
    rest = hs.without(spec, members, least.candidate)
    return rest, len(doubt) >= 2 and bool(rest)


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def _arm_name(a: Arm) -> str:
    """A search arm's candidate; a check's role and candidate."""
    return a.candidate if a.role == "candidate" else f"{a.role} {a.candidate}"


def _cut_words(r: Round) -> str:
    """Why the budget ended round `r`, and what would settle what it left open."""
    left = [_arm_name(a) for a in r.arms if a.verdict == ArmVerdict.UNDECIDED and a.boots]
    where = "the checks" if r.kind == "check" else f"round {r.index + 1}"
    words = f"budget: spent in {where} at {r.cut} boots a side"
    if left:
        more = f"about {r.more_boots} more boots would settle them"
        words += f"; undecided: {', '.join(left)} ({more})"
    return words


def _outlook(rp: Replay, rounds: Sequence[Round]) -> hs.RoundPlan | None:
    """The round in progress's design, or the one the scatter of the rounds before gives."""
    last = rounds[-1]
    if last.plan is not None:
        return last.plan
    v = variance(pool := rp.pool([]))
    arms = sum(1 for a in last.arms if a.verdict != ArmVerdict.DROPPED) or len(last.arms)
    return None if v is None else hs.round_design(rp.spec, arms, v, float(np.max(pool.df)))[1]


def _check_round(rp: Replay, incumbent: tuple[str, ...], index: int):
    """The final on fresh boots as the shared reference: the confirm (final against the
    start) and one ablation per adopted candidate (final against the final without it and
    its dependants), each booted once; an ablation whose set is another check's (the
    start's: the confirm's) is that check's arm. (round, pending, failure)."""
    spec = rp.spec
    checks: dict[str, Side] = {}  # variant -> its arm
    if spec.confirm:
        s = rp.side((), candidate="+".join(incumbent), role="confirm")
        checks[s.variant] = s
    shared: list[tuple[str, str]] = []  # (candidate, the variant booted for another check)
    for c in incumbent if spec.ablate else ():
        rest = hs.without(spec, incumbent, c)  # its dependants go with it
        if rp.name(rest) in checks:
            shared.append((c, rp.name(rest)))
        else:
            checks[rp.name(rest)] = rp.side(rest, candidate=c, role="ablation")
    run = run_round(rp, rp.side(incumbent), list(checks.values()), check=True)
    out, r = _finish(rp, "check", index, run)
    by_variant = {a.variant: a for a in out}
    out += [_shared_ablation(by_variant[v]._replace(candidate=c)) for c, v in shared]
    return r._replace(arms=tuple(out)), run.pending, run.failure


def _pruned(spec: hs.HuntSpec, incumbent: tuple[str, ...], check: Round) -> tuple[str, ...]:
    """The incumbent less the member whose own ablation arm found it not needed (the
    smallest contribution, with its dependants), as measured on the check round's fresh
    boots: one at most, since two members that each make the other redundant are each not
    needed. A confirm that fails prunes nothing: it is reported as such."""
    gone = [a for a in check.arms if a.role == "ablation" and a.verdict == ArmVerdict.NOT_NEEDED]
    gone = [a for a in gone if a.boots and math.isfinite(a.gain_pct)]  # not the confirm's
    if not gone:
        return incumbent
    least = min(gone, key=lambda a: (a.gain_pct, a.candidate))
    return hs.without(spec, incumbent, least.candidate)


def _shared_ablation(arm: Arm) -> Arm:
    """An ablation measured by another check's arm (its set, with its dependants removed,
    is that arm's): its boots and GPU-hours are counted there, so none here."""
    verdict = {
        ArmVerdict.CONFIRMED: ArmVerdict.NEEDED,
        ArmVerdict.NOT_CONFIRMED: ArmVerdict.NOT_NEEDED,
    }.get(arm.verdict, arm.verdict)
    reason = f"the {arm.role}'s arm: without it the final is {arm.variant}"
    return arm._replace(role="ablation", verdict=verdict, reason=reason, boots=(),
                        uncounted=(), gpu_hours=0.0)  # fmt: skip


# ---- the budget and the worst case -------------------------------------------------------


def _future_worst(spec: hs.HuntSpec, adopted: int, remaining: int, first: bool) -> int:
    """Boots of every later round if each adopts one candidate, then the checks (`first`:
    the first of them is round 1, whose reference is booted for the first time too)."""
    boots = sum(
        hs.round_boots(spec, remaining - j, remaining - j + (1 if first and j == 0 else 0))
        for j in range(remaining)
    )
    return boots + hs.check_boots(spec, adopted + remaining)


def _screen_worst(spec: hs.HuntSpec, left: int, kept: int) -> int:
    """The screen design's boots to come with `left` candidates still to screen and `kept`
    kept so far: their screen steps, then a check round of every member, and again with
    one member fewer each time, down to one."""
    screen = left * hs.screen_variant_boots(spec)
    return screen + sum(hs.check_boots(spec, n) for n in range(1, kept + left + 1))


def worst_case(spec: hs.HuntSpec) -> Cost:
    """The most boots / GPU-hours the whole hunt can take (for the plan)."""
    boots = _future_worst(spec, 0, len(spec.candidates), first=True)
    if spec.design == "screen":
        start = hs.screen_variant_boots(spec) + spec.reference_retries
        boots = start + _screen_worst(spec, len(spec.candidates), 0)
    return Cost(boots, boots * hs.max_gpu_hours(spec))


def expected_round(spec: hs.HuntSpec, arms: int, cv_pct: float, new: int = 0) -> float:
    """About how many boots a search round of `arms` arms takes at a boot CV of `cv_pct`
    when no arm gains (each stops at its futility bound: budget.expected_boots), sized as
    the replay sizes it (a pool of PLAN_DF df at its first look), with a first boot left
    out for each of `new` new variants (unless first boots always count)."""
    from servesweep.hunt.budget import expected_boots

    if arms < 1:
        return 0.0
    variance = math.log1p((cv_pct / 100) ** 2)
    d, _ = hs.round_design(spec, arms, variance, float(PLAN_DF), spec.boots_min)
    first = 0 if spec.first_boot == "keep" else new
    return expected_boots(d, variance, arms).total + first


def expected_case(spec: hs.HuntSpec, cv_pct: float) -> Cost:
    """About how many boots the whole hunt takes on its longest path (each round adopting
    one candidate, as `worst_case`), each round's arms deciding as arms that gain nothing
    do, then the checks at the same rate: a guide beside the worst case, not a bound."""
    m = len(spec.candidates)
    boots = sum(expected_round(spec, m - j, cv_pct, m - j + (j == 0)) for j in range(m))
    if spec.design == "screen":  # the pass, then one check round of every member
        boots = float((1 + m) * hs.screen_variant_boots(spec))
    confirm = 1 if spec.confirm else 0
    ablations = m if spec.ablate and (m >= 2 or not confirm) else 0
    boots += expected_round(spec, confirm + ablations, cv_pct, ablations)
    return Cost(round(boots), round(boots) * hs.max_gpu_hours(spec))


def _over_budget(spec: hs.HuntSpec, boots: int, hours: float) -> bool:
    too_many = spec.budget_boots is not None and boots > spec.budget_boots
    return too_many or (spec.budget_gpu_hours is not None and hours > spec.budget_gpu_hours + 1e-9)


def _check_first_look(spec: hs.HuntSpec, adopted: int) -> tuple[int, float]:
    """The check round's first look (boots, GPU-hours at the dearest stack) after `adopted`
    candidates: what a search round keeps back for it."""
    boots = hs.check_boots(spec, adopted, spec.boots_min)
    return boots, boots * hs.max_gpu_hours(spec)


def _first_look_fits(spec, rp: Replay, incumbent, names) -> bool:
    """Whether the next round's first look, with the checks' first look kept back, stays
    within the budget (the rest of the round is granted look by look: `run_round`)."""
    first = not rp.samples
    boots = hs.round_boots(spec, len(names), len(names) + first, spec.boots_min)
    ref = rp.name(incumbent)
    extra = 0 if spec.first_boot == "keep" else 1
    n = spec.boots_min
    hours = (n + extra) * sum(rp.hours(rp.name((*incumbent, c))) for c in names)
    hours += (n + spec.reference_retries + (extra if first else 0)) * rp.hours(ref)
    reserve = _check_first_look(spec, len(incumbent) + 1)
    return not _over_budget(
        spec, rp.asked_boots + boots + reserve[0], rp.asked_hours + hours + reserve[1]
    )


def _left(spec, rounds, incumbent, excluded, pending: int) -> Cost:
    """Worst-case boots still to come: the rest of the current round, then every later round
    adopting one candidate each, then the checks."""
    if not pending:
        return Cost(0, 0.0)
    last = rounds[-1]
    if spec.design == "screen" and last.kind == "search":  # in the screen
        screened = {a.candidate for r in rounds for a in r.arms}
        left = sum(1 for c in spec.candidates if c.name not in screened)
        boots = pending + _screen_worst(spec, left, len(incumbent) + 1)
        return Cost(boots, boots * hs.max_gpu_hours(spec))
    first = 0 if spec.first_boot == "keep" else 1
    n = spec.boots_max
    now = n + spec.reference_retries - len(last.reference_boots) + first * (last.index == 0)
    now += sum(
        n + first * (a.boots[:1] == (0,)) - len(a.boots)
        for a in last.arms
        if a.verdict == ArmVerdict.RUNNING
    )
    now += pending
    if last.kind == "check":  # the screen design may check a smaller set again
        smaller = range(1, len(incumbent)) if spec.design == "screen" else ()
        later = sum(hs.check_boots(spec, n) for n in smaller)
    else:
        remaining = len(hs.applicable(spec, incumbent, excluded)) - 1
        later = _future_worst(spec, len(incumbent) + 1, remaining, first=False)
    boots = max(now, 0) + later
    return Cost(boots, boots * hs.max_gpu_hours(spec))
