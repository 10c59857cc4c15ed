"""What one boot measures: its levels in order, each level's prompts and, for a rate
level, its arrival schedule."""

from __future__ import annotations

import zlib
from pathlib import Path

from servesweep import loads
from servesweep.workloads.basic import Prompt, random_prompts, sharegpt_prompts
from servesweep.workloads.shaped import ranged_prompts, shared_prefix_prompts


def spec_levels(spec: dict) -> list:
    """The spec's levels in order: concurrencies, or rates (math.inf for inf)."""
    bench = spec["benchmark"]
    return [loads.parse_level(v) for v in bench.get("rate") or bench["levels"]]


def is_rate(spec: dict) -> bool:
    return "rate" in spec["benchmark"]


def level_plan(spec: dict) -> list[tuple]:
    """(level, in_boot) in the order one boot runs them: each level's measurements within
    the boot back to back."""
    bench = spec["benchmark"]
    return [(level, i) for level in spec_levels(spec) for i in range(bench["repeats_in_boot"])]


def _salt(spec: dict, level) -> int:
    """Per-level seed offset. A concurrency level keeps the formula it always had (so its
    prompts do not change); a rate level, whose value may be 0.5 or inf, hashes its name."""
    if is_rate(spec):
        return zlib.crc32(f"rate {loads.level_key(level)}".encode()) % 1_000_000
    return level * 101


def make_prompts(spec: dict, tokenizer, level, in_boot: int) -> list[Prompt]:
    """The level's prompts (warmup first). Seeded by level and in-boot index only, so every
    variant, and every boot, sees exactly the same requests."""
    bench = spec["benchmark"]
    workload = bench["workload"]
    key = loads.level_key(level)
    per_level = bench["num_prompts_per_level"]
    # A capacity-search probe is not a configured level: the same rule counts its prompts.
    n = bench["warmup"] + (
        per_level[key] if key in per_level else loads.num_prompts(bench["num_prompts"], level)
    )
    seed = workload["seed"] * 1_000_003 + _salt(spec, level) + in_boot
    kind = workload["kind"]
    if kind == "sharegpt":
        return sharegpt_prompts(
            Path(workload["path"]), tokenizer, n, workload.get("output_tokens"), seed
        )
    if kind == "shared_prefix":
        return shared_prefix_prompts(tokenizer, n, workload, seed)
    if workload.get("range_ratio") is not None:
        return ranged_prompts(tokenizer, n, workload, seed)
    return random_prompts(tokenizer, n, workload["input_tokens"], workload["output_tokens"], seed)


def rate_schedule(spec: dict, level, in_boot: int, measured: int) -> list[float]:
    """When each measured request of a rate level is due (s after the first): seeded by the
    arrival seed, the level and the in-boot index, so every variant gets the same one."""
    how = loads.arrival(spec["benchmark"])
    salt = _salt(spec, level) * 16 + in_boot
    return loads.schedule(measured, loads.parse_level(level), how, salt).tolist()
