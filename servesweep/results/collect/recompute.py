"""Raw request records are the source of truth: a level summary written under an older
metric definition (METRICS_VERSION) is recomputed from its stored requests, launching
nothing. What the client measured about itself and what servesweep.run.cell added around the
level (server snapshots, GPU telemetry) are kept; the rest is derived again."""

from __future__ import annotations

import json
from pathlib import Path

from servesweep import METRICS_VERSION
from servesweep.bench import metrics
from servesweep.level import Level
from servesweep.records import LevelSummary

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
    return summary.get("status") in ("ok", "failed") and str(
        summary.get("metrics_version", "0")
    ) != str(METRICS_VERSION)


def recompute(
    summary: LevelSummary, requests_path: Path, error_rate_threshold: float
) -> LevelSummary | None:
    """The summary again under today's definitions, or None when its requests are gone."""
    records = read_requests(requests_path)
    if records is None:
        return None
    level = Level.parse(summary["level"])  # recomputed as a closed-loop level, as it always was
    fresh = metrics.level_summary(
        records,
        level,
        summary.get("repeat", 0),
        concurrency=level.value,
        num_prompts=summary.get("num_prompts"),
        stalled=summary.get("cause") == "hung",
        timed_out=summary.get("cause") == "time_limit",
        error_rate_threshold=error_rate_threshold,
        client_cpu_s=summary.get("client_cpu_s"),
        client_cpu_share=summary.get("client_cpu_share"),
        client_max_loop_lag_ms=summary.get("client_max_loop_lag_ms"),
        client_workers=summary.get("client_workers"),
        started_at=summary.get("started_at"),
        clock_origin_ns=summary.get("clock_origin_ns"),
    )
    out = {**fresh, **{k: summary[k] for k in MEASURED_FIELDS + FATE_FIELDS if k in summary}}
    energy, tokens = out.get("energy_j"), out.get("total_output_tokens")
    out["joules_per_output_token"] = energy / tokens if energy is not None and tokens else None
    out["recomputed_from"] = str(summary.get("metrics_version", "0"))
    return out
