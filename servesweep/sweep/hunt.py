"""The sweep file's `hunt:` section mapped onto the hunt's typed spec, in one place; and
the composed variants a hunt names (`baseline+cgmb128`) resolved like declared variants.

`hunt_of(config, resolved, server)` checks what the schema cannot (names that must exist,
levels that must be measured) with one line naming the key, and returns a `SweepHunt`: the
typed `HuntSpec`, the stack and model it runs on, and the start variant's resolution, from which
`SweepHunt.variant(name)` builds any composed variant exactly as `servesweep.hunt.spec.compose`
merges it. No I/O; imports nothing of servesweep.sweep.config (which imports this).
"""

from __future__ import annotations

import copy
import re
from typing import Any, NamedTuple

from servesweep.hunt import spec as hs
from servesweep.level import Level, levels_of, parse_value
from servesweep.server.engines import ENGINES
from servesweep.server.settings import ServerSettings
from servesweep.sweep.checks import CheckError

# Summary columns an objective can name; latency (…_ms) is lower-better, the rest higher.
METRICS = (
    "output_throughput",
    "total_token_throughput",
    "request_throughput",
    "steady_output_throughput",
    "goodput_output_throughput",
    "goodput_request_rate",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)
SLO_METRICS = ("goodput_output_throughput", "goodput_request_rate")
# The capacity search's result, one value a boot: counted as one pseudo-level.
CAPACITY = "max_load_within_slo"


class SweepHunt(NamedTuple):
    spec: hs.HuntSpec
    stack: str  # the start's stack (a candidate may move a composed variant to another)
    model: str
    start: dict  # the start variant, resolved (servesweep.sweep.config.resolve_variants)
    metric: str  # the summary column the objective reads
    levels: tuple  # the counted levels, as Sweep.levels gives them (math.inf for inf)
    descriptions: dict  # candidate -> its description

    def members(self, name: str) -> tuple[str, ...]:
        """The candidates a composed variant name holds; KeyError when it names none of
        this hunt's compositions (unknown candidate, repeated, or not in spec order)."""
        head, *rest = name.split(hs.SEPARATOR)
        if head != self.spec.start.name or not rest:
            raise KeyError(name)
        try:
            members = hs.canonical(self.spec, rest)
        except ValueError:
            raise KeyError(name) from None
        if list(members) != rest:
            raise KeyError(name)
        return members

    def composed(self, name: str) -> hs.Composed:
        return hs.compose(self.spec, self.members(name))

    def variant(self, name: str) -> dict:
        """A composed variant resolved like a declared one: the start's engine, options and
        GPUs; flags and env merged in spec order (a flag set to null removed)."""
        c = self.composed(name)
        out = copy.deepcopy(self.start)
        out["flags"] = {k: v for k, v in c.flags.items() if v is not None}
        out["env"] = {k: str(v) for k, v in c.env.items() if v is not None}
        out["chain"] = [*self.start["chain"], *c.members]
        described = [self.start.get("description") or ""]
        described += [self.descriptions.get(m, "") for m in c.members]
        out["description"] = "; ".join(d for d in described if d)
        return out

    def stack_of(self, variant: str) -> str:
        return self.stack if variant == self.spec.start.name else self.composed(variant).stack

    def variant_pattern(self) -> str:
        """A regular expression matching the start and every composed name (non-capturing)."""
        names = "|".join(re.escape(c.name) for c in self.spec.candidates)
        return f"{re.escape(self.spec.start.name)}(?:\\+(?:{names}))*"


def direction(metric: str) -> str:
    return "lower" if metric.endswith("_ms") else "higher"


def _names(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _where(key: str) -> str:
    return f"config: hunt.{key}"


def hunt_of(config: dict, resolved: dict, server: ServerSettings) -> SweepHunt | None:
    """The sweep's hunt (None without `hunt:`); `config` has the schema's defaults filled,
    `resolved` is every declared variant resolved, `server` the sweep's `server:`."""
    h = config.get("hunt")
    if h is None:
        return None
    start = h["start"]
    if start not in resolved:
        raise CheckError(
            f"{_where('start')}: unknown variant {start!r} (known: {', '.join(sorted(resolved))})"
        )
    stacks, models = config["stacks"], config["models"]
    stack = h.get("stack") or next(iter(stacks))
    model = h.get("model") or next(iter(models))
    if stack not in stacks:
        raise CheckError(f"{_where('stack')}: unknown stack {stack!r}")
    if model not in models:
        raise CheckError(f"{_where('model')}: unknown model {model!r}")
    candidates = h["candidates"]
    for name, c in candidates.items():
        if name in resolved:
            raise CheckError(
                f"{_where('candidates')}.{name}: the name of a variant too (pick another)"
            )
        for key in ("requires", "conflicts"):
            for other in _names(c.get(key)):
                if other not in candidates or other == name:
                    raise CheckError(
                        f"{_where('candidates')}.{name}.{key}: unknown candidate {other!r}"
                    )
        if c.get("stack") is not None and c["stack"] not in stacks:
            raise CheckError(
                f"{_where('candidates')}.{name}.stack: unknown stack {c['stack']!r} "
                f"(known: {', '.join(stacks)})"
            )
    bench = config["benchmark"]
    measured = [lv.value for lv in levels_of(bench)]
    objective = h["objective"]
    metric = objective["metric"]
    if metric in SLO_METRICS and not config.get("slo"):
        raise CheckError(f"{_where('objective.metric')}: {metric} needs slo: (the targets)")
    if metric == CAPACITY and "search" not in bench:
        raise CheckError(f"{_where('objective.metric')}: {metric} needs benchmark.search")
    if metric == CAPACITY and objective.get("levels"):
        raise CheckError(f"{_where('objective.levels')}: {metric} has no levels")
    levels: tuple[float | int | str, ...]
    levels = tuple(parse_value(v) for v in objective.get("levels") or measured)
    levels = (CAPACITY,) if metric == CAPACITY else levels
    for lv in levels:
        if lv not in measured and lv != CAPACITY:
            raise CheckError(
                f"{_where('objective.levels')}: level {Level.parse(lv).json} is not measured "
                f"(benchmark: {', '.join(str(Level.parse(v).json) for v in measured)})"
            )
    boots, budget = h["boots"], h["budget"]
    if boots["min"] > boots["max"]:
        raise CheckError(f"{_where('boots')}: min ({boots['min']}) is larger than max")
    if h["correctness_gate"] and config.get("correctness") is False:
        raise CheckError(
            f"{_where('correctness_gate')}: needs the correctness pass (correctness is false)"
        )
    gpus = server.gpus_of(resolved[start])
    data: dict[str, Any] = {
        "start": {
            "name": start,
            "stack": stack,
            "flags": resolved[start]["flags"],
            "env": resolved[start]["env"],
        },
        "candidates": {
            name: {k: c.get(k) for k in ("flags", "env", "stack", "requires", "conflicts")}
            for name, c in candidates.items()
        },
        "objective": {"metric": metric, "direction": direction(metric), "levels": levels},
        "min_effect_pct": h["min_effect_pct"],
        "boots_min": boots["min"],
        "boots_max": boots["max"],
        "stage": boots["stage"],
        "alpha": h["alpha"],
        "power": h["power"],
        "margin_pct": h.get("margin_pct"),
        "first_boot": h["first_boot"],
        "compiles_on_first_use": ENGINES[resolved[start]["engine"]].compiles_on_first_use,
        "budget_boots": budget.get("boots"),
        "budget_gpu_hours": budget.get("gpu_hours"),
        # The budget's GPU-hours per boot is stated, not measured: a decision must replay
        # the same whatever the clock said (the ledger in hunt.json has the measured ones).
        "gpu_hours_per_boot": budget["boot_minutes"] / 60 * max(gpus, 1),
        "correctness_gate": h["correctness_gate"],
        "confirm": h["confirm"],
        "ablate": h["ablate"],
        "retest_rejected": h["retest_rejected"],
        "pool_variance": h["pool_variance"],
        "design": h["design"],
        "screen_boots": boots["screen"],
    }
    try:
        spec = hs.from_dict(data)
    except ValueError as exc:
        raise CheckError(f"config: hunt: {str(exc).removeprefix('hunt spec: ')}") from None
    _check_budget(spec)
    descriptions = {name: c.get("description") or "" for name, c in candidates.items()}
    return SweepHunt(spec, stack, model, resolved[start], metric, levels, descriptions)


def _check_budget(spec: hs.HuntSpec) -> None:
    """A budget that cannot pay for round 1's first look (with the checks' first look kept
    back) fails here, before anything launches: the hunt could not start."""
    need = hs.minimum_budget(spec)
    why = (
        f"round 1's first look ({spec.boots_min} boot(s) a side for the start and "
        f"{len(hs.applicable(spec, (), ()))} candidates, the reference's retries and the first "
        "boots) and the checks' first look kept back"
    )
    if spec.design == "screen":
        why = (
            f"the screen's first step ({spec.screen_boots} counted boot(s) of the start and of "
            "the first candidate, the start's retries and the first boots) and the checks' "
            "first look kept back"
        )
    if spec.budget_boots is not None and spec.budget_boots < need:
        raise CheckError(
            f"{_where('budget.boots')}: {spec.budget_boots} boots is too small for even the "
            f"hunt's first look: it needs at least {need}: {why}"
        )
    hours = need * hs.max_gpu_hours(spec)
    if spec.budget_gpu_hours is not None and spec.budget_gpu_hours < hours - 1e-9:
        raise CheckError(
            f"{_where('budget.gpu_hours')}: {spec.budget_gpu_hours:g} GPU-hours is too small "
            f"for even the hunt's first look: it needs at least {hours:.3g} ({need} boots at "
            f"{hs.max_gpu_hours(spec):.3g} GPU-hours a boot): {why}"
        )


def check_hunt(server: ServerSettings, hunt: SweepHunt | None, check_flags) -> None:
    """Each candidate on the start: flags the engine accepts (`check_flags(variant)` raises
    ValueError), GPUs that cover what its flags spread the server over."""
    from servesweep.server.gpu_slots import parallel_gpus

    if hunt is None:
        return
    for c in hunt.spec.candidates:
        variant = hunt.variant(hs.variant_name(hunt.spec, [c.name]))
        try:
            check_flags(variant)
        except ValueError as exc:
            raise CheckError(f"{_where('candidates')}.{c.name}.flags: {exc}") from None
        needed, said = parallel_gpus(variant["flags"])
        gpus = server.gpus_of(variant)
        if needed > 1 and gpus < needed:
            raise CheckError(
                f"{_where('candidates')}.{c.name}.flags: the start holds {gpus} GPU(s) but "
                f"these flags ({said}) spread the server over {needed}"
            )
