"""The capacity search inside one boot (after its configured levels): probe levels between
the highest level that met the SLO and the next one up, each measured and recorded like any
level, until `benchmark.search.probes` are spent. The search's maths (brackets, the next
probe, what meeting the SLO means) is in servesweep.capacity.search.

The boot hands the search what it measured and one callable, `measure(level)`: it runs one
more level and returns its summary, or None when no further level may run (the server is
not fit, or the job's time is near), which ends the search with what was measured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servesweep.capacity.goodput import level_goodput
from servesweep.capacity.search import Capacity, bracket, level_meets_slo, next_probe
from servesweep.level import Level
from servesweep.records import LevelSummary
from servesweep.sweep.benchmark import Search
from servesweep.sweep.layout import level_name

Measure = Callable[[Level], LevelSummary | None]


def slo_met_share(levels_dir: Path, slo: dict, level: Level, in_boot: int, summary) -> float | None:
    """The share of a measured level's requests that met every SLO target."""
    path = levels_dir / f"{level_name(level, in_boot)}.requests.jsonl"
    return level_goodput(path, slo, summary.get("duration_s")).get("slo_met_share")


def search_capacity(
    search: Search,
    slo: dict,
    levels_dir: Path,
    measured: list[tuple[Level, int, LevelSummary]],
    measure: Measure,
    log: Callable[[str], None] = print,
) -> Capacity | None:
    """Probe inside the bracket the measured (level, in_boot, summary) give; the capacity
    with its bracket, or None when a probe level failed (and the cell with it)."""

    def met(level: Level, in_boot: int, summary: LevelSummary) -> bool:
        share = slo_met_share(levels_dir, slo, level, in_boot, summary)
        return level_meets_slo(summary, share, search.attainment)

    kind = measured[0][0].kind if measured else "concurrency"
    results: dict[float | int, bool] = {}  # level value -> met the SLO?
    unsure: list[Level] = []  # levels the client, not the server, failed: counted as failing
    for level, in_boot, summary in measured:
        results[level.value] = results.get(level.value, True) and met(level, in_boot, summary)
        if summary.get("client_bound"):
            unsure.append(level)
    probes: list[Level] = []
    while len(probes) < search.probes:
        value = next_probe(bracket(results), kind == "rate")
        if value is None or value in results:
            break
        probe, b = Level.parse(value, kind), bracket(results)
        log(
            f"capacity search: probing {probe} (bracket [{Level.parse(b.low, kind)}, "
            f"{Level.parse(b.high, kind)}))"
        )
        probed = measure(probe)
        if probed is None:
            log(f"capacity search: stopped before {probe}")
            break  # the search stops; what was measured stands
        probes.append(probe)
        if probed.get("status") != "ok":
            return None
        results[probe.value] = met(probe, 0, probed)
        if probed.get("client_bound"):
            unsure.append(probe)
    b = bracket(results)
    low = None if b.low is None else Level.parse(b.low, kind)
    high = None if b.high is None else Level.parse(b.high, kind)
    return Capacity(low, low, high, probes, search.attainment, unsure)
