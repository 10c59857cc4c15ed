"""The screen (`hunt.design: screen`): one pass over the candidates in listing order, each
applied on top of what the pass has kept so far and measured on `screen_boots` counted
boots, kept when its point estimate beats the incumbent's (the last kept variant's boots,
at first the start's): better on the mean over the counted levels of the log gain. Nothing
here is a test: the check round after it (the confirm and an ablation of every kept member
on fresh boots, `state._check_round`) decides what stays, at the round's α.

The same observations give the same steps: a step asks for its boots (the start's with the
first step's, interleaved) and the pass goes on only when they are in; a step whose boots
(with the start's retries and `reserve`, the checks' first look) would take the hunt past
its budget is never asked for, and the pass ends there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from servesweep.hunt import spec as hs
from servesweep.hunt.rounds import ArmVerdict, BootKey, Replay, Side
from servesweep.hunt.sequential import Decision, Look


class Step(NamedTuple):
    reference: Side  # the incumbent: the start, or the last kept arm
    arm: Side


class ScreenRun(NamedTuple):
    start: Side
    steps: list[Step]
    kept: tuple[str, ...]  # canonical order
    pending: list[BootKey]
    failure: str | None  # the start failed more boots than its retries
    cut: bool  # the budget ended the pass before every candidate was screened


def run_screen(rp: Replay, reserve: tuple[int, float]) -> ScreenRun:
    spec = rp.spec
    k = spec.screen_boots
    start = rp.side(())
    ref = start
    kept: tuple[str, ...] = ()
    steps: list[Step] = []
    gone: set[str] = set()
    for c in spec.candidates:
        if c.name not in hs.applicable(spec, kept, gone):
            continue
        arm = rp.side((*kept, c.name), candidate=c.name)
        while True:
            asked = [start.requested, ref.requested, arm.requested]
            pending = rp.fill_reference(start, k) if ref is start else []
            ref_more = [] if ref is start else rp.fill_arm(ref, k, start)  # r0 left out later
            mine = rp.fill_arm(arm, k, ref)
            if not rp.fits([start, *(s.arm for s in steps), arm], reserve):
                start.requested, ref.requested, arm.requested = asked[0], asked[1], asked[2]
                arm.open, arm.verdict = False, ArmVerdict.UNDECIDED
                arm.reason = "undecided: the budget ran out before its screen"
                return ScreenRun(start, [*steps, Step(ref, arm)], kept, [], None, True)
            if start.failures > spec.reference_retries:
                why = f"reference failed ({'; '.join(sorted(start.problems))})"
                return ScreenRun(start, steps, kept, [], why, False)
            width = max(len(pending), len(ref_more), len(mine))
            pending = [p[j] for j in range(width) for p in (pending, ref_more, mine) if j < len(p)]
            if pending:
                return ScreenRun(start, [*steps, Step(ref, arm)], kept, pending, None, False)
            sides = [start, *(s.arm for s in steps), arm]
            if arm.open and rp.check_first_boots(sides):
                continue  # r0 is now left out: each side needs one boot more
            break
        steps.append(Step(ref, arm))
        if ref.verdict == ArmVerdict.DROPPED:  # a kept variant's later boot failed
            return ScreenRun(start, steps, kept, [], f"{ref.variant}: {ref.reason}", False)
        if arm.verdict == ArmVerdict.DROPPED:
            gone.add(c.name)
            continue
        arm.look = _point_look(rp, ref, arm)
        arm.open = False
        if arm.look.verdict == Decision.ADOPT:
            arm.verdict, arm.reason = ArmVerdict.ADOPT, arm.look.reason
            kept, ref = hs.canonical(spec, (*kept, c.name)), arm
        else:
            arm.verdict, arm.reason = ArmVerdict.REJECT, arm.look.reason
            gone.add(c.name)
    return ScreenRun(start, steps, kept, [], None, False)


def _point_look(rp: Replay, ref: Side, arm: Side) -> Look:
    """The arm against the incumbent on their counted boots' point estimates: kept when the
    mean over the counted levels of the log gain is above 0. No margin here: on a few boots
    an unchanged level dips past it often; the ablation's non-inferiority at every level,
    on fresh boots, is what keeps a trade-off out."""
    sign = 1 if rp.spec.objective.higher_is_better else -1
    a = np.log(np.asarray(rp.counted(arm), dtype=float))
    b = np.log(np.asarray(rp.counted(ref), dtype=float))
    gains = sign * (a.mean(axis=1) - b.mean(axis=1))
    best = int(np.argmax(gains))
    n = min(a.shape[1], b.shape[1])
    pct = 100 * math.expm1(float(gains.mean()))
    kept = gains.mean() > 0
    verdict = Decision.ADOPT if kept else Decision.REJECT
    word = "kept" if kept else "not kept"
    why = f"screen: {word}, {pct:+.1f} % over {ref.variant} on the mean of {n} boots a side"
    g = 100 * math.expm1(float(gains[best]))
    return Look(verdict, why, n, rp.levels[best], g, math.nan, math.nan, math.nan)
