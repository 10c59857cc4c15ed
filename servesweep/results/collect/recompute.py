"""Raw request records are the source of truth: a level summary written under an older
metric definition (METRICS_VERSION) is recomputed from its stored requests, launching
nothing. What the client measured about itself and what servesweep.run.cell added around the
level (server snapshots, GPU telemetry) are kept; the rest is derived again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from servesweep import METRICS_VERSION
from servesweep.bench import metrics
from servesweep.level import Level
from servesweep.records import LevelRead, LevelSummary

# Measured once, not derivable from the request records: carried over as they were.
MEASURED_FIELDS = (
    "client_cpu_s",
    "client_cpu_share",
    "client_max_loop_lag_ms",
    "client_workers",
    "started_at",
    "clock_origin_ns",
    "server_before",
    "server_after",
    "server_counters",
    "server_peaks",
    "gpu",
    "energy_j",
    "in_boot",
)
# The server's fate (a crash, a hang) is known from the process, not from the records.
FATE_FIELDS = ("status", "cause")


def read_requests(path: Path) -> list[dict] | None:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None


def needs_recompute(summary: LevelSummary) -> bool:
    read = LevelRead.of(summary)
    return read.status in ("ok", "failed") and str(read.metrics_version) != str(METRICS_VERSION)


def recompute(
    summary: LevelSummary, requests_path: Path, error_rate_threshold: float
) -> LevelSummary | None:
    """The summary again under today's definitions, or None when its requests are gone."""
    records = read_requests(requests_path)
    if records is None:
        return None
    level = Level.parse(summary["level"])  # recomputed as a closed-loop level, as it always was
    read = LevelRead.of(summary)
    fresh = metrics.level_summary(
        records,
        level,
        read.repeat,
        concurrency=level.value,
        num_prompts=read.num_prompts,
        stalled=read.cause == "hung",
        timed_out=read.cause == "time_limit",
        error_rate_threshold=error_rate_threshold,
        client_cpu_s=read.client_cpu_s,
        client_cpu_share=read.client_cpu_share,
        client_max_loop_lag_ms=read.client_max_loop_lag_ms,
        client_workers=read.client_workers,
        started_at=read.started_at,
        clock_origin_ns=read.clock_origin_ns,
    )
    given: Mapping[str, Any] = summary
    out = {**fresh, **{k: given[k] for k in MEASURED_FIELDS + FATE_FIELDS if k in given}}
    kept = LevelRead.of(out)
    energy, tokens = kept.energy_j, kept.total_output_tokens
    out["joules_per_output_token"] = energy / tokens if energy is not None and tokens else None
    out["recomputed_from"] = str(read.metrics_version)
    return cast(LevelSummary, out)
