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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:  # the boundaries' maths (scipy) loads when a design is first made,
    # not with every sweep file that reads a hunt section (each run_cell, each Snakemake start)
    from servesweep.hunt.sequential import Design, Spending

SEPARATOR = "+"


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
    metric: str = "output_tok_s"
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
    boots_min: int = 1  # boots per side at the first look (a look needs pooled df)
    boots_max: int = 11  # boots per side at the last look
    stage: int = 1  # boots per side added between looks
    alpha: float = 0.025  # one-sided, per arm: P(adopt | no gain); the table's two-sided 5 %
    power: float = 0.8  # P(adopt | gain of δ at a counted level)
    alpha_spending: Spending = "pocock"  # more early adopts of large gains than "obf"
    beta_spending: Spending = "pocock"
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
    if problems:
        raise ValueError("hunt spec: " + "; ".join(problems))


def design(spec: HuntSpec) -> Design:
    return _design(
        spec.boots_min,
        spec.boots_max,
        spec.stage,
        spec.alpha,
        spec.power,
        spec.min_effect_pct,
        len(spec.objective.levels),
        spec.alpha_spending,
        spec.beta_spending,
    )


@lru_cache(maxsize=64)  # boundaries take ~0.1 s to integrate
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
        metric=o.get("metric", "output_tok_s"),
        higher_is_better=o.get("direction", "higher") == "higher",
        levels=_tuple(o.get("levels")),
    )
    return HuntSpec(start=start, candidates=candidates, objective=objective, **data)
