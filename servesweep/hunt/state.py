"""The hunt as a pure, deterministic state machine: `advance(spec, observations)` replays
the hunt from its start over what has been measured and returns the path so far and the
boots still needed next.

Boot indices: each composed variant counts its boots from 0 in the order the replay
requests them (the reference of round 2 continues after its boots as a candidate in round
1, and so on), so the same observations always give the same requests, an interrupted hunt
resumes where it stopped, no (variant, boot) is ever requested twice, and a finished hunt
needs nothing. A request stays at the stage it belongs to: the next stage is requested only
when every boot of the current one is in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from servesweep.hunt import spec as hs
from servesweep.hunt.sequential import Design, decide


class BootKey(NamedTuple):
    variant: str  # composed variant name
    boot: int  # boot index of that variant (r<boot>)


class BootResult(NamedTuple):
    """One boot: per counted level objective values, or a failure cause."""

    values: Mapping[Any, float] | None = None
    failure: str | None = None
    answers_changed: bool = False


Role = Literal["candidate", "confirm", "ablation"]


class Arm(NamedTuple):
    candidate: str  # the candidate tested (confirm: the final's members, "+" joined)
    variant: str
    role: Role
    verdict: str  # adopt/reject/undecided/dropped/running (confirm, ablation: see docs)
    reason: str
    gain_pct: float  # candidate over reference (confirm / ablation: final over this arm)
    low_pct: float
    high_pct: float
    rank_pct: float  # the lower bound adopted arms are ranked by (sequential.Look)
    level: Any
    boots: tuple[int, ...]  # boot indices of this arm's variant requested in this round
    gpu_hours: float


class Round(NamedTuple):
    index: int
    kind: Literal["search", "check"]
    reference: str  # the incumbent's variant (check: the final variant)
    reference_boots: tuple[int, ...]
    arms: tuple[Arm, ...]
    adopted: str | None  # the candidate that became the next incumbent
    gpu_hours: float


class Cost(NamedTuple):
    boots: int
    gpu_hours: float


class HuntState(NamedTuple):
    rounds: tuple[Round, ...]
    incumbent: tuple[str, ...]  # adopted candidates, canonical order
    incumbent_variant: str
    excluded: Mapping[str, str]  # candidate -> why it is out of later rounds
    done: bool
    stop_reason: str
    needed: tuple[BootKey, ...]  # what to measure next (stage order, interleaved)
    members: Mapping[str, tuple[str, ...]]  # every variant named so far -> its candidates
    spent: Cost
    worst_case_left: Cost


def _problem(spec: hs.HuntSpec, r: BootResult) -> str | None:
    """Why a candidate's boot disqualifies it, or None."""
    if r.failure:
        return f"crashed: {r.failure}"
    if spec.correctness_gate and r.answers_changed:
        return "changes answers"
    for level in spec.objective.levels:
        v = None if r.values is None else r.values.get(level)
        if v is None or not np.isfinite(v) or v <= 0:
            return f"invalid at level {level}"
    return None


class _Replay:
    """Mutable bookkeeping of one replay; `advance` is its only user."""

    def __init__(self, spec: hs.HuntSpec, observations: Mapping[tuple[str, int], BootResult]):
        self.spec, self.obs = spec, observations
        self.design: Design = hs.design(spec)
        self.next_boot: dict[str, int] = defaultdict(int)
        self.members: dict[str, tuple[str, ...]] = {}
        self.spent_boots, self.spent_hours = 0, 0.0
        self.groups: list[list[list[float]]] = []  # finished rounds' samples (levels x boots)

    def name(self, names: Sequence[str]) -> str:
        v = hs.variant_name(self.spec, names)
        self.members[v] = hs.canonical(self.spec, names)
        return v

    def hours(self, variant: str) -> float:
        return hs.gpu_hours(self.spec, self.members[variant])

    def count(self, variant: str, boots: Sequence[int]) -> float:
        seen = sum(1 for b in boots if (variant, b) in self.obs)
        self.spent_boots += seen
        self.spent_hours += seen * self.hours(variant)
        return len(boots) * self.hours(variant)

    def run_round(
        self, kind: str, ref_names: Sequence[str], arms: Sequence[tuple[str, Sequence[str], Role]]
    ) -> tuple[list[Arm], list[int], list[BootKey], str | None]:
        """One round's stages: (arms, reference boots, pending requests, reference failure)."""
        spec, d = self.spec, self.design
        levels = spec.objective.levels
        ref = self.name(ref_names)
        ref_start = self.next_boot[ref]
        arm_vars = [self.name(n) for _, n, _ in arms]
        starts = [self.next_boot[v] for v in arm_vars]
        open_ = [True] * len(arms)
        result: list[Arm | None] = [None] * len(arms)
        requested = [0] * len(arms)
        ref_req, ref_values, ref_fail = 0, [], 0
        ref_problems: set[str] = set()  # why reference boots were replaced
        pending: list[BootKey] = []

        def arm_values(i: int) -> list[list[float]]:  # levels x the boots it has so far
            boots = range(starts[i], starts[i] + requested[i])
            return [[self.obs[(arm_vars[i], j)].values[lv] for j in boots] for lv in levels]

        for k, n in enumerate(d.looks):
            if not any(open_):
                break
            # the reference: n valid boots, failed ones replaced (bounded)
            ref_pending = []
            while len(ref_values) + len(ref_pending) < n and ref_fail <= spec.reference_retries:
                key = BootKey(ref, ref_start + ref_req)
                ref_req += 1
                r = self.obs.get(key)
                if r is None:
                    ref_pending.append(key)
                elif (why := _problem(spec, BootResult(r.values, r.failure))) is not None:
                    ref_fail += 1
                    ref_problems.add(why)
                else:
                    ref_values.append([r.values[lv] for lv in levels])
            arm_pending: list[list[BootKey]] = [[] for _ in arms]
            for i in range(len(arms)):
                if not open_[i]:
                    continue
                requested[i] = n
                for j in range(n):
                    key = BootKey(arm_vars[i], starts[i] + j)
                    r = self.obs.get(key)
                    if r is None:
                        arm_pending[i].append(key)
                    elif (why := _problem(spec, r)) is not None:
                        if why in ref_problems:  # not the arm's doing
                            why += " (so was a boot of the reference)"
                        open_[i] = False
                        result[i] = self._arm(arms[i], arm_vars[i], "dropped", why, None, n)
                        arm_pending[i] = []
                        break
            if ref_fail > spec.reference_retries or not any(open_):
                break
            width = max([len(ref_pending)] + [len(p) for p in arm_pending])
            for j in range(width):  # interleaved: reference, then each arm, boot by boot
                pending += [p[j] for p in [ref_pending, *arm_pending] if j < len(p)]
            if pending:
                break
            ref_arr = np.asarray(ref_values[:n], dtype=float).T  # levels x boots
            measured = {
                i: arm_values(i)
                for i in range(len(arms))
                if open_[i] or (result[i] is not None and result[i].verdict != "dropped")
            }
            for i in range(len(arms)):
                if not open_[i]:
                    continue
                vals = measured[i]
                others = None
                if spec.pool_variance:  # every other sample of the hunt, level by level
                    others = [*self.groups, *(m for j, m in measured.items() if j != i)]
                check = arms[i][2] != "candidate"  # the final is the one on trial
                a, b = (ref_arr, vals) if check else (vals, ref_arr)
                look = decide(d, k, b, a, levels, spec.objective.higher_is_better, others)
                if look.verdict != "continue":
                    open_[i] = False
                    result[i] = self._arm(arms[i], arm_vars[i], look.verdict, look.reason, look, n)
        for i in range(len(arms)):
            if result[i] is None:
                result[i] = self._arm(arms[i], arm_vars[i], "running", "measuring", None, 0)
        arms_out = []
        for i, arm in enumerate(result):
            boots = tuple(range(starts[i], starts[i] + requested[i]))
            self.next_boot[arm_vars[i]] = starts[i] + requested[i]
            arms_out.append(arm._replace(boots=boots, gpu_hours=self.count(arm.variant, boots)))
        ref_boots = list(range(ref_start, ref_start + ref_req))
        self.next_boot[ref] = ref_start + ref_req
        if not pending:  # this round's samples join the pool of later rounds' looks
            self.groups.append(np.asarray(ref_values, dtype=float).T.tolist())
            self.groups += [
                arm_values(i)
                for i in range(len(arms))
                if result[i].verdict != "dropped" and requested[i] >= 2
            ]
        failure = None
        if ref_fail > spec.reference_retries:
            failure = f"reference failed ({'; '.join(sorted(ref_problems))})"
        return arms_out, ref_boots, pending, failure

    def _arm(self, arm, variant: str, verdict: str, reason: str, look, n: int) -> Arm:
        name, _, role = arm
        if role != "candidate" and verdict in ("adopt", "reject", "undecided"):
            verdict = {
                "confirm": {"adopt": "confirmed", "reject": "not confirmed"},
                "ablation": {"adopt": "needed", "reject": "not needed"},
            }[role].get(verdict, verdict)
        nan = float("nan")
        if look is None:
            return Arm(name, variant, role, verdict, reason, nan, nan, nan, nan, None, (), 0.0)
        g, lo, hi, rk = look.gain_pct, look.low_pct, look.high_pct, look.rank_pct
        return Arm(name, variant, role, verdict, reason, g, lo, hi, rk, look.level, (), 0.0)


def _reused_ablation(arm: Arm) -> Arm:
    """An ablation measured by another arm: the last adopted candidate's is its own adoption
    (final minus it was that round's incumbent, measured interleaved with the final on
    fresh boots), and one whose removal (with its dependants) leaves the set of another
    check is that check's. Its boots and GPU-hours are counted there, so none here."""
    verdict = {"adopt": "needed", "confirmed": "needed", "not confirmed": "not needed"}
    return arm._replace(
        role="ablation", verdict=verdict.get(arm.verdict, arm.verdict), boots=(), gpu_hours=0.0
    )


def _round_worst(spec: hs.HuntSpec, arms: int) -> int:
    return spec.boots_max * (1 + arms) + spec.reference_retries


def _future_worst(spec: hs.HuntSpec, adopted: int, remaining: int) -> int:
    """Boots of every later round if each adopts one candidate, then the checks."""
    boots = sum(_round_worst(spec, remaining - j) for j in range(remaining))
    return boots + _check_worst(spec, adopted + remaining)


def _check_worst(spec: hs.HuntSpec, adopted: int) -> int:
    arms = (1 if spec.confirm else 0) + (adopted - 1 if spec.ablate and adopted else 0)
    return _round_worst(spec, arms) if adopted and arms else 0


def worst_case(spec: hs.HuntSpec) -> Cost:
    """The most boots / GPU-hours the whole hunt can take (for the plan)."""
    boots = _future_worst(spec, 0, len(spec.candidates))
    return Cost(boots, boots * hs.max_gpu_hours(spec))


def _over_budget(spec: hs.HuntSpec, boots: int, hours: float) -> bool:
    too_many = spec.budget_boots is not None and boots > spec.budget_boots
    return too_many or (spec.budget_gpu_hours is not None and hours > spec.budget_gpu_hours + 1e-9)


def _pick(arms: Sequence[Arm], order: Mapping[str, int]) -> Arm | None:
    """The adopted arm with the largest lower bound (rank_pct); ties: the larger estimate,
    then the candidate listed first in the spec."""
    adopted = [a for a in arms if a.verdict == "adopt"]
    return max(adopted, key=lambda a: (a.rank_pct, a.gain_pct, -order[a.candidate]), default=None)


def advance(spec: hs.HuntSpec, observations: Mapping[tuple[str, int], BootResult]) -> HuntState:
    """Replay the hunt over `observations` ((variant, boot) -> BootResult); observations the
    hunt never asked for are ignored."""
    rp = _Replay(spec, observations)
    order = {c.name: i for i, c in enumerate(spec.candidates)}
    rounds: list[Round] = []
    incumbent: tuple[str, ...] = ()
    excluded: dict[str, str] = {}
    pending: list[BootKey] = []
    rp.name(())
    stop = ""
    last: Arm | None = None  # the arm that adopted the last candidate, as measured then
    while True:  # search rounds
        names = hs.applicable(spec, incumbent, excluded)
        if not names:
            stop = "candidates exhausted"
            break
        ref = rp.name(incumbent)
        worst = _round_worst(spec, len(names))
        hours = spec.boots_max * sum(rp.hours(rp.name((*incumbent, c))) for c in names)
        hours += (spec.boots_max + spec.reference_retries) * rp.hours(ref)
        reserve = _check_worst(spec, len(incumbent) + 1)
        peak = hs.max_gpu_hours(spec)
        if _over_budget(
            spec, rp.spent_boots + worst + reserve, rp.spent_hours + hours + reserve * peak
        ):
            stop = "budget: the next round could exceed it"
            break
        arms = [(c, (*incumbent, c), "candidate") for c in names]
        out, ref_boots, pending, failure = rp.run_round("search", incumbent, arms)
        ref_hours = rp.count(ref, ref_boots)
        best = None if pending or failure else _pick(out, order)
        rounds.append(
            Round(
                len(rounds),
                "search",
                ref,
                tuple(ref_boots),
                tuple(out),
                best.candidate if best else None,
                ref_hours + sum(a.gpu_hours for a in out),
            )
        )
        if pending:
            break
        if failure:
            stop = f"{failure}: {ref} failed more than {spec.reference_retries} boots"
            break
        for a in out:
            if a.verdict == "dropped" or (a.verdict == "reject" and not spec.retest_rejected):
                excluded[a.candidate] = f"round {len(rounds) - 1}: {a.reason}"
        if best is None:
            stop = "a round adopted nothing"
            break
        incumbent = hs.canonical(spec, (*incumbent, best.candidate))
        last = best._replace(reason=f"adopted in round {len(rounds) - 1} on top of the others")
    if not pending and incumbent and (spec.confirm or (spec.ablate and len(incumbent) > 1)):
        checks: dict[str, tuple[str, tuple[str, ...], str]] = {}
        if spec.confirm:
            checks[rp.name(())] = ("+".join(incumbent), (), "confirm")
        shared: list[tuple[str, str]] = []  # (candidate, variant booted for another check)
        for c in incumbent if spec.ablate else ():
            rest = hs.without(spec, incumbent, c)  # its dependants go with it
            if c == last.candidate:  # the last one was measured on top of all the others
                continue
            if rp.name(rest) in checks:
                shared.append((c, rp.name(rest)))
            else:
                checks[rp.name(rest)] = (c, rest, "ablation")
        out, ref_boots, pending, failure = rp.run_round("check", incumbent, list(checks.values()))
        by_variant = {a.variant: a for a in out}
        out += [_reused_ablation(by_variant[v]._replace(candidate=c)) for c, v in shared]
        if spec.ablate and len(incumbent) > 1:
            out.append(_reused_ablation(last))
        ref = rp.name(incumbent)
        ref_hours = rp.count(ref, ref_boots)
        rounds.append(
            Round(
                len(rounds),
                "check",
                ref,
                tuple(ref_boots),
                tuple(out),
                None,
                ref_hours + sum(a.gpu_hours for a in out),
            )
        )
        if failure and not pending:
            stop += f"; checks: {failure}"
    left = _left(spec, rp, rounds, incumbent, excluded, len(pending))
    return HuntState(
        rounds=tuple(rounds),
        incumbent=incumbent,
        incumbent_variant=hs.variant_name(spec, incumbent),
        excluded=dict(excluded),
        done=not pending,
        stop_reason="" if pending else stop,
        needed=tuple(pending),
        members=dict(rp.members),
        spent=Cost(rp.spent_boots, rp.spent_hours),
        worst_case_left=left,
    )


def _left(spec, rp: _Replay, rounds, incumbent, excluded, pending: int) -> Cost:
    """Worst-case boots still to come: the rest of the current round, then every later round
    adopting one candidate each, then the checks."""
    if not pending:
        return Cost(0, 0.0)
    last = rounds[-1]
    n = spec.boots_max
    now = n + spec.reference_retries - len(last.reference_boots)
    now += sum(n - len(a.boots) for a in last.arms if a.verdict == "running") + pending
    if last.kind == "check":
        later = 0
    else:
        remaining = len(hs.applicable(spec, incumbent, excluded)) - 1
        later = _future_worst(spec, len(incumbent) + 1, remaining)
    boots = max(now, 0) + later
    return Cost(boots, boots * hs.max_gpu_hours(spec))
