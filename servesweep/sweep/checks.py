"""Semantic checks a JSON schema cannot express, of the stacks, the variants' GPUs (by the
rule that gives a variant its GPUs, `ServerSettings.gpus_of`) and the load, SLO and workload
keys; one line
naming the key for each. Called by `servesweep.sweep.config.check_semantics`, which holds
the engine and baseline checks."""

from __future__ import annotations

import os

from servesweep.level import Level, levels_of, load_kind, parse_value
from servesweep.server.gpu_slots import parallel_gpus
from servesweep.server.settings import ServerSettings
from servesweep.workloads import workload_of


class CheckError(ValueError):
    """Raised as the config's ConfigError by the caller."""


def check_flags(variant: dict) -> None:
    """The adapter refuses flags it sets itself (--port, --model, …): say so before any job
    runs (ValueError), rather than as a traceback when it does."""
    from servesweep.server.engines import get_engine

    get_engine(variant["engine"], variant["engine_options"]).command(
        "<stack>/bin/python", "<model>", "127.0.0.1", "<port>", variant["flags"]
    )


def check_variant_gpus(server: ServerSettings, resolved: dict) -> None:
    """A variant's GPUs cover what its flags spread the server over (tp × pp)."""
    for name, variant in resolved.items():
        needed, said = parallel_gpus(variant["flags"])
        gpus = server.gpus_of(variant)
        if needed > 1 and gpus < needed:
            raise CheckError(
                f"config: variants.{name}.gpus: the cell holds {gpus} GPU(s) but its flags "
                f"({said}) spread the server over {needed}; set gpus: {needed}"
            )


def check_stacks(config: dict) -> None:
    for name, stack in config["stacks"].items():
        if stack["kind"] == "venv" and "requirements" not in stack:
            raise CheckError(f"config: stacks.{name}.requirements: required for kind venv")
        requirements = stack.get("requirements")
        if requirements is not None and not os.access(requirements, os.R_OK):
            raise CheckError(
                f"config: stacks.{name}.requirements: cannot read {requirements} "
                f"(relative paths are from {os.getcwd()})"
            )
        if stack["kind"] == "existing" and "python" not in stack:
            raise CheckError(f"config: stacks.{name}.python: required for kind existing")


def check_loads(config: dict) -> None:
    bench = config["benchmark"]
    if "levels" in bench and "rate" in bench:
        raise CheckError(
            "config: benchmark: give levels (concurrencies) or rate (requests/s), not both"
        )
    rate_keys = [k for k in ("arrival", "max_concurrency") if k in bench]
    if "rate" not in bench and rate_keys:
        raise CheckError(f"config: benchmark.{rate_keys[0]}: only for a rate sweep (rate:)")
    if "rate" in bench:
        rates = [parse_value(r) for r in bench["rate"]]
        if len(set(rates)) != len(rates):
            raise CheckError("config: benchmark.rate: a rate is listed twice")
    if "search" in bench and not config.get("slo"):
        raise CheckError("config: benchmark.search: needs slo: (the targets it searches for)")
    arrival = bench.get("arrival") or {}
    if "burstiness" in arrival and arrival.get("distribution", "poisson") != "gamma":
        raise CheckError(
            "config: benchmark.arrival.burstiness: needs distribution: gamma (Poisson is 1)"
        )
    try:
        workload_of(bench["workload"])  # its kind's keys (servesweep.workloads)
    except ValueError as exc:
        raise CheckError(f"config: benchmark.workload.{exc}") from None


def check_precision(config: dict) -> None:
    """A per-level `benchmark.precision.boot_cv_pct` names each measured level once, as
    `benchmark.levels` (or `rate`) writes it, and no other: a level without its σ_B would
    stop on another's, silently."""
    bench = config["benchmark"]
    per_level = (bench.get("precision") or {}).get("boot_cv_pct")
    if not isinstance(per_level, dict):
        return
    key = "benchmark.precision.boot_cv_pct"
    levels = levels_of(bench)
    known = f"(benchmark.{'rate' if 'rate' in bench else 'levels'}: {', '.join(map(str, levels))})"
    named: set[Level] = set()
    for given in per_level:
        try:
            level = Level.parse(given, load_kind(bench))
        except ValueError:
            raise CheckError(f"config: {key}: {given!r} is not a level {known}") from None
        if level not in levels:
            raise CheckError(f"config: {key}: level {given} is not measured {known}")
        if level in named:
            raise CheckError(f"config: {key}: level {given} is given twice {known}")
        named.add(level)
    missing = [lv for lv in levels if lv not in named]
    if missing:
        raise CheckError(f"config: {key}: no σ_B for level {missing[0]} {known}")


def check_analysis(config: dict) -> None:
    """The counted levels of the objective are measured levels; a goodput objective needs
    the SLO it is counted against."""
    analysis = config.get("analysis") or {}
    bench = config["benchmark"]
    measured = {lv.value for lv in levels_of(bench)}
    for level in analysis.get("levels") or []:
        if parse_value(level) not in measured:
            raise CheckError(
                f"config: analysis.levels: level {level} is not measured "
                f"(benchmark.{'rate' if 'rate' in bench else 'levels'})"
            )
    if str(analysis.get("objective", "")).startswith("goodput") and not config.get("slo"):
        raise CheckError(f"config: analysis.objective: {analysis['objective']} needs slo:")
