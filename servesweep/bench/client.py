"""Streaming benchmark client for OpenAI-compatible servers (docs/design.md §5, docs/metrics.md).

A level runs in worker processes (`servesweep.bench.worker`), each with its own event loop
(uvloop where installed) and its own keep-alive connections, sharing the level's
concurrency: `workers` = min(usable cores, ceil(level / STREAMS_PER_WORKER)) unless set. This
process only coordinates (`servesweep.bench.pool`): it hands out the requests, watches for a
stall, and afterwards turns the workers' raw timelines into request records (retokenizing
off the timing path) and the level summary.
"""

from __future__ import annotations

import json
import math
import os
import resource
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, cast

from servesweep.bench import metrics
from servesweep.bench.http1 import fetch
from servesweep.bench.messages import WorkerConfig
from servesweep.bench.pool import run_workers
from servesweep.bench.request_records import WorkerRow, build_records, token_counts
from servesweep.bench.sse import Stream
from servesweep.bench.stopping import PrecisionStop
from servesweep.jsonfile import utc_now
from servesweep.level import Level
from servesweep.records import LevelSummary
from servesweep.sizing import Precision
from servesweep.workloads.base import Prompt

STREAMS_PER_WORKER = 256  # one more worker process per this many streams, up to the cores
DEFER_BUDGET_BYTES = 1 << 30  # raw stream bytes all workers keep for parsing after the level
PACKED_BUDGET_BYTES = 1 << 30  # past that, compressed stream bytes they keep


@dataclass
class ClientSettings:
    base_url: str  # e.g. "http://127.0.0.1:8123"
    endpoint: str = "completions"  # or "chat"
    model: str | None = None  # sent as "model" when not None
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 120.0  # level aborted when NO request made progress this long
    extra_body: dict = field(default_factory=dict)  # merged into every request body
    tokenizer: object | None = None  # tokenizers.Tokenizer, for the retokenized counts
    workers: int | None = None  # worker processes; None: by level and usable cores


def endpoint_url(settings: ClientSettings) -> str:
    paths = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
    if settings.endpoint not in paths:
        raise ValueError(f"endpoint must be 'completions' or 'chat', not {settings.endpoint!r}")
    return settings.base_url.rstrip("/") + paths[settings.endpoint]


def request_body(settings: ClientSettings, text: str, max_tokens: int) -> dict:
    # No ignore_eos/min_tokens here: transformers serve answers unknown fields with 422.
    body: dict = {}
    if settings.model is not None:
        body["model"] = settings.model
    if settings.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    body.update(
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        temperature=0,
    )
    body.update(settings.extra_body)
    return body


def worker_count(settings: ClientSettings, concurrency: int) -> int:
    if settings.workers:
        return max(1, min(settings.workers, concurrency))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, math.ceil(concurrency / STREAMS_PER_WORKER)))


def raise_open_file_limit() -> None:
    """Soft open-file limit up to the hard one: 1,024 streams need more than 1,024 fds.
    Worker processes inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (hard, 1 << 20, 65536):
        if target != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft >= target:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            continue


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (i < n % parts) for i in range(parts)]


def _worker_configs(
    settings: ClientSettings,
    prompts: list[Prompt],
    warmup: int,
    concurrency: int,
    tmp: Path,
    schedule_s: list[float] | None = None,
    warmup_schedule_s: list[float] | None = None,
) -> list[WorkerConfig]:
    """Write the level's request bodies into one file the workers map, and a counter they
    take job numbers from (per phase: warmup, measured), so any free slot in any worker
    sends the next request; return each worker's share. A rate level (`schedule_s`) runs
    in one worker, which sends each measured request when it is due (and each warm-up
    request, given `warmup_schedule_s`)."""
    n = len(prompts)
    workers = 1 if schedule_s is not None else worker_count(settings, concurrency)
    offsets = [0]
    with open(tmp / "jobs", "wb") as f:
        for p in prompts:
            body = json.dumps(request_body(settings, p.text, p.output_tokens)).encode()
            f.write(body)
            offsets.append(offsets[-1] + len(body))
    (tmp / "counter").write_bytes((0).to_bytes(8, "little") + warmup.to_bytes(8, "little"))
    slots = [_split(min(concurrency, warmup), workers), _split(min(concurrency, n), workers)]
    rate_cap = concurrency if schedule_s is not None and concurrency < n else 0
    return [
        WorkerConfig(
            url=endpoint_url(settings),
            timeout_s=settings.request_timeout_s,
            jobs_path=str(tmp / "jobs"),
            counter_path=str(tmp / "counter"),
            offsets=offsets,
            phase_end=[warmup, n],
            slots=[slots[0][w], slots[1][w]],
            workers=workers,
            defer_budget_bytes=DEFER_BUDGET_BYTES // workers,
            packed_budget_bytes=PACKED_BUDGET_BYTES // workers,
            schedule_ns=_ns(schedule_s),
            cap=rate_cap,
            warmup_schedule_ns=_ns(warmup_schedule_s),
        )
        for w in range(workers)
    ]


def _ns(schedule_s: list[float] | None) -> list[int] | None:
    return None if schedule_s is None else [round(t * 1e9) for t in schedule_s]


def mark_schedule(records: list, result, schedule_s: list[float], warmup: int, t0_ns: int) -> None:
    """Each measured record's scheduled send time (`scheduled_s`, on the records' clock)
    and whether the concurrency cap held it (`held`)."""
    origin = result.schedule_origin_ns
    held = set(result.held)
    for rec in records:
        k = rec["index"] - warmup
        if k < 0 or origin is None:
            continue
        rec["scheduled_s"] = round((origin - t0_ns) / 1e9 + schedule_s[k], 6)
        rec["held"] = rec["index"] in held


def write_records(path: Path, records: list) -> None:
    """One JSON line per request."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for rec in records:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")


def run_level(
    settings: ClientSettings,
    prompts: list[Prompt],
    concurrency: int,
    warmup: int,
    records_path: Path,
    level: Level,
    repeat: int,
    progress: Callable[[str], None] | None = None,
    error_rate_threshold: float = metrics.DEFAULT_ERROR_RATE_THRESHOLD,
    cutoff: float | None = None,
    schedule_s: list[float] | None = None,
    warmup_schedule_s: list[float] | None = None,
    precision: Precision | None = None,
    boot_share_s: float | None = None,
) -> LevelSummary:
    """Run `warmup` requests (recorded with warmup: true, excluded from every statistic),
    then the rest with at most `concurrency` in flight; the measured requests start once
    every warm-up request has ended. A rate level (its measured requests due at
    `schedule_s`, seconds from the first) sends each when due, `concurrency` being its cap
    (at least the number of prompts: none); its warm-up likewise at `warmup_schedule_s`
    (None: all at once, closed loop). Writes one JSON
    line per request to records_path and returns the level summary. Server faults never
    raise: they become per-request errors, and a stall ends the level with status failed,
    cause hung; so does `cutoff` (time.monotonic: the job's time limit, less a margin) with
    cause time_limit. `precision` (num_prompts: auto, a concurrency level): the prompts are
    the most it may send, and the measured requests end when the stop rule says
    (servesweep.sizing; `boot_share_s`, the boot's start-up seconds a level, is what its
    cost-optimal target weighs the level's seconds against); the summary says why
    (stop_reason, stop_rse, stop_batches)."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if not 0 <= warmup < len(prompts):
        raise ValueError(f"need more prompts ({len(prompts)}) than warmup requests ({warmup})")
    endpoint_url(settings)  # fails early on a bad endpoint
    raise_open_file_limit()
    started_at = utc_now()
    label = f"L{level} r{repeat}: "
    with tempfile.TemporaryDirectory(prefix="servesweep-client-") as tmp:
        configs = _worker_configs(
            settings, prompts, warmup, concurrency, Path(tmp), schedule_s, warmup_schedule_s
        )
        stopper = None
        if precision is not None:
            size = precision.batch_size(level)
            stopper = PrecisionStop(precision, size, warmup, boot_share_s, level)
        outcome = run_workers(
            configs, len(prompts), settings.stall_timeout_s, progress, label, cutoff, stopper
        )

    rows = [WorkerRow(row, w) for w, result in enumerate(outcome.results) for row in result.rows]
    records = build_records(rows, prompts, warmup, settings.tokenizer, outcome.t0_ns)
    if schedule_s is not None:
        mark_schedule(records, outcome.results[0], schedule_s, warmup, outcome.t0_ns)
    write_records(records_path, records)
    stats = [result.stats for result in outcome.results]
    summary = metrics.level_summary(
        cast(list[dict], records),  # RequestRecords, read as plain dicts
        level,
        repeat,
        concurrency=concurrency,
        # Under auto, as many as it sent (the rest of the prompts were never asked for).
        num_prompts=len(prompts) - warmup if stopper is None else len(records) - warmup,
        stalled=outcome.stalled,
        timed_out=outcome.timed_out,
        error_rate_threshold=error_rate_threshold,
        client_cpu_s=sum(s.cpu_s for s in stats),
        client_cpu_share=max(s.cpu_s / s.wall_s if s.wall_s else 0.0 for s in stats),
        client_max_loop_lag_ms=max(s.max_lag_ms for s in stats),
        client_workers=len(configs),
        started_at=started_at,
        clock_origin_ns=outcome.t0_ns,
    )
    if stopper is not None:
        summary.update(cast(LevelSummary, stopper.fields()))  # its stop_* fields
    if progress:
        held = summary["achieved_concurrency"]
        progress(
            f"{label}{summary['status']}: {summary['completed']} ok, {summary['failed']} failed, "
            f"{summary['output_throughput'] or 0:.0f} output tok/s, achieved concurrency "
            f"{'n/a' if held is None else f'{held:.1f}'}"
        )
    return summary


class GenerationProbe(NamedTuple):
    """What one short readiness or liveness generation got."""

    error: str | None  # a request error kind (docs/metrics.md), None when it streamed text
    detail: str | None  # the start of the body or exception, for the record
    tokens: int  # output tokens it generated


async def probe_generation(
    settings: ClientSettings, prompt_text: str, max_tokens: int, timeout_s: float
) -> GenerationProbe:
    """One real streamed generation on a fresh connection, bounded by timeout_s; never
    raises for what the server does."""
    payload = json.dumps(request_body(settings, prompt_text, max_tokens)).encode()
    r = await fetch(endpoint_url(settings), payload, timeout_s)
    if r.error:
        return GenerationProbe(r.error, r.detail, 0)
    s = cast(Stream, r.stream)  # an answered request has its stream
    if s.completion_tokens is not None:
        tokens = s.completion_tokens
    elif settings.tokenizer is not None:
        tokens = token_counts(settings.tokenizer, ["".join(s.texts)])[0]
    else:
        tokens = len(s.chunk_ns)
    return GenerationProbe(None, None, tokens)


async def generate_once(settings: ClientSettings, prompt_text: str, max_tokens: int) -> int:
    """One real streamed generation; returns its output tokens. Raises RuntimeError when the
    server does not deliver one."""
    probe = await probe_generation(settings, prompt_text, max_tokens, settings.request_timeout_s)
    if probe.error:
        detail = f": {probe.detail}" if probe.detail else ""
        raise RuntimeError(f"generation failed: {probe.error}{detail}")
    return probe.tokens
