"""Semantic checks of the load, SLO and workload keys (issue 13) that a JSON schema cannot
express; one line naming the key for each. Called by `servesweep.config.check_semantics`."""

from __future__ import annotations

from servesweep.loads import parse_level


class LoadConfigError(ValueError):
    """Raised as the config's ConfigError by the caller."""


def check_loads(config: dict) -> None:
    bench = config["benchmark"]
    if "levels" in bench and "rate" in bench:
        raise LoadConfigError(
            "config: benchmark: give levels (concurrencies) or rate (requests/s), not both"
        )
    rate_keys = [k for k in ("arrival", "max_concurrency") if k in bench]
    if "rate" not in bench and rate_keys:
        raise LoadConfigError(f"config: benchmark.{rate_keys[0]}: only for a rate sweep (rate:)")
    if "rate" in bench:
        rates = [parse_level(r) for r in bench["rate"]]
        if len(set(rates)) != len(rates):
            raise LoadConfigError("config: benchmark.rate: a rate is listed twice")
    if "search" in bench and not config.get("slo"):
        raise LoadConfigError("config: benchmark.search: needs slo: (the targets it searches for)")
    arrival = bench.get("arrival") or {}
    if "burstiness" in arrival and arrival.get("distribution", "poisson") != "gamma":
        raise LoadConfigError(
            "config: benchmark.arrival.burstiness: needs distribution: gamma (Poisson is 1)"
        )
    workload = bench.get("workload", {})
    kind = workload.get("kind", "random")
    for key in ("groups", "prefix_tokens"):
        if key in workload and kind != "shared_prefix":
            raise LoadConfigError(f"config: benchmark.workload.{key}: only for kind shared_prefix")
    if kind == "shared_prefix":
        for key in ("groups", "prefix_tokens"):
            if key not in workload:
                raise LoadConfigError(
                    f"config: benchmark.workload.{key}: required for kind shared_prefix"
                )
    if "range_ratio" in workload and kind == "sharegpt":
        raise LoadConfigError(
            "config: benchmark.workload.range_ratio: not for kind sharegpt (its lengths "
            "come from the file)"
        )
