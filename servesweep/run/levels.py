"""What one boot measures: its levels in order, each level's prompts and, for a rate
level, its arrival schedule."""

from __future__ import annotations

import zlib
from typing import cast

from servesweep.bench.arrivals import schedule
from servesweep.level import Level
from servesweep.sizing import level_requests
from servesweep.sweep.benchmark import BenchmarkSettings
from servesweep.workloads import Prompt

WARMUP_SALT = 1_000_000_007  # a rate level's warm-up schedule: its own seed


def level_plan(bench: BenchmarkSettings) -> list[tuple[Level, int]]:
    """(level, in_boot) in the order one boot runs them: each level's measurements within
    the boot back to back."""
    return [(lv, i) for lv in bench.levels for i in range(bench.repeats_in_boot)]


def _salt(level: Level) -> int:
    """Per-level seed offset. A concurrency level keeps the formula it always had (so its
    prompts do not change); a rate level, whose value may be 0.5 or inf, hashes its name."""
    if level.is_rate:
        return zlib.crc32(f"rate {level.key}".encode()) % 1_000_000
    return cast(int, level.value) * 101  # a concurrency


def level_prompts(bench: BenchmarkSettings, tokenizer, level: Level, in_boot: int) -> list[Prompt]:
    """The level's prompts (warmup first). Seeded by level and in-boot index only, so every
    variant, and every boot, sees exactly the same requests."""
    workload = bench.workload
    n = level_requests(bench, level).requests
    seed = workload.seed * 1_000_003 + _salt(level) + in_boot
    return workload.prompts(tokenizer, n, seed)


def rate_schedule(
    bench: BenchmarkSettings, level: Level, in_boot: int, measured: int, warmup: bool = False
) -> list[float]:
    """When each measured (or, `warmup`, each warm-up) request of a rate level is due (s
    after the first): seeded by the arrival seed, the level and the in-boot index, so every
    variant gets the same one; the warm-up's schedule is drawn apart from the measured one,
    which stays what it was."""
    salt = _salt(level) * 16 + in_boot + (WARMUP_SALT if warmup else 0)
    return schedule(measured, level.value, bench.arrival, salt).tolist()
