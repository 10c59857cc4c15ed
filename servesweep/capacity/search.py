"""Capacity search (docs/load_modes.md): after a boot's configured levels, the highest
concurrency or rate that still meets the SLO, found by bisection inside the bracket the
configured levels give, each probe a measured, recorded level of its own.

A level *meets* the SLO (`level_meets_slo`) when its status is ok, the client delivered it
(not client-bound, not rate short), and at least `attainment` of its measured requests met
every target. The bracket is [the highest passing level below the lowest failing one, that failing
level); a probe halves it (geometrically for rates, to 3 significant figures;
arithmetically for concurrencies, to whole numbers) until `probes` have run or it cannot
be split. The capacity is the bracket's low end, reported with the bracket. Its settings,
`benchmark.search`, are `servesweep.sweep.benchmark.Search`."""

from __future__ import annotations

import math
from typing import NamedTuple

from servesweep.level import INF, Level
from servesweep.records import CapacityRecord, LevelSummary


def level_meets_slo(summary: LevelSummary, share: float | None, attainment: float) -> bool:
    """`share`: of the level's measured requests, those that met every target
    (servesweep.capacity.goodput)."""
    return (
        summary.get("status") == "ok"
        and not summary.get("client_bound")
        and not summary.get("rate_short")
        and share is not None
        and share >= attainment
    )


class Bracket(NamedTuple):
    low: float | None  # highest level that met the SLO (None: none did)
    high: float | None  # lowest level above it that did not (None: every one did)


def bracket(results: dict) -> Bracket:
    """From {level: met?}: the lowest failing level, and the highest passing one below it.
    A pass above a failure (a short `inf` burst the server absorbed although it could not
    sustain a lower rate) does not lift the capacity past the failure."""
    failing = [lv for lv, ok in results.items() if not ok]
    high = min(failing) if failing else None
    passing = [lv for lv, ok in results.items() if ok and (high is None or lv < high)]
    return Bracket(max(passing) if passing else None, high)


def next_probe(b: Bracket, rate: bool) -> float | int | None:
    """The level that halves the bracket, or None when it cannot (or need not) be split:
    no failing level above (capacity is at least the highest), none passing, or nothing
    between its ends."""
    if b.low is None or b.high is None:
        return None
    if rate:
        if b.high == INF:
            return None  # an unbounded bracket has no middle
        mid = float(f"{math.sqrt(b.low * b.high):.3g}")
        return mid if b.low < mid < b.high else None
    mid = (int(b.low) + int(b.high)) // 2
    return mid if b.low < mid < b.high else None


class Capacity(NamedTuple):
    value: Level | None  # the highest level that met the SLO
    low: Level | None  # the bracket: [low, high)
    high: Level | None
    probes: list[Level]  # the probe levels run, in order
    attainment: float
    client_bound: list[Level]  # levels the client, not the server, failed

    def as_record(self) -> CapacityRecord:
        def json(level: Level | None):
            return None if level is None else level.json

        return {
            "value": json(self.value),
            "low": json(self.low),
            "high": json(self.high),
            "probes": [p.json for p in self.probes],
            "attainment": self.attainment,
            "client_bound_levels": [lv.json for lv in self.client_bound],
        }
