"""A load level: a concurrency (closed loop, the default) or a request rate (open loop).

A sweep's levels are all of one kind: `benchmark.levels` (concurrencies) or
`benchmark.rate` (requests per second, `inf` = all at once); docs/load_modes.md has the
definitions. A level is parsed once, where it enters (the sweep, a spec, a record or a CSV
read back: `Level.parse`, `levels_of`), and travels as a `Level` after that. Its `key`
names it in file names and spec keys (`L<key>_i<k>.json`); its `json` is how records and
specs write it (no bare Infinity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

INF = math.inf
Kind = Literal["concurrency", "rate"]


def parse_value(value) -> float | int:
    """A configured or recorded level as a number: `inf` (any spelling) as math.inf, a
    whole float as an int."""
    if isinstance(value, Level):
        return value.value
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "infinity", "+inf"):
            return INF
        number = float(value)
        return int(number) if number.is_integer() else number
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True, order=True)
class Level:
    """One level; levels of one kind order by value."""

    kind: Kind
    value: float | int  # a concurrency, or requests per second (math.inf: all at once)

    @classmethod
    def parse(cls, value, kind: Kind = "concurrency") -> Level:
        return cls(kind, parse_value(value))

    @property
    def is_rate(self) -> bool:
        return self.kind == "rate"

    @property
    def key(self) -> str:
        """The level as the workflow names it (file names, spec keys): 4, 0.5, inf."""
        return "inf" if self.value == INF else str(self.value)

    @property
    def json(self) -> float | int | str:
        """The level as written into JSON records and specs."""
        return "inf" if self.value == INF else self.value

    def __str__(self) -> str:
        return self.key


def load_kind(benchmark: dict) -> Kind:
    """`concurrency` (benchmark.levels) or `rate` (benchmark.rate), of a config's or a
    spec's benchmark."""
    return "rate" if "rate" in benchmark else "concurrency"


def levels_of(benchmark: dict) -> list[Level]:
    """The levels of a config's or a spec's benchmark, in order."""
    kind = load_kind(benchmark)
    return [Level.parse(v, kind) for v in benchmark.get("rate") or benchmark["levels"]]


def level_key(value) -> str:
    """The key of a level read back as a bare number or string (a CSV cell, a record)."""
    return Level.parse(value).key


def num_prompts(rule: dict, level: Level) -> int:
    """Measured requests of a level: clamp(per_level × level, min, max). A rate level counts
    per_level × rate (per_level seconds of arrivals); an `inf` rate takes `min`."""
    if level.value == INF:
        return rule["min"]
    return max(rule["min"], min(rule["max"], int(round(rule["per_level"] * level.value))))


def measured_requests(benchmark: dict, level: Level) -> int:
    """A spec's measured requests at a level: the configured level's count, or by the same
    rule for a level the capacity search adds (a probe)."""
    per_level = benchmark.get("num_prompts_per_level") or {}
    if level.key in per_level:
        return per_level[level.key]
    return num_prompts(benchmark["num_prompts"], level)


WARMUP_RATE_S = 10.0  # a rate level's `auto` warm-up: this many seconds of its arrivals


def warmup_requests(benchmark: dict, level: Level) -> int:
    """Unrecorded requests sent before a level's measured ones (`benchmark.warmup`).

    `auto` (the default): one full wave at the level's own load, so that every batch size
    the measured requests reach has run once before they are timed (engines compile or
    autotune kernels on first use at a new batch size: vLLM's and SGLang's first run at a
    new level was measured up to 10 x slower in TTFT). A concurrency level c sends c
    requests with c in flight: the batch grows through every size up to c as the server
    admits them, and shrinks back as they finish, which covers the measured window (its
    waves are c and then smaller). A rate level sends the first WARMUP_RATE_S seconds of
    its arrivals at its own rate (at most as many requests as it measures; an `inf` rate
    as many as it measures, all at once), so the in-flight count reaches its steady value
    whenever a request takes less than that. An integer: exactly that many requests, with
    at most min(level, that) in flight (the rule before `auto`)."""
    rule = benchmark.get("warmup", "auto")
    if rule != "auto":
        return int(rule)
    measured = measured_requests(benchmark, level)
    if not level.is_rate:
        return int(level.value)
    if level.value == INF:
        return measured
    return max(1, min(measured, math.ceil(level.value * WARMUP_RATE_S)))
