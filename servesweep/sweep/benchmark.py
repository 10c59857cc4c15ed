"""The sweep's `benchmark:` section as one type (what a boot measures, and how), read by
attribute, its defaults the schema's (servesweep/sweep/schemas/config.schema.yaml).

It is built once where the sweep is loaded (`Sweep.benchmark`) and once per boot from the
cell's spec (`BenchmarkSettings.of(spec["benchmark"])`). The spec itself is still written
from the section's mapping as the sweep file gives it (`Sweep.raw`), so its canonical JSON,
and so every cell's hash, stays what it was (tests/unit/sweep/spec_hashes.json): this type
is for reading, not for writing specs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from servesweep.level import Kind, Level, levels_of, load_kind
from servesweep.sizing import Precision, PromptCount
from servesweep.sweep.schema import filled, section_defaults
from servesweep.workloads import Workload, workload_of

DEFAULTS = section_defaults("benchmark")
SEARCH_DEFAULTS = section_defaults("benchmark", "search")
WORKLOAD_DEFAULTS = filled({}, "benchmark", "workload")


class Arrival(NamedTuple):
    """How a rate level's requests are spread in time (servesweep.bench.arrivals)."""

    distribution: str  # "poisson" | "gamma"
    burstiness: float  # the gamma shape; 1 for poisson
    seed: int

    @classmethod
    def of(cls, given: Mapping | None) -> Arrival:
        """`benchmark.arrival`, defaults filled (poisson, burstiness 1, seed 0)."""
        a = given or {}
        dist = a.get("distribution", "poisson")
        burst = float(a.get("burstiness", 1.0)) if dist == "gamma" else 1.0
        return cls(dist, burst, int(a.get("seed", 0)))


class Search(NamedTuple):
    """`benchmark.search`: the capacity search's settings (servesweep.capacity.search)."""

    probes: int  # at most this many extra levels per boot
    attainment: float  # share of requests that must meet the SLO

    @classmethod
    def of(cls, given: Mapping | None) -> Search | None:
        """None where the sweep does not search."""
        if not given:
            return None
        return cls(
            int(given.get("probes", SEARCH_DEFAULTS["probes"])),
            float(given.get("attainment", SEARCH_DEFAULTS["attainment"])),
        )


@dataclass(frozen=True)
class BenchmarkSettings:
    """`benchmark:` of a sweep or of a cell's spec, one field a key (a spec has no
    `repeats`, and adds `num_prompts_per_level`)."""

    kind: Kind  # "concurrency" (benchmark.levels) or "rate" (benchmark.rate)
    levels: tuple[Level, ...]  # in order; rates math.inf for inf
    repeats: int | str | Mapping[str, Any] = DEFAULTS["repeats"]  # servesweep.sweep.stages
    repeats_in_boot: int = DEFAULTS["repeats_in_boot"]
    endpoint: str = DEFAULTS["endpoint"]  # "completions" | "chat"
    warmup: int | Literal["auto"] = DEFAULTS["warmup"]
    num_prompts: PromptCount | Literal["auto"] = PromptCount()  # servesweep.sizing.num_prompts
    # A spec's measured requests by level key (the sweep's own: none, they are computed).
    num_prompts_per_level: Mapping[str, int] = field(default_factory=dict)
    precision: Precision = Precision()
    workload: Workload = workload_of(WORKLOAD_DEFAULTS)  # its kind's type (servesweep.workloads)
    request_timeout_s: float = DEFAULTS["request_timeout_s"]
    stall_timeout_s: float = DEFAULTS["stall_timeout_s"]
    error_rate_threshold: float = DEFAULTS["error_rate_threshold"]
    max_concurrency: int | None = None  # a rate level's cap on requests in flight
    arrival: Arrival = Arrival("poisson", 1.0, 0)
    search: Search | None = None  # None: no capacity search

    @classmethod
    def of(cls, section: Mapping) -> BenchmarkSettings:
        """From a sweep's `benchmark` mapping (defaults filled) or a spec's; a key it does
        not give keeps the schema's default."""
        plain = DEFAULTS.keys() - {"num_prompts", "workload"}
        given = {k: section[k] for k in plain if k in section}
        per_level = section.get("num_prompts_per_level") or {}
        has_levels = "levels" in section or "rate" in section
        return cls(
            **given,
            kind=load_kind(section),
            levels=tuple(levels_of(section)) if has_levels else (),
            num_prompts=PromptCount.of(section.get("num_prompts", {})),
            num_prompts_per_level=dict(per_level),
            precision=Precision.of(section),
            # A key it does not give keeps the schema's default (a spec's has them all);
            # the schema's, so a kind's own defaults hold (sharegpt: no output_tokens).
            workload=workload_of(filled(section.get("workload", {}), "benchmark", "workload")),
            max_concurrency=section.get("max_concurrency"),
            arrival=Arrival.of(section.get("arrival")),
            search=Search.of(section.get("search")),
        )

    @property
    def is_rate(self) -> bool:
        return self.kind == "rate"

    @property
    def is_auto(self) -> bool:
        """Whether the levels size their requests by precision (`num_prompts: auto`)."""
        return self.num_prompts == "auto"
