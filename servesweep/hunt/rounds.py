"""One round of the hunt, look by look: the boots it asks for, the boot scatter pooled over
every sample the hunt has measured, each arm's decision (`servesweep.hunt.sequential`), and
the first boots left out once they are seen to differ. `servesweep.hunt.state.replay` runs
the rounds in order; this module keeps the bookkeeping of one replay (`Replay`) and of one
round's sides (`Side`: the reference or an arm, one record each).

A look at n boots a side needs n *counted* boots of each side: a variant's first boot (r0)
is measured, recorded and shown, but left out of every decision and of the pool once the
hunt's first boots are uncounted (`spec.first_boot` drop, or auto and the first-boot
contrast over the hunt's samples is significant); a variant booted for the first time then
needs n + 1 boots for a look at n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, NamedTuple, cast

import numpy as np

from servesweep import stats
from servesweep.hunt import spec as hs
from servesweep.hunt.budget import truncate
from servesweep.hunt.sequential import Decision, Design, Look, decide

Role = Literal["candidate", "confirm", "ablation"]
# A round's boots a side are fixed from a pooled scatter of at least this many df (its
# relative sd is sqrt(2 / df): 0.45 at 10); the looks before decide with the cap's design.
PLAN_DF = 10
# Auto: first boots are left out once they differ from later ones by more than δ,
# significantly at FIRST_BOOT_P (tested at every look until then: stricter than the grid's 5 %).
FIRST_BOOT_P = 0.01


class BootKey(NamedTuple):
    variant: str  # composed variant name
    boot: int  # boot index of that variant (r<boot>)


class BootResult(NamedTuple):
    """One boot: per counted level objective values, or a failure cause."""

    values: Mapping[Any, float] | None = None
    failure: str | None = None
    answers_changed: bool = False


class ArmVerdict(StrEnum):
    """Every verdict an arm can end a round with (hunt.json holds the words)."""

    ADOPT = "adopt"
    REJECT = "reject"
    DROPPED = "dropped"  # a boot failed, was invalid, or changed answers
    RUNNING = "running"  # the round is not done
    UNDECIDED = "undecided"  # the budget ran out before its bounds decided it
    CONFIRMED = "confirmed"  # the final is better than the start (the confirm)
    NOT_CONFIRMED = "not confirmed"
    NEEDED = "needed"  # the final is better with the candidate than without (ablation)
    NOT_NEEDED = "not needed"


CHECK_WORDS = {
    "confirm": {Decision.ADOPT: ArmVerdict.CONFIRMED, Decision.REJECT: ArmVerdict.NOT_CONFIRMED},
    "ablation": {Decision.ADOPT: ArmVerdict.NEEDED, Decision.REJECT: ArmVerdict.NOT_NEEDED},
}


class FirstBoots(NamedTuple):
    uncounted: bool  # r0 left out of the decisions (and the pool)
    why: str


def problem(spec: hs.HuntSpec, r: BootResult, gate: bool = True) -> str | None:
    """Why a boot disqualifies its arm (`gate`: answers count), or None."""
    if r.failure:
        return f"crashed: {r.failure}"
    if gate and spec.correctness_gate and r.answers_changed:
        return "changes answers"
    for level in spec.objective.levels:
        v = None if r.values is None else r.values.get(level)
        if v is None or not np.isfinite(v) or v <= 0:
            return f"invalid at level {level}"
    return None


@dataclass
class Side:
    """One variant's boots in one round: the reference, or an arm (one record per arm)."""

    variant: str
    start: int  # its first boot index in this round
    candidate: str = ""  # the candidate tested (confirm: the final's members, "+" joined)
    role: Role = "candidate"
    requested: int = 0  # boots asked for in this round
    valid: list[int] = field(default_factory=list)  # boots measured and valid, in order
    values: dict[int, list[float]] = field(default_factory=dict)  # boot -> per level
    failures: int = 0
    problems: set[str] = field(default_factory=set)
    open: bool = True
    verdict: ArmVerdict = ArmVerdict.RUNNING
    reason: str = "measuring"
    look: Look | None = None

    @property
    def boots(self) -> tuple[int, ...]:
        return tuple(range(self.start, self.start + self.requested))


class Replay:
    """Mutable bookkeeping of one replay of the hunt (`servesweep.hunt.state.replay`)."""

    def __init__(self, spec: hs.HuntSpec, observations: Mapping[BootKey, BootResult]):
        self.spec, self.obs = spec, observations
        self.levels = spec.objective.levels
        self.next_boot: dict[str, int] = {}
        self.members: dict[str, tuple[str, ...]] = {}
        self.spent_boots, self.spent_hours = 0, 0.0
        self.asked_boots, self.asked_hours = 0, 0.0  # requested by the finished rounds
        self.samples: list[Side] = []  # every finished round's sides, for the pool
        self.first = FirstBoots(spec.first_boot == "drop", f"hunt.first_boot: {spec.first_boot}")
        if spec.first_boot == "auto":
            self.first = FirstBoots(False, "first boots not seen to differ")
        if spec.first_boot == "auto" and spec.compiles_on_first_use:
            self.first = FirstBoots(True, "the engine compiles on first use")
        elif spec.first_boot == "auto" and spec.design == "screen":
            why = "the screen decides on too few boots to see first boots differ first"
            self.first = FirstBoots(True, why)

    def name(self, names: Sequence[str]) -> str:
        v = hs.variant_name(self.spec, names)
        self.members[v] = hs.canonical(self.spec, names)
        return v

    def hours(self, variant: str) -> float:
        return hs.gpu_hours(self.spec, self.members[variant])

    def count(self, variant: str, boots: Sequence[int]) -> float:
        """Adds the boots measured to what is spent; returns what all of them cost."""
        seen = sum(1 for b in boots if (variant, b) in self.obs)
        self.spent_boots += seen
        self.spent_hours += seen * self.hours(variant)
        return len(boots) * self.hours(variant)

    def fits(self, sides: Sequence[Side], reserve: tuple[int, float]) -> bool:
        """Whether what the finished rounds asked for, what `sides` ask for now, the
        reference's retries left in this round (`sides[0]`) and `reserve` (the checks'
        first look) stay within the budget."""
        spec = self.spec
        retries = max(spec.reference_retries - sides[0].failures, 0)
        boots = self.asked_boots + sum(s.requested for s in sides) + retries + reserve[0]
        hours = self.asked_hours + sum(s.requested * self.hours(s.variant) for s in sides)
        hours += retries * self.hours(sides[0].variant) + reserve[1]
        over = spec.budget_boots is not None and boots > spec.budget_boots
        return not over and not (
            spec.budget_gpu_hours is not None and hours > spec.budget_gpu_hours + 1e-9
        )

    def side(self, names: Sequence[str], **kw) -> Side:
        variant = self.name(names)
        return Side(variant, self.next_boot.get(variant, 0), **kw)

    def uncounted(self, boot: int) -> bool:
        return self.first.uncounted and boot == 0

    def counted(self, s: Side) -> list[list[float]]:
        """levels x the side's counted boots (in order)."""
        boots = [b for b in s.valid if not self.uncounted(b)]
        return [[s.values[b][i] for b in boots] for i in range(len(self.levels))]

    # ---- the boots a look needs -------------------------------------------------------

    def fill_reference(self, s: Side, n: int) -> list[BootKey]:
        """The reference's requests for n counted valid boots (failed ones replaced, at most
        `reference_retries` a round)."""
        s.valid, s.failures, s.problems = [], 0, set()
        pending: list[BootKey] = []
        j = s.start
        while j < s.start + s.requested or (
            len([b for b in s.valid if not self.uncounted(b)])
            + len([k for k in pending if not self.uncounted(k.boot)])
            < n
            and s.failures <= self.spec.reference_retries
        ):
            s.requested = max(s.requested, j - s.start + 1)
            r = self.obs.get(BootKey(s.variant, j))
            if r is None:
                pending.append(BootKey(s.variant, j))
            elif (why := problem(self.spec, r, gate=False)) is not None:
                s.failures += 1
                s.problems.add(why)
            else:
                s.valid.append(j)
                s.values[j] = [cast(Mapping, r.values)[lv] for lv in self.levels]  # valid
            j += 1
        return pending

    def fill_arm(self, s: Side, n: int, reference: Side) -> list[BootKey]:
        """An open arm's requests for n counted boots; a bad boot drops it."""
        need = n + (1 if self.uncounted(s.start) else 0)
        s.requested = max(s.requested, need)
        s.valid, pending = [], []
        for j in s.boots:
            r = self.obs.get(BootKey(s.variant, j))
            if r is None:
                pending.append(BootKey(s.variant, j))
            elif (why := problem(self.spec, r)) is not None:
                if why in reference.problems:  # not the arm's doing
                    why += " (so was a boot of the reference)"
                s.open, s.verdict, s.reason = False, ArmVerdict.DROPPED, why
                return []
            else:
                s.valid.append(j)
                s.values[j] = [cast(Mapping, r.values)[lv] for lv in self.levels]  # valid
        return pending

    # ---- the pool and the first boots --------------------------------------------------

    def scatter(self, s: Side, n: int | None = None) -> stats.Scatter:
        x = np.asarray(self.counted(s), dtype=float)
        if x.size == 0:
            return stats.Scatter(np.zeros(len(self.levels)), 0)
        return stats.scatter([x[:, :n] if n else x])

    def pool(self, sides: Sequence[Side]) -> stats.Scatter:
        total = stats.Scatter(np.zeros(len(self.levels)), 0)
        for s in [*self.samples, *sides]:
            total = total + self.scatter(s)
        return total

    def check_first_boots(self, sides: Sequence[Side]) -> bool:
        """Auto: whether first boots (each variant's r0 against its later boots) now differ
        by more than δ: the signed contrast pooled over the variants at some level
        (servesweep.stats.first_boot_contrast: first boots slower alike), or else their
        scatter about the later boots over all levels (first_boot_scatter: slower at one
        level here, another there, by different amounts), each at p <= FIRST_BOOT_P / 2
        (the contrast's also over the levels). Tested at every look until it turns them
        uncounted (True: this look does)."""
        if self.spec.first_boot != "auto" or self.first.uncounted:
            return False
        by_variant: dict[str, dict[int, list[float]]] = {}
        for s in [*self.samples, *sides]:
            by_variant.setdefault(s.variant, {}).update({b: s.values[b] for b in s.valid})
        boots = [v for v in by_variant.values() if 0 in v and len(v) >= 2]
        if not boots:
            return False
        big = math.log1p(self.spec.min_effect_pct / 100)
        logs = [np.log([v[b] for b in sorted(v)]).T for v in boots]  # levels x boots
        for i, lv in enumerate(self.levels):
            c = stats.first_boot_contrast([x[i] for x in logs])
            if c is None or abs(math.log(c.ratio)) < big:
                continue
            if c.p <= FIRST_BOOT_P / 2 / len(self.levels):
                why = (
                    f"first boots differ at level {lv}: ×{c.ratio:.2f} [{c.low:.2f}, "
                    f"{c.high:.2f}] of later ones over {c.cells} variants (p {c.p:.2g})"
                )
                self.first = FirstBoots(True, why)
                return True
        spread = stats.first_boot_scatter(logs)
        if spread is not None and spread.excess >= big and spread.p <= FIRST_BOOT_P / 2:
            why = (
                f"first boots deviate from later ones by {100 * math.expm1(spread.excess):.0f} "
                f"% (rms beyond the boot scatter) over {spread.cells} variants (p {spread.p:.2g})"
            )
            self.first = FirstBoots(True, why)
            return True
        return False


def variance(pool: stats.Scatter, df: int = PLAN_DF) -> float | None:
    """The largest pooled variance over the counted levels (None: fewer than `df` df)."""
    v = np.asarray(pool.variance, dtype=float)
    enough = np.asarray(pool.df).max() >= df and np.isfinite(v).any()
    return float(np.nanmax(v)) if enough else None


class RoundRun(NamedTuple):
    reference: Side
    arms: list[Side]
    pending: list[BootKey]
    failure: str | None
    plan: hs.RoundPlan | None
    cut: int | None = None  # the budget ended the round at this look (boots a side)
    more: int = 0  # boots that would settle its undecided arms (the rest of its looks)


def run_round(
    rp: Replay,
    reference: Side,
    arms: list[Side],
    check: bool,
    reserve: tuple[int, float] = (0, 0.0),
) -> RoundRun:
    """One round's looks until it needs boots not yet measured, or every arm is decided.
    `check`: the reference (the final) is the one on trial against each arm.

    The round's alpha is divided over the arms still in it at its first look (a crash or
    an answer change on the first boots spends none); its boots a side are fixed from the
    scatter of every boot before it (after round 1), else at its first look whose pool
    has PLAN_DF df, the looks before deciding with the cap's design.

    The budget is granted look by look: a look whose boots (with the reference's retries
    left and `reserve`) would take the hunt past it is not asked for; the look before it
    becomes the round's last (`truncate`: it spends the error left), and an arm it does
    not decide is undecided, with the boots the rest of the round's looks would take."""
    spec = rp.spec
    prior = variance(rp.pool([]))  # a pool from the rounds before: the round sized at once
    family: int | None = None  # the arms alpha is divided over
    d: Design | None = None
    plan: hs.RoundPlan | None = None
    n, pending, failure = spec.boots_min, [], None
    decided: tuple[Design, int] | None = None  # the last look taken: its design and boots
    while any(a.open for a in arms):
        asked = [reference.requested, *(a.requested for a in arms)]
        pending = rp.fill_reference(reference, n)
        per_arm = [rp.fill_arm(a, n, reference) if a.open else [] for a in arms]
        if any(a.open for a in arms) and not rp.fits([reference, *arms], reserve):
            for s, k in zip([reference, *arms], asked, strict=True):
                s.requested = k
            return _cut(rp, reference, arms, check, decided, plan)
        if reference.failures > spec.reference_retries:
            failure = f"reference failed ({'; '.join(sorted(reference.problems))})"
            break
        width = max([len(pending)] + [len(p) for p in per_arm])
        pending = [p[j] for j in range(width) for p in [pending, *per_arm] if j < len(p)]
        if pending or not any(a.open for a in arms):
            break
        if rp.check_first_boots([reference, *arms]):
            plan = None  # sized again on the scatter without them
            continue  # the same look again, its first boots left out: more boots to ask
        family = family or sum(a.open for a in arms)
        pool = rp.pool([] if prior is not None else [reference, *arms])
        v = variance(pool)
        if plan is None and v is not None:
            d, plan = hs.round_design(spec, family, v, float(np.max(pool.df)), n)
            if d.looks[-1] < n:  # the scatter asks for fewer boots than already measured
                d = hs.design(spec, n, family, plan.min_effect_pct, plan.margin_pct)
                plan = plan._replace(boots=n)
        if plan is None:  # too little scatter to size the round yet: the cap's design
            d = hs.design(spec, None, family)
        looked = cast(Design, d)  # set above, or at an earlier look of the round
        decide_look(rp, looked, n, reference, arms, check)
        decided = (looked, n)
        later = [x for x in looked.looks if x > n]
        if not later:
            break
        n = later[0]
    return RoundRun(reference, arms, pending, failure, plan)


def _cut(rp: Replay, reference: Side, arms: list[Side], check: bool, decided, plan) -> RoundRun:
    """The round ended by the budget after the look `decided` ((design, boots a side);
    None: before its first): that look taken again as the last one, its arms' boots as
    they were."""
    is_open = [a for a in arms if a.open]
    if decided is None:  # nothing the bounds can decide on
        for a in is_open:
            a.open, a.verdict = False, ArmVerdict.UNDECIDED
            a.reason = "undecided: the budget ran out before its first look"
        return RoundRun(reference, arms, [], None, plan, 0, 0)
    d, n = decided
    rp.fill_reference(reference, n)
    for a in is_open:
        rp.fill_arm(a, n, reference)
    last = truncate(d, d.looks.index(n), (rp.spec.alpha_spending, rp.spec.beta_spending))
    decide_look(rp, last, n, reference, arms, check)
    left = [a for a in is_open if a.verdict == ArmVerdict.UNDECIDED]
    more = (d.looks[-1] - n) * (1 + len(left)) if left else 0
    for a in left:
        a.reason = (
            f"undecided: the budget ran out at {n} boots a side (the round planned "
            f"{d.looks[-1]}); about {more} more boots would settle the round's undecided arms"
        )
    return RoundRun(reference, arms, [], None, plan, n, more)


def decide_look(rp: Replay, d: Design, n: int, reference: Side, arms: list[Side], check: bool):
    """Every open arm's decision at the look of n boots a side."""
    k = d.looks.index(n) if n in d.looks else len(d.looks) - 1
    total = rp.pool([reference, *arms])
    ref = np.asarray(rp.counted(reference), dtype=float)[:, :n]
    own_ref = rp.scatter(reference, n)
    for a in arms:
        if not a.open:
            continue
        vals = np.asarray(rp.counted(a), dtype=float)[:, :n]
        rest = None
        if rp.spec.pool_variance:  # every other sample of the hunt, level by level
            rest = total - rp.scatter(a, n) - own_ref
        x, y = (ref, vals) if check else (vals, ref)  # the final is the one on trial
        look = decide(d, k, y, x, rp.levels, rp.spec.objective.higher_is_better, rest)
        if look.verdict != Decision.CONTINUE:
            verdict = ArmVerdict(look.verdict.value)
            if check and look.verdict != Decision.UNDECIDED:
                verdict = CHECK_WORDS[a.role][look.verdict]
            a.open, a.verdict, a.reason, a.look = False, verdict, look.reason, look
