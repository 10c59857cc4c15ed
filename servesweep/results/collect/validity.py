"""Validity gates: reasons a measured level must stay out of verdicts.

Each gate is a flag with its reason, written into summary.csv (`valid`, `invalid_reasons`)
and shown in the report; a level with any reason is never mixed silently into a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from servesweep import CLIENT_VERSION, METRICS_VERSION
from servesweep.records import LevelRead
from servesweep.sweep.analysis import AnalysisSettings

GATES = {
    "not_ok": "the level did not complete (failed or not run)",
    "zero_output": "it 'succeeded' with zero output tokens",
    "failed_requests": "failed requests above analysis.max_failed_fraction",
    "client_bound": "the client, not the server, may have limited it",
    "usage_mismatch": "the server's usage count is below the content chunks that streamed in",
    "short_steady_window": "its steady window is a smaller share of the level than "
    "analysis.min_steady_fraction (ramp and drain dominate it)",
    "stale_client": "measured by an older benchmark client (CLIENT_VERSION)",
    "stale_metrics": "its summary is of an older metric definition and its requests are gone",
}


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def invalid_reasons(
    level: Mapping[str, Any], client_version: str | None, analysis: AnalysisSettings
) -> list[str]:
    """The gates a level summary fails, as `gate: detail` strings (empty: valid)."""
    reasons: list[str] = []
    lv = LevelRead.of(level)
    if lv.status != "ok":
        cause = lv.cause
        reasons.append(f"not_ok: {lv.status}{f' ({cause})' if cause else ''}")
        return reasons
    if str(client_version) != str(CLIENT_VERSION):
        reasons.append(f"stale_client: v{client_version}, now v{CLIENT_VERSION}")
    if str(lv.metrics_version) != str(METRICS_VERSION):
        reasons.append(f"stale_metrics: v{lv.metrics_version}")
    if not _number(lv.total_output_tokens):
        reasons.append("zero_output: 0 output tokens")
    completed = _number(lv.completed) or 0
    failed = _number(lv.failed) or 0
    if completed + failed and failed / (completed + failed) > analysis.max_failed_fraction:
        share = 100 * failed / (completed + failed)
        limit = 100 * analysis.max_failed_fraction
        reasons.append(f"failed_requests: {share:.1f} % > {limit:g} %")
    if str(lv.rate_short).lower() == "true":
        ratio, late = _number(lv.achieved_ratio), lv.late_requests
        shown = "n/a" if ratio is None else f"{ratio:.1%}"
        reasons.append(f"client_bound: rate short, achieved {shown} of the schedule, {late} late")
    elif str(lv.client_bound).lower() == "true":
        held = _number(lv.achieved_concurrency)
        reasons.append(f"client_bound: achieved concurrency {held if held is not None else 'n/a'}")
    mismatch = _number(lv.usage_mismatch) or 0
    if mismatch:
        reasons.append(f"usage_mismatch: {int(mismatch)} requests")
    window, duration = _number(lv.steady_window_s), _number(lv.duration_s)
    needed = analysis.min_steady_fraction
    steady = window / duration if window is not None and duration else None
    # An open-loop (rate) level's drain is the server's backlog of arrivals it did not keep
    # up with: what the level measures, not ramp-down; its goodput says how it fared.
    rate = str(lv.load) == "rate"
    if needed > 0 and not rate and (steady is None or steady < needed):  # 0: none required
        shown = "none" if steady is None else f"{window:.2f} s of {duration:.2f} s"
        reasons.append(f"short_steady_window: {shown} < {needed:.0%} of the level")
    return reasons
