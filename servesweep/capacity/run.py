"""The capacity search inside one boot (after its configured levels): probe levels between
the highest level that met the SLO and the next one up, each measured and recorded like any
level, until `benchmark.search.probes` are spent; the result in the record's `capacity`.
The search's maths (brackets, the next probe, what meeting the SLO means) is in
servesweep.capacity.search."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesweep.capacity.search import Capacity, bracket, meets, next_probe, search_of
from servesweep.loads import level_json, level_key
from servesweep.results.collect.goodput import level_goodput
from servesweep.run.levels import is_rate
from servesweep.server.readiness import check_alive
from servesweep.sweep.layout import level_name

if TYPE_CHECKING:
    from servesweep.run.boot import CellRun
    from servesweep.server.process import ServerProcess


def level_meets_slo(run: CellRun, summary: dict, level, in_boot: int) -> bool:
    """Whether a measured level met the spec's SLO (servesweep.capacity.search.meets)."""
    path = run.levels_dir / f"{level_name(level, in_boot)}.requests.jsonl"
    share = level_goodput(path, run.spec["slo"], summary.get("duration_s")).get("slo_met_share")
    return meets(summary, share, search_of(run.spec).attainment)


def run_capacity_search(run: CellRun, server: ServerProcess, gpu_indices, probe_s: float) -> None:
    """The capacity search (servesweep.capacity.search): probe levels inside the bracket the
    configured levels give, each recorded like any level; the result in the record's
    `capacity`."""
    search, rate = search_of(run.spec), is_rate(run.spec)
    met: dict = {}
    unsure: list = []  # levels the client, not the server, failed: counted as failing
    for (level, in_boot), summary in zip(run.plan, run.record["levels"], strict=True):
        ok = level_meets_slo(run, summary, level, in_boot)
        met[level] = met.get(level, True) and ok
        if summary.get("client_bound"):
            unsure.append(level)
    probes: list = []
    while len(probes) < search.probes:
        probe = next_probe(bracket(met), rate)
        if probe is None or probe in met:
            break
        unfit = check_alive(server, run.engine.health_path, run.generate("ping", 2), probe_s)
        left = run.left()
        if unfit or (left is not None and left <= 0):
            break  # the search stops; what was measured stands
        run.record["levels"].append(
            {
                "level": level_json(probe),
                "repeat": run.repeat,
                "in_boot": 0,
                "status": "not_run",
                "cause": None,
                "probe": True,
            }
        )
        index = len(run.record["levels"]) - 1
        probes.append(probe)
        b = bracket(met)
        run.log(
            f"capacity search: probing {level_key(probe)} (bracket [{level_key(b.low)}, "
            f"{level_key(b.high)}))"
        )
        if not run.run_level(server, index, probe, 0, gpu_indices, probe=True):
            return
        met[probe] = level_meets_slo(run, run.record["levels"][index], probe, 0)
        if run.record["levels"][index].get("client_bound"):
            unsure.append(probe)
    b = bracket(met)
    capacity = Capacity(b.low, b.low, b.high, probes, search.attainment).as_dict()
    capacity["client_bound_levels"] = [level_json(lv) for lv in unsure]
    run.record["capacity"] = capacity
    run.log(f"capacity within SLO: {run.record['capacity']}")
