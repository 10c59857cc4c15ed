"""Benchmark metric math: pure functions over request timelines, no I/O.

Definitions, and how they map to vLLM / SGLang / AIPerf / guidellm, are in docs/metrics.md.
Times inside a request record are ms after the request was sent; `sent_s` and `end_s` are
seconds after the level's start.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from servesweep import METRICS_VERSION
from servesweep.bench.arrivals import rate_figures
from servesweep.level import Level
from servesweep.records import LevelSummary

LATENCIES = ("ttft", "tpot", "itl", "e2el", "chunk_gap")
STATS = ("mean", "median", "std", "p90", "p99")
USAGE_TOLERANCE = 0.02  # usage vs the content chunks that streamed in
CLIENT_BOUND_RATIO = 0.95  # concurrency held under this share of the target
CLIENT_CPU_SATURATED = 0.9  # one client process busy this share of the level's wall time
DEFAULT_ERROR_RATE_THRESHOLD = 0.5


# ---- one request ---------------------------------------------------------------------------


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """Split the integer `total` over chunks in proportion to `weights` (largest remainder),
    so per-chunk counts always sum to the server's total."""
    if not weights:
        return []
    s = float(sum(weights))
    if s <= 0:
        weights, s = [1] * len(weights), float(len(weights))
    exact = [w * total / s for w in weights]
    out = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (out[i] - exact[i], i))
    for i in by_remainder[: total - sum(out)]:
        out[i] += 1
    return out


def tokens_per_chunk(
    usage_cumulative: list[int | None], retokenized: list[int] | None, total: int | None
) -> list[int]:
    """Tokens each content chunk carried.

    Exact when the server streams cumulative usage on every chunk (its deltas); otherwise the
    chunks' retokenized counts fitted to the usage total (evenly split without a tokenizer);
    without usage, the retokenized counts; without either, one per chunk."""
    n = len(usage_cumulative)
    if n and all(u is not None for u in usage_cumulative):
        deltas = np.diff(cast(list[int], usage_cumulative), prepend=0).tolist()
        if all(d >= 0 for d in deltas):
            return deltas
    # A chunk with text came from at least one new token.
    weights = [max(1, w) for w in retokenized] if retokenized is not None else [1] * n
    if total is None:
        return weights
    if n <= total <= sum(weights):
        # Retokenized pieces often overcount (merges differ); scaling down would round some
        # chunks to 0, so each keeps one and only the extra tokens are scaled.
        return [1 + k for k in apportion([w - 1 for w in weights], total - n)]
    return apportion(weights, total)


def request_metrics(
    sent_ns: int,
    end_ns: int,
    chunk_ns: list[int],
    chunk_tokens: list[int],
    output_tokens: int | None,
) -> dict:
    """Latencies of one completed request from its send time, the arrival time of each content
    chunk and of its last byte (all perf_counter_ns)."""
    ttft = (chunk_ns[0] - sent_ns) / 1e6 if chunk_ns else None
    e2el = (end_ns - sent_ns) / 1e6
    tpot = None
    if ttft is not None and output_tokens is not None and output_tokens > 1:
        tpot = (e2el - ttft) / (output_tokens - 1)
    return {
        "ttft_ms": _r(ttft),
        "e2el_ms": _r(e2el),
        "tpot_ms": _r(tpot),
        "chunk_times_ms": [round((t - sent_ns) / 1e6, 3) for t in chunk_ns],
        "chunk_tokens": list(chunk_tokens),
    }


def itl_gaps(chunk_times_ms: list[float], chunk_tokens: list[int]) -> np.ndarray:
    """Per-token gaps: the gap before each token-bearing chunk, split equally over the tokens
    it carried. The first chunk's tokens belong to TTFT; a chunk that carried no tokens passes
    its time on to the next one."""
    times = np.asarray(chunk_times_ms, dtype=float)
    tokens = np.asarray(chunk_tokens, dtype=int)
    keep = tokens > 0
    times, tokens = times[keep], tokens[keep]
    if len(times) < 2:
        return np.empty(0)
    per_token = np.diff(times) / tokens[1:]
    return np.repeat(per_token, tokens[1:])


def chunk_gaps(chunk_times_ms: list[float]) -> np.ndarray:
    """Raw gaps between consecutive content chunks, whatever they carried."""
    return np.diff(np.asarray(chunk_times_ms, dtype=float))


def usage_mismatch(record: dict) -> bool:
    """The server's usage count is inconsistent with what streamed in: fewer tokens than
    content chunks (each chunk came from at least one token), by more than 2 %.

    The count is not checked from above: a chunk's text encoded alone is no upper bound on
    the tokens that made it. Where a server coalesces tokens into one chunk (vLLM does when
    its streaming loop falls behind the engine, at one stream too), adjacent tokens' texts
    merge when encoded together ("********" twice encodes as one "****************" token),
    so a right count exceeds the chunks' retokenized sum (docs/metrics.md)."""
    usage = record.get("output_tokens")
    if not usage or not record.get("usage_reported", True):
        return False
    chunks = len(record.get("chunk_times_ms") or [])
    return usage < chunks * (1 - USAGE_TOLERANCE)


# ---- one level -----------------------------------------------------------------------------


def stats(values) -> dict:
    """mean, median, std (population, as vLLM/SGLang), p90, p99 (linear interpolation)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return dict.fromkeys(STATS)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {
        "mean": _r(a.mean()),
        "median": _r(p50),
        "std": _r(a.std()),
        "p90": _r(p90),
        "p99": _r(p99),
    }


def steady_window(
    intervals: list[tuple[float, float]], target: float
) -> tuple[float, float] | None:
    """(start, end): from the moment `target` requests are first in flight to the moment the
    last request is sent. None when that never happens or the window is empty."""
    if not intervals or target < 1:
        return None
    # Ends sort before sends at the same instant: a slot freed and refilled is not an overlap.
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    end = max(s for s, _ in intervals)
    inflight = 0
    for t, step in events:
        inflight += step
        if inflight >= target:
            return (t, end) if end > t else None
    return None


def mean_inflight(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Time-weighted mean number of requests in flight over [start, end]."""
    busy = sum(max(0.0, min(e, end) - max(s, start)) for s, e in intervals)
    return busy / (end - start)


def peak_throughput(arrivals_s: np.ndarray, tokens: np.ndarray, origin_s: float) -> float | None:
    """Most tokens that arrived in any 1-second bucket counted from origin_s."""
    if len(arrivals_s) == 0:
        return None
    buckets = np.floor(np.asarray(arrivals_s) - origin_s).astype(int)
    buckets -= buckets.min()
    return float(np.bincount(buckets, weights=tokens).max())


def level_summary(
    records: list[dict],
    level: Level,
    repeat: int,
    *,
    concurrency: float | None = None,
    num_prompts: int | None = None,
    stalled: bool = False,
    timed_out: bool = False,
    error_rate_threshold: float = DEFAULT_ERROR_RATE_THRESHOLD,
    client_cpu_s: float | None = None,
    client_cpu_share: float | None = None,
    client_max_loop_lag_ms: float | None = None,
    client_workers: int | None = None,
    started_at: str | None = None,
    clock_origin_ns: int | None = None,
) -> LevelSummary:
    """The level summary (docs/records.md) from its request records (warmups are skipped).

    `num_prompts` is how many measured requests were asked for (default: as many as were
    recorded); `stalled` marks a level the client aborted because nothing progressed,
    `timed_out` one it aborted because the job's time limit was near;
    `client_cpu_share` is the busiest client worker's CPU time over its wall time. A rate
    level (records with `scheduled_s`) adds its rate figures
    (`servesweep.bench.arrivals.rate_figures`); its steady window is first send → last send."""
    measured = [r for r in records if not r.get("warmup")]
    ok = [r for r in measured if r.get("ok")]
    bad = [r for r in measured if not r.get("ok")]
    target = min(concurrency or level.value, len(measured)) if measured else 0
    scheduled = level.is_rate and all("scheduled_s" in r for r in measured) and measured
    if scheduled:
        # Open loop: the arrival process runs from the first send to the last, whatever is
        # in flight, so that is the steady window and every request counts towards it.
        target = 1

    summary: dict = {"level": level.json, "repeat": repeat, "status": "ok", "cause": None}
    summary["metrics_version"] = METRICS_VERSION
    summary["num_prompts"] = num_prompts if num_prompts is not None else len(measured)
    summary["warmup"] = len(records) - len(measured)
    summary["completed"] = len(ok)
    summary["failed"] = len(bad)
    summary["errors"] = dict(Counter(r.get("error") or "unknown" for r in bad))
    if timed_out:
        summary["status"], summary["cause"] = "failed", "time_limit"
    elif stalled:
        summary["status"], summary["cause"] = "failed", "hung"
    elif not measured or len(bad) / len(measured) > error_rate_threshold:
        summary["status"], summary["cause"] = "failed", "http_errors"

    intervals = [(r["sent_s"], r["end_s"]) for r in measured]
    summary.update(_throughputs(ok, intervals))
    achieved, never_held = _steady(summary, ok, intervals, target)
    # Mean in flight over the steady window (null when there is none, e.g. when all the
    # level's requests are sent at once); the whole level's mean, drain included, is SGLang's
    # `concurrency`.
    summary["achieved_concurrency"] = _r(achieved)
    busy = sum(e - s for s, e in intervals)
    duration = summary["duration_s"]
    summary["concurrency"] = _r(busy / duration) if duration else None
    summary["client_cpu_share"] = _r(client_cpu_share)
    # Client-bound: it did not keep the target in flight while it still had requests to
    # send, or a worker process was busy nearly all the time, which delays every timestamp.
    saturated = client_cpu_share is not None and client_cpu_share >= CLIENT_CPU_SATURATED
    summary["client_bound"] = bool(
        never_held
        or (achieved is not None and achieved < CLIENT_BOUND_RATIO * target and not scheduled)
        or saturated
    )
    if scheduled:
        figures = rate_figures(measured, level.value)
        summary["load"] = "rate"
        cap = cast(float, concurrency)  # a rate level's client runs under its cap
        summary["max_concurrency"] = concurrency if cap < len(measured) else None
        summary.update(figures._asdict())
        summary["client_bound"] = bool(saturated or figures.rate_short)
    summary.update(_latencies(ok))
    summary["usage_mismatch"] = sum(usage_mismatch(r) for r in ok)
    summary["client_cpu_s"] = _r(client_cpu_s)
    summary["client_max_loop_lag_ms"] = _r(client_max_loop_lag_ms)
    summary["client_workers"] = client_workers
    summary["started_at"] = started_at
    summary["clock_origin_ns"] = clock_origin_ns
    return cast(LevelSummary, summary)


def _throughputs(ok: list[dict], intervals: list[tuple[float, float]]) -> dict:
    """Whole-level duration, token totals and throughputs (vLLM/SGLang meaning)."""
    first_sent = min((s for s, _ in intervals), default=None)
    duration = max(e for _, e in intervals) - cast(float, first_sent) if intervals else None
    if duration is not None and duration <= 0:
        duration = None
    in_tokens = sum(r.get("prompt_tokens") or 0 for r in ok)
    out_tokens = sum(r.get("output_tokens") or 0 for r in ok)
    return {
        "duration_s": _r(duration),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "output_throughput": _per(out_tokens, duration),
        "total_token_throughput": _per(in_tokens + out_tokens, duration),
        "request_throughput": _per(len(ok), duration),
    }


def _token_arrivals(ok: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Token arrival times (s after the level's start) and the tokens each brought."""
    sent: list[Any] = [r["sent_s"] + np.asarray(r["chunk_times_ms"], dtype=float) / 1e3 for r in ok]
    counts: list[Any] = [np.asarray(r["chunk_tokens"], dtype=float) for r in ok]
    arrivals = np.concatenate(sent or [[]])
    tokens = np.concatenate(counts or [[]])
    return arrivals, tokens


def _steady(
    summary: dict, ok: list[dict], intervals: list[tuple[float, float]], target: float
) -> tuple[float | None, bool]:
    """Fill the steady-window fields and the peak; return (mean in flight over the window,
    or over the sending time when the target was never held; whether it never was)."""
    arrivals, arrival_tokens = _token_arrivals(ok)
    first_sent = min((s for s, _ in intervals), default=None)
    last_sent = max((s for s, _ in intervals), default=None)
    summary["peak_output_throughput"] = (
        peak_throughput(arrivals, arrival_tokens, first_sent) if first_sent is not None else None
    )
    window = steady_window(intervals, target)
    # Never `target` in flight although there were more requests than that to send: the
    # client could not fill the level. Its mean in flight while it was sending says how far.
    never_held = window is None and len(intervals) > target
    if window is None:
        summary["steady_window_s"] = None
        summary["steady_output_throughput"] = None
        summary["steady_total_token_throughput"] = None
        # Never held: more requests than the target, so there were sends.
        first, last = cast(float, first_sent), cast(float, last_sent)
        if never_held and last > first:
            return mean_inflight(intervals, first, last), never_held
        return None, never_held
    start, end = window
    length = end - start
    inside = (arrivals >= start) & (arrivals <= end)
    steady_out = float(arrival_tokens[inside].sum())
    # Input tokens count when their request is sent inside the window.
    steady_in = sum(r.get("prompt_tokens") or 0 for r in ok if start < r["sent_s"] <= end)
    summary["steady_window_s"] = _r(length)
    summary["steady_output_throughput"] = _per(steady_out, length)
    summary["steady_total_token_throughput"] = _per(steady_out + steady_in, length)
    return mean_inflight(intervals, start, end), never_held


def _latencies(ok: list[dict]) -> dict:
    series = {
        "ttft": [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None],
        "tpot": [r["tpot_ms"] for r in ok if r.get("tpot_ms") is not None],
        "e2el": [r["e2el_ms"] for r in ok if r.get("e2el_ms") is not None],
        "itl": _concat([itl_gaps(r["chunk_times_ms"], r["chunk_tokens"]) for r in ok]),
        "chunk_gap": _concat([chunk_gaps(r["chunk_times_ms"]) for r in ok]),
    }
    return {
        f"{stat}_{name}_ms": value
        for name in LATENCIES
        for stat, value in stats(series[name]).items()
    }


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0)


def _per(amount: float, seconds: float | None) -> float | None:
    return _r(amount / seconds) if seconds else None


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)
