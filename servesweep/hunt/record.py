"""results/hunt/hunt.json as typed records: what `servesweep.hunt_run.steps.hunt_record`
writes and the report's hunt section (`servesweep.results.report.hunt_views`) reads;
docs/records.md is their prose. TypedDicts, so the JSON is the same plain dicts.

A key every hunt.json has held since the first is required. A key added since is
NotRequired: a hunt.json written before it lacks it and the report still renders it, so
readers take those with `.get`. The hunt's nan and inf are written as null and "inf"
(`hunt_run.steps.jsonable`): a float it computes may be None.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from servesweep.hunt.rounds import Role
from servesweep.hunt.spec import HuntDesign

JsonLevel = int | float | str  # a level as JSON holds it ("inf")


class ObjectiveRecord(TypedDict):
    metric: str
    higher_is_better: bool
    levels: list[JsonLevel]
    min_effect_pct: float  # δ
    margin_pct: NotRequired[float]
    alpha: NotRequired[float]
    power: NotRequired[float]
    boots_max: NotRequired[int]


class LaunchRecord(TypedDict):
    """`final`: the final composed variant and how to launch it."""

    variant: str
    stack: str
    model: str
    flags: list[list]  # [name, value] pairs, in the order the server gets them
    env: dict[str, str]
    command: list[str]  # with <stack>, <model>, <port> placeholders
    spec_hash: str


class FirstBootsRecord(TypedDict):
    """`first_boots` (`servesweep.hunt.rounds.FirstBoots`)."""

    uncounted: bool  # r0 left out of the decisions
    why: str


class PlanRecord(TypedDict):
    """A round's `plan` (`servesweep.hunt.spec.RoundPlan`, with its power and alpha)."""

    arms: int
    boots: int
    needed: int | None
    cv_pct: float | None
    min_effect_pct: float | None
    margin_pct: float | None
    df: NotRequired[float | str]
    capped: bool
    power_at_delta: float
    alpha_per_arm_and_level: float


class ArmRecord(TypedDict):
    """One arm of a round (`servesweep.hunt.state.Arm`)."""

    candidate: str
    variant: str
    role: Role
    verdict: str  # a servesweep.hunt.rounds.ArmVerdict's word
    reason: str
    gain_pct: float | None
    low_pct: float | None
    high_pct: float | None
    rank_pct: float | None
    level: JsonLevel | None
    boots: list[int]
    uncounted: NotRequired[list[int]]
    gpu_hours: float


class RoundRecord(TypedDict):
    """One round (`servesweep.hunt.state.Round`)."""

    index: int  # from 0
    kind: Literal["search", "check"]
    reference: str
    reference_boots: list[int]
    arms: list[ArmRecord]
    adopted: str | None
    gpu_hours: float
    plan: NotRequired[PlanRecord | None]
    reference_uncounted: NotRequired[list[int]]
    cut: NotRequired[int | None]
    more_boots: NotRequired[int]


class MeasuredCost(TypedDict):
    """Boots as measured: wall seconds and wall × GPUs from their cell.json."""

    boots: int
    wall_s: float
    gpu_hours: float


class LedgerReference(MeasuredCost):
    variant: str


class LedgerArm(MeasuredCost):
    candidate: str
    variant: str
    role: Role
    verdict: str


class LedgerRound(MeasuredCost):
    """One round's boots and their cost; its own: the reference's and the arms' summed."""

    round: int
    kind: Literal["search", "check"]
    reference: LedgerReference
    arms: list[LedgerArm]


class StatedCost(TypedDict):
    """Boots at the stated GPU-hours a boot (`servesweep.hunt.state.Cost`)."""

    boots: int
    gpu_hours: float


class BudgetRecord(TypedDict):
    boots: int | None  # None: no limit
    gpu_hours: float | None
    gpu_hours_per_boot: float


class CandidateRecord(TypedDict):
    """A candidate as the sweep file states it."""

    description: str
    flags: dict[str, Any]
    env: dict[str, str]
    stack: str | None
    requires: list[str]
    conflicts: list[str]


class HuntRecord(TypedDict):
    """results/hunt/hunt.json."""

    start: str
    stack: str
    model: str
    objective: ObjectiveRecord
    design: NotRequired[HuntDesign]  # absent: sequential
    screen_boots: NotRequired[int]
    steps: int
    done: bool
    stop_reason: str
    incumbent: list[str]  # the adopted candidates
    final_members: NotRequired[list[str]]  # absent: the incumbent
    final: LaunchRecord
    first_boots: NotRequired[FirstBootsRecord]
    excluded: dict[str, str]
    undecided: NotRequired[dict[str, str]]
    rounds: list[RoundRecord]
    ledger: list[LedgerRound]
    spent: MeasuredCost
    planned_cost: StatedCost
    worst_case: StatedCost
    budget: BudgetRecord
    candidates: dict[str, CandidateRecord]  # in listing order
    cells: list[str]
    spec_digest: str
