"""Goodput under SLOs (docs/load_modes.md): per level, the share of measured requests that
met every configured target, and the requests and output tokens per second of those that
did, over the level's duration (vLLM's `--goodput`, MLPerf's server scenario).

Judged in collect from the stored requests, so changing `slo:` reruns no cell; the capacity
search (servesweep.capacity.run) judges its levels the same way while the boot runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

# slo key -> the request field it bounds
SLO_FIELDS = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms", "e2e_ms": "e2el_ms"}


class Goodput(NamedTuple):
    slo_met: int  # measured requests that met every target
    slo_met_share: float | None  # of the measured requests (failed ones never meet it)
    goodput_request_rate: float | None  # met / duration_s
    goodput_output_throughput: float | None  # their output tokens / duration_s


def request_meets_slo(record: dict, slo: dict) -> bool:
    """A completed request meets the SLO when each target bounds its value. A one-token
    output has no TPOT, which no TPOT target can fail (as in vLLM)."""
    if not record.get("ok"):
        return False
    for key, limit in slo.items():
        value = record.get(SLO_FIELDS[key])
        if value is None:
            if key == "tpot_ms":
                continue
            return False
        if value > limit:
            return False
    return True


def goodput(records: list[dict], slo: dict, duration_s: float | None) -> Goodput:
    measured = [r for r in records if not r.get("warmup")]
    good = [r for r in measured if request_meets_slo(r, slo)]
    tokens = sum(r.get("output_tokens") or 0 for r in good)
    share = len(good) / len(measured) if measured else None
    per = (lambda x: round(x / duration_s, 4)) if duration_s else (lambda x: None)
    return Goodput(
        len(good),
        None if share is None else round(share, 4),
        per(len(good)),
        per(tokens),
    )


def level_goodput(requests_path: Path, slo: dict, duration_s) -> dict:
    """The goodput fields of one level from its .requests.jsonl ({} when it is gone)."""
    try:
        with open(requests_path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return {}
    duration = float(duration_s) if duration_s else None
    return goodput(records, slo, duration)._asdict()
