"""What one boot measures: its levels in order, each level's prompts and, for a rate
level, its arrival schedule."""

from __future__ import annotations

import zlib

from servesweep.bench.arrivals import schedule
from servesweep.level import Level, levels_of, num_prompts
from servesweep.sweep.config import arrival
from servesweep.workloads import Prompt, make_prompts


def level_plan(spec: dict) -> list[tuple[Level, int]]:
    """(level, in_boot) in the order one boot runs them: each level's measurements within
    the boot back to back."""
    bench = spec["benchmark"]
    return [(lv, i) for lv in levels_of(bench) for i in range(bench["repeats_in_boot"])]


def _salt(level: Level) -> int:
    """Per-level seed offset. A concurrency level keeps the formula it always had (so its
    prompts do not change); a rate level, whose value may be 0.5 or inf, hashes its name."""
    if level.is_rate:
        return zlib.crc32(f"rate {level.key}".encode()) % 1_000_000
    return level.value * 101


def level_prompts(spec: dict, tokenizer, level: Level, in_boot: int) -> list[Prompt]:
    """The level's prompts (warmup first). Seeded by level and in-boot index only, so every
    variant, and every boot, sees exactly the same requests."""
    bench = spec["benchmark"]
    workload = bench["workload"]
    per_level = bench["num_prompts_per_level"]
    # A capacity-search probe is not a configured level: the same rule counts its prompts.
    n = bench["warmup"] + (
        per_level[level.key] if level.key in per_level else num_prompts(bench["num_prompts"], level)
    )
    seed = workload["seed"] * 1_000_003 + _salt(level) + in_boot
    return make_prompts(tokenizer, n, workload, seed)


def rate_schedule(spec: dict, level: Level, in_boot: int, measured: int) -> list[float]:
    """When each measured request of a rate level is due (s after the first): seeded by the
    arrival seed, the level and the in-boot index, so every variant gets the same one."""
    how = arrival(spec["benchmark"])
    salt = _salt(level) * 16 + in_boot
    return schedule(measured, level.value, how, salt).tolist()
