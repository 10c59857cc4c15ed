"""A hunt's definition (typed), and composed variants: the start variant plus a set of
candidates, named and merged in one canonical order.

Plain dicts and lists in (`from_dict`), typed out; no other servesweep module is used, the
integrator maps the sweep's config onto this.

Canonical order: the order the candidates are listed in the hunt spec. A set of candidates
always gives the same name (`<start>+<c1>+<c2>`, members in spec order) and the same merge:
the start's flags and env first, then each member's in spec order, a later member's value
overriding an earlier one's for the same key; the stack is the last member's that sets one,
else the start's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

if TYPE_CHECKING:  # the boundaries' maths (scipy) loads when a design is first made,
    # not with every sweep file that reads a hunt section (each run_cell, each Snakemake start)
    from servesweep.hunt.sequential import Design, Spending

SEPARATOR = "+"
FirstBoot = Literal["auto", "drop", "keep"]
HuntDesign = Literal["sequential", "screen"]


@dataclass(frozen=True)
class Candidate:
    name: str
    flags: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    stack: str | None = None  # None: the stack of the variant it is applied on
    requires: tuple[str, ...] = ()  # candidates that must already be adopted
    conflicts: tuple[str, ...] = ()  # candidates it cannot be combined with (symmetric)


@dataclass(frozen=True)
class Start:
    name: str
    stack: str
    flags: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Objective:
    metric: str = "output_throughput"  # a summary column (sweep/hunt.py METRICS)
    higher_is_better: bool = True
    levels: tuple[Any, ...] = ()  # the levels that count
    # better at one or more counted levels and worse at none; Bonferroni over the levels
    rule: Literal["any_better_none_worse"] = "any_better_none_worse"


@dataclass(frozen=True)
class HuntSpec:
    start: Start
    candidates: tuple[Candidate, ...]
    objective: Objective
    min_effect_pct: float = 3.0  # δ: the smallest gain worth adopting
    margin_pct: float | None = None  # non-inferiority margin at every level (None: δ)
    boots_min: int = 1  # boots per side at the first look (a look needs pooled df)
    boots_max: int = 20  # the cap: boots per side at the last look, at most
    stage: int = 1  # boots per side added between looks
    alpha: float = 0.025  # one-sided, per round: P(adopt some arm | no arm gains); the
    # table's two-sided 5 % (Bonferroni over the round's arms and levels)
    power: float = 0.8  # P(adopt | a gain of δ at a counted level, the others unchanged)
    alpha_spending: Spending = "pocock"  # more early adopts of large gains than "obf"
    beta_spending: Spending = "pocock"
    first_boot: FirstBoot = "auto"  # a new variant's r0: auto (left out once first boots
    # are seen to differ), drop (always left out), keep (always counted)
    compiles_on_first_use: bool = False  # the engine does: auto leaves r0 out from the start
    budget_boots: int | None = None
    budget_gpu_hours: float | None = None
    gpu_hours_per_boot: float = 0.0
    gpu_hours_by_stack: Mapping[str, float] = field(default_factory=dict)
    correctness_gate: bool = True  # drop candidates that change answers
    confirm: bool = True  # final vs start on fresh boots
    ablate: bool = True  # final vs final minus each adopted candidate
    retest_rejected: bool = False  # False: a rejection is carried forward to later rounds
    reference_retries: int = 2  # failed reference boots replaced per round
    pool_variance: bool = True  # one boot scatter per level over the hunt (else Welch)
    design: HuntDesign = "screen"  # one pass on point estimates, then checks; or sequential
    screen_boots: int = 2  # the screen's counted boots a side (design: screen)

    def __post_init__(self) -> None:
        validate(self)


class Composed(NamedTuple):
    name: str
    members: tuple[str, ...]  # candidate names, canonical order
    flags: dict[str, Any]
    env: dict[str, str]
    stack: str


def validate(spec: HuntSpec) -> None:
    names = [c.name for c in spec.candidates]
    problems = []
    if len(set(names)) != len(names):
        problems.append("candidate names repeat")
    for name in [spec.start.name, *names]:
        if not name or SEPARATOR in name:
            problems.append(f"name {name!r} is empty or holds {SEPARATOR!r}")
    for c in spec.candidates:
        for other in (*c.requires, *c.conflicts):
            if other not in names or other == c.name:
                problems.append(f"{c.name}: unknown or self reference {other!r}")
    if not spec.objective.levels:
        problems.append("objective.levels is empty")
    if not 0 < spec.alpha < 0.5 or not 0.5 < spec.power < 1:
        problems.append("need 0 < alpha < 0.5 and 0.5 < power < 1")
    fewest = 1 if spec.pool_variance else 2  # Welch needs two boots a side
    if spec.boots_min < fewest or spec.boots_max < spec.boots_min or spec.stage < 1:
        problems.append(f"need {fewest} <= boots_min <= boots_max and stage >= 1")
    if spec.min_effect_pct <= 0:
        problems.append("min_effect_pct must be > 0")
    if spec.margin_pct is not None and not 0 < spec.margin_pct < 100:
        problems.append("margin_pct must be > 0 and < 100")
    if spec.first_boot not in ("auto", "drop", "keep"):
        problems.append("first_boot must be auto, drop or keep")
    if spec.design not in ("sequential", "screen"):
        problems.append("design must be sequential or screen")
    if spec.screen_boots < 1:
        problems.append("screen_boots must be >= 1")
    if spec.design == "screen" and not spec.ablate:
        problems.append(
            "design screen needs ablate: true (the screen keeps a candidate on its mean, and "
            "only its ablation on fresh boots decides whether it stays); or design: sequential"
        )
    if problems:
        raise ValueError("hunt spec: " + "; ".join(problems))


class RoundPlan(NamedTuple):
    """A round's design from the boot scatter seen when it is fixed: the arms its alpha is
    divided over and the boots a side its power needs, within the cap; where the cap is
    short, the smallest gain (and margin) that the cap's boots find with the power."""

    arms: int
    boots: int  # N: boots a side at the last look
    needed: int | None  # boots a side the power needs for δ (None: no scatter yet)
    cv_pct: float  # the pooled boot CV it was fixed from (largest over levels; nan: none)
    min_effect_pct: float  # the gain tested: δ, or what the cap's boots find
    margin_pct: float  # the non-inferiority margin, scaled with it
    df: float = math.inf  # the pool's df it counts on at the last look (the t quantiles)

    @property
    def capped(self) -> bool:
        return self.needed is not None and self.needed > self.boots


def design_words(plan: RoundPlan, delta: float, alpha: float | None, power: float) -> str:
    """A round's design in words, as the plan and the report both say it: its arms and
    alpha (per arm and level), the boots a side its power needs for a gain of δ % at the
    scatter it was sized on, and where the cap is short, the gain the round tests."""
    text = f"{plan.arms} arm(s)"
    if alpha is not None:
        text += f", alpha {alpha:.2g} per arm and level"
    if plan.needed is None or not math.isfinite(plan.cv_pct):
        return text + f"; last look at {plan.boots} boots a side"
    shown = f", power {power:.2f}" if math.isfinite(power) else ""
    text += (
        f"; at a boot CV of {plan.cv_pct:.1f} % a gain of {delta:g} % needs "
        f"{plan.needed} boots a side"
    )
    if not plan.capped:
        return text + f": last look at {plan.boots}{shown}"
    return (
        text + f"; the cap is {plan.boots}{shown} at {delta:g} %: the round tested a "
        f"gain of {plan.min_effect_pct:.1f} % (margin {plan.margin_pct:.1f} %) instead"
    )


def margin(spec: HuntSpec) -> float:
    return spec.min_effect_pct if spec.margin_pct is None else spec.margin_pct


def scaled_margin(margin_pct: float, scale: float) -> float:
    """A margin whose log, -log(1 - m), is `scale` times this one's: below 100 % however
    large the scale (a noisy host's cap can find only gains of +100 % and more, and a margin
    scaled as a plain fraction would reach -100 %)."""
    return -100 * math.expm1(scale * math.log1p(-min(margin_pct, 99.9) / 100))


def design(
    spec: HuntSpec,
    boots: int | None = None,
    arms: int = 1,
    min_effect_pct: float | None = None,
    margin_pct: float | None = None,
) -> Design:
    """The design of a round with `arms` arms ending at `boots` a side (default the cap)."""
    return _design(
        spec.boots_min,
        spec.boots_max if boots is None else boots,
        spec.stage,
        spec.alpha,
        spec.power,
        spec.min_effect_pct if min_effect_pct is None else min_effect_pct,
        len(spec.objective.levels),
        spec.alpha_spending,
        spec.beta_spending,
        arms,
        margin(spec) if margin_pct is None else margin_pct,
    )


def round_design(
    spec: HuntSpec, arms: int, variance: float | None, df: float = 0.0, at: int = 1
) -> tuple[Design, RoundPlan]:
    """The design of a round of `arms` arms at this boot variance of the logs (None or nan:
    none known, the cap), `df` the pool's df when sized at `at` boots a side: the fewest
    boots a side with the stated power for δ; past the cap, the cap, testing the gain it
    finds with that power (and the margin scaled alike)."""
    from servesweep.hunt.power import boots_for_power, plan_boots

    known = variance is not None and math.isfinite(variance)
    arms = max(arms, 1)

    def df_at(n: int) -> float:  # the pool at the last look: at least the reference and an arm
        return df + 2 * max(n - at, 0)

    plan = plan_boots(
        lambda n: design(spec, n, arms),
        variance if known else None,
        spec.boots_min,
        spec.boots_max,
        df_at,
    )
    delta, m = spec.min_effect_pct, margin(spec)
    if plan.capped:  # the gain the cap's boots find: N(δ') = cap
        at_cap = design(spec, plan.boots, arms)
        # Capped only at a known variance (plan_boots: none known is the cap, not capped).
        needs = boots_for_power(at_cap, cast(float, variance), df_at(plan.boots))  # for δ
        scale = math.sqrt(needs / plan.boots)  # on the log scale: the gain's and the margin's
        found = 100 * math.expm1(math.log1p(delta / 100) * scale)
        m, delta = scaled_margin(m, scale), found
    cv = 100 * math.sqrt(math.expm1(cast(float, variance))) if known else math.nan
    rp = RoundPlan(arms, plan.boots, plan.needed, cv, delta, m, df_at(plan.boots))
    return design(spec, plan.boots, arms, delta, m), rp


def power_of(spec: HuntSpec, plan: RoundPlan, gain_pct: float | None = None) -> float:
    """The probability that a round of `plan` adopts an arm gaining `gain_pct` (default
    δ, as asked) at one counted level, the others unchanged, at the scatter and df it was
    sized on (power.power_at). nan when no scatter was known."""
    from servesweep.hunt.power import power_at

    if not math.isfinite(plan.cv_pct):
        return math.nan
    d = design(spec, plan.boots, plan.arms, plan.min_effect_pct, plan.margin_pct)
    variance = math.log1p((plan.cv_pct / 100) ** 2)
    gain = spec.min_effect_pct if gain_pct is None else gain_pct
    return power_at(d, variance, gain, plan.df)


@lru_cache(maxsize=512)  # boundaries take ~0.01-0.1 s to integrate
def _design(*args) -> Design:
    from servesweep.hunt.sequential import make_design

    return make_design(*args)


def canonical(spec: HuntSpec, names: Iterable[str]) -> tuple[str, ...]:
    chosen = set(names)
    unknown = chosen - {c.name for c in spec.candidates}
    if unknown:
        raise ValueError(f"unknown candidates {sorted(unknown)}")
    return tuple(c.name for c in spec.candidates if c.name in chosen)


def variant_name(spec: HuntSpec, names: Iterable[str]) -> str:
    return SEPARATOR.join((spec.start.name, *canonical(spec, names)))


def compose(spec: HuntSpec, names: Iterable[str]) -> Composed:
    """The composed variant: later members (spec order) override earlier ones' flags/env."""
    members = canonical(spec, names)
    by_name = {c.name: c for c in spec.candidates}
    flags, env, stack = dict(spec.start.flags), dict(spec.start.env), spec.start.stack
    for name in members:
        c = by_name[name]
        flags.update(c.flags)
        env.update(c.env)
        stack = c.stack or stack
    return Composed(variant_name(spec, members), members, flags, env, stack)


def gpu_hours(spec: HuntSpec, names: Iterable[str]) -> float:
    """GPU-hours one boot of the composed variant costs."""
    stack = compose(spec, names).stack
    return float(spec.gpu_hours_by_stack.get(stack, spec.gpu_hours_per_boot))


def max_gpu_hours(spec: HuntSpec) -> float:
    stacks = {spec.start.stack, *(c.stack for c in spec.candidates if c.stack)}
    return max(float(spec.gpu_hours_by_stack.get(s, spec.gpu_hours_per_boot)) for s in stacks)


def round_boots(spec: HuntSpec, arms: int, new: int, boots: int | None = None) -> int:
    """A round's boots with every side at `boots` a side (default the cap), the reference's
    retries, and one uncounted first boot for each of `new` variants booted the first time
    (unless first boots are always counted): its worst case, or its first look's."""
    first = 0 if spec.first_boot == "keep" else new
    side = spec.boots_max if boots is None else boots
    return side * (1 + arms) + spec.reference_retries + first


def check_boots(spec: HuntSpec, adopted: int, boots: int | None = None) -> int:
    """The check round after `adopted` candidates (the confirm, and an ablation each, one
    adopted alone: its ablation is the confirm's arm; each ablation's set new at worst),
    every side at `boots` a side (default the cap)."""
    if not adopted:
        return 0
    confirm = 1 if spec.confirm else 0
    ablations = adopted if spec.ablate and (adopted >= 2 or not confirm) else 0
    if not confirm + ablations:
        return 0
    return round_boots(spec, confirm + ablations, ablations, boots)


def minimum_budget(spec: HuntSpec) -> int:
    """The fewest boots a hunt can start with: round 1's first look (`boots.min` a side, the
    reference's retries, each variant's first boot) and the checks' first look for one
    adopted candidate, which every search round keeps back."""
    arms = len(applicable(spec, (), ()))
    checks = check_boots(spec, 1, spec.boots_min)
    if spec.design == "screen":  # its first step: the start and the first candidate
        return (1 + min(arms, 1)) * screen_variant_boots(spec) + spec.reference_retries + checks
    return round_boots(spec, arms, arms + 1, spec.boots_min) + checks


def screen_variant_boots(spec: HuntSpec) -> int:
    """The boots the screen asks of each variant: `screen_boots` counted, and its first
    boot unless first boots are always counted."""
    return spec.screen_boots + (0 if spec.first_boot == "keep" else 1)


def applicable(spec: HuntSpec, adopted: Iterable[str], excluded: Iterable[str]) -> tuple[str, ...]:
    """Candidates (spec order) that can go on top of `adopted`: not adopted nor excluded,
    every `requires` adopted, no conflict either way with an adopted one."""
    have, out = set(adopted), set(excluded)
    by_name = {c.name: c for c in spec.candidates}
    ok = []
    for c in spec.candidates:
        if c.name in have or c.name in out or not set(c.requires) <= have:
            continue
        if set(c.conflicts) & have or any(c.name in by_name[a].conflicts for a in have):
            continue
        ok.append(c.name)
    return tuple(ok)


def without(spec: HuntSpec, members: Iterable[str], name: str) -> tuple[str, ...]:
    """`members` less `name` and, transitively, every member that requires it: the set an
    ablation of `name` can boot (a dependant cannot run without what it requires)."""
    gone, rest = {name}, canonical(spec, members)
    by_name = {c.name: c for c in spec.candidates}
    while True:
        more = {m for m in rest if m not in gone and set(by_name[m].requires) & gone}
        if not more:
            return tuple(m for m in rest if m not in gone)
        gone |= more


def _tuple(value: Any) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def from_dict(data: Mapping[str, Any]) -> HuntSpec:
    """A hunt from plain data: {start: {name, stack, flags, env}, candidates: {name: {flags,
    env, stack, requires, conflicts}} (listing order is the canonical order), objective:
    {metric, direction: higher|lower, levels}, and the HuntSpec scalars by name}."""
    data = dict(data)
    start = Start(**data.pop("start"))
    candidates = tuple(
        Candidate(
            name=name,
            flags=dict(c.get("flags") or {}),
            env=dict(c.get("env") or {}),
            stack=c.get("stack"),
            requires=_tuple(c.get("requires")),
            conflicts=_tuple(c.get("conflicts")),
        )
        for name, c in (data.pop("candidates") or {}).items()
    )
    o = dict(data.pop("objective"))
    objective = Objective(
        metric=o.get("metric", Objective.metric),
        higher_is_better=o.get("direction", "higher") == "higher",
        levels=_tuple(o.get("levels")),
    )
    return HuntSpec(start=start, candidates=candidates, objective=objective, **data)
