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
from collections.abc import Mapping
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


def load_kind(benchmark: Mapping) -> Kind:
    """`concurrency` (benchmark.levels) or `rate` (benchmark.rate), of a config's or a
    spec's benchmark."""
    return "rate" if "rate" in benchmark else "concurrency"


def levels_of(benchmark: Mapping) -> list[Level]:
    """The levels of a config's or a spec's benchmark, in order."""
    kind = load_kind(benchmark)
    return [Level.parse(v, kind) for v in benchmark.get("rate") or benchmark["levels"]]


def level_key(value) -> str:
    """The key of a level read back as a bare number or string (a CSV cell, a record)."""
    return Level.parse(value).key
