"""Level figures derived in collect from what the level recorded (no rerun needed)."""

from __future__ import annotations

from servesweep.records import LevelRead, LevelSummary

HIT_COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
QUERY_COUNTERS = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")


def _sum(counters: dict, names: tuple[str, ...]) -> float:
    return sum(v for k, v in counters.items() if k.split("{", 1)[0] in names)


def prefix_cache_hit_rate(level: LevelSummary) -> float | None:
    """The share of prompt tokens served from the prefix cache during the level: from the
    hit and query counters' growth over the level where the engine counts them (vLLM),
    else the engine's own gauge after the level (SGLang's cache_hit_rate); None where the
    engine reports neither (transformers serve)."""
    read = LevelRead.of(level)
    counters = read.server_counters or {}
    if isinstance(counters, dict):
        queries = _sum(counters, QUERY_COUNTERS)
        if queries > 0:
            return round(_sum(counters, HIT_COUNTERS) / queries, 4)
    after = read.server_after or {}
    headline = after.get("headline") if isinstance(after, dict) else None
    value = (headline or {}).get("prefix_cache_hit_rate")
    return None if value is None else round(float(value), 4)
