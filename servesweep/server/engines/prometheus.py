"""Prometheus text exposition: parsing a /metrics page, and what one level added to it."""

from __future__ import annotations

import math
import re

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition to {sample: value}.

    A sample's key is its name, plus its labels sorted by name as `{a="x",b="y"}` when it
    has any, so keys are stable across scrapes. Comments and unparsable lines are skipped.
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        if labels:
            pairs = sorted(_LABEL.findall(labels))
            if pairs:
                name += "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"
        out[name] = number
    return out


def metric_values(metrics: dict[str, float], name: str) -> list[float]:
    """Values of every label set of one metric (`name` or `name{...}`)."""
    return [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]


def metric_sum(metrics: dict[str, float], name: str) -> float | None:
    values = [v for v in metric_values(metrics, name) if not math.isnan(v)]
    return sum(values) if values else None


def metric_mean(metrics: dict[str, float], name: str) -> float | None:
    values = [v for v in metric_values(metrics, name) if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def counter_total(counters: dict[str, float], name: str) -> float:
    """A counter's growth summed over its label sets (0 where it did not grow or is absent),
    from `counter_delta`'s result."""
    return sum(v for k, v in counters.items() if k == name or k.startswith(name + "{"))


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for counters and histogram/summary sums and counts: what one level
    added. Gauges (queue length, cache usage) are point values and are left out. A series
    only in `after` started during the level, from 0: a labelled counter appears on the
    page when it is first incremented (SGLang's `cached_tokens_total{cache_source=...}`
    is absent until the first prefix hit, so a first level's hits were lost without it)."""
    return {
        key: after[key] - before.get(key, 0.0)
        for key in after
        if key.split("{", 1)[0].endswith(("_total", "_sum", "_count"))
    }
