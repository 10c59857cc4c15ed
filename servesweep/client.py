"""Streaming benchmark client for OpenAI-compatible servers (DESIGN.md §5, docs/metrics.md).

A level runs in worker processes (`servesweep/client_worker.py`), each with its own event
loop (uvloop where installed) and its own keep-alive connections, sharing the level's
concurrency: `workers` = min(usable cores, ceil(level / STREAMS_PER_WORKER)) unless set. This
process only coordinates: it hands out the requests, watches for a stall, and afterwards
turns the workers' raw timelines into request records (retokenizing off the timing path)
and the level summary.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import resource
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from servesweep import client_worker as cw
from servesweep import metrics
from servesweep.client_worker import BadStream, Stream, parse_stream, sse_events  # noqa: F401
from servesweep.workload import Prompt

PROGRESS_EVERY_S = 5.0
STREAMS_PER_WORKER = 256  # one more worker process per this many streams, up to the cores
DEFER_BUDGET_BYTES = 1 << 30  # raw stream bytes all workers keep for parsing after the level
PACKED_BUDGET_BYTES = 1 << 30  # past that, compressed stream bytes they keep
WORKER_START_TIMEOUT_S = 60.0
WORKER_PATH = str(Path(cw.__file__).resolve())


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


# ---- the worker processes -------------------------------------------------------------------


class _Pool:
    """The level's worker processes, and what they last said."""

    def __init__(self, cfgs: list[dict]):
        self.procs: list[subprocess.Popen] = []
        self.readers = [cw.MsgReader() for _ in cfgs]
        self.status = [(0, 0, 0, 0, time.perf_counter_ns()) for _ in cfgs]
        self.results: list = [None] * len(cfgs)
        self.phase_done = [set() for _ in cfgs]
        self.ready_ns = [None] * len(cfgs)
        self.sel = selectors.DefaultSelector()
        for i, cfg in enumerate(cfgs):
            proc = subprocess.Popen(
                [sys.executable, WORKER_PATH],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
            self.procs.append(proc)
            self.sel.register(proc.stdout, selectors.EVENT_READ, i)
            cw.send_msg(proc.stdin.fileno(), ("setup", cfg))

    def send(self, msg) -> None:
        for proc in self.procs:
            try:
                cw.send_msg(proc.stdin.fileno(), msg)
            except (BrokenPipeError, OSError):
                pass  # a dead worker is reported by poll()

    def poll(self, timeout_s: float) -> None:
        """Read whatever the workers said within timeout_s."""
        for key, _ in self.sel.select(timeout_s):
            i = key.data
            data = os.read(key.fd, 1 << 20)
            if not data:
                self.sel.unregister(key.fileobj)
                if self.results[i] is None:
                    code = self.procs[i].wait()
                    raise RuntimeError(f"client worker {i} exited with code {code}")
                continue
            for msg in self.readers[i].feed(data):
                if msg[0] == "status":
                    self.status[i] = msg[1:]
                elif msg[0] == "phase_done":
                    self.phase_done[i].add(msg[1])
                elif msg[0] == "ready":
                    self.ready_ns[i] = msg[1]
                elif msg[0] == "result":
                    self.results[i] = msg[1:]

    def close(self) -> None:
        self.sel.close()
        for proc in self.procs:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            if proc.poll() is None:
                proc.kill()  # our own child, by its pid
            proc.wait()


def _run_workers(
    cfgs: list[dict], total: int, stall_timeout_s: float, progress, label: str
) -> tuple[list, bool, int]:
    """Run the level's phases on the workers; returns (results, stalled, t0_ns)."""
    pool = _Pool(cfgs)
    try:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while None in pool.ready_ns:
            if time.monotonic() > deadline:
                raise RuntimeError("client workers did not start")
            pool.poll(0.1)
        stall_ns = int(stall_timeout_s * 1e9)
        stalled = False
        t0_ns = time.perf_counter_ns()
        last_report, last_events = time.monotonic(), 0
        for phase in (0, 1):
            start_ns = time.perf_counter_ns()
            pool.status = [(0, s[1], s[2], s[3], start_ns) for s in pool.status]
            pool.send(("go", phase))
            while not all(phase in done for done in pool.phase_done):
                pool.poll(0.05)
                inflight = sum(s[0] for s in pool.status)
                last_ns = max(start_ns, *(s[4] for s in pool.status))
                if not stalled and inflight and time.perf_counter_ns() - last_ns > stall_ns:
                    stalled = True
                    if progress:
                        progress(
                            f"{label}no progress for {stall_timeout_s:g} s with {inflight} "
                            "in flight: aborting the level (hung)"
                        )
                    pool.send(("abort",))
                now = time.monotonic()
                if progress and now - last_report >= PROGRESS_EVERY_S:
                    done = sum(s[1] for s in pool.status)
                    errors = sum(s[2] for s in pool.status)
                    events = sum(s[3] for s in pool.status)
                    # SSE events of finished requests: about one per token for most servers.
                    rate = (events - last_events) / (now - last_report)
                    progress(
                        f"{label}{done}/{total} done, {inflight} in flight, {errors} errors, "
                        f"{rate:.0f} events/s"
                    )
                    last_report, last_events = now, events
            if phase == 0 and cfgs[0]["phase_end"][0] > 0 and progress and not stalled:
                progress(f"{label}warmup done ({cfgs[0]['phase_end'][0]} requests)")
            if stalled:
                break
        while None in pool.results:
            pool.poll(1.0)
        return pool.results, stalled, t0_ns
    finally:
        pool.close()


# ---- records --------------------------------------------------------------------------------


def _token_counts(tokenizer, texts: list[str]) -> list[int]:
    encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    counts: list[int] = []
    for i in range(0, len(texts), 8192):
        counts.extend(len(e.ids) for e in encode(texts[i : i + 8192], add_special_tokens=False))
    return counts


def _retokenize(tokenizer, streams: list[tuple]) -> list[tuple[list[int], int]]:
    """Per stream: each chunk's text encoded alone, and the whole text encoded at once.
    Chunk texts repeat a lot (one token each, mostly), so each distinct one is encoded once."""
    distinct: dict[str, int] = {}
    for s in streams:
        for text in s[1]:
            distinct.setdefault(text, len(distinct))
    counts = _token_counts(tokenizer, list(distinct))
    whole = _token_counts(tokenizer, ["".join(s[1]) for s in streams])
    return [([counts[distinct[t]] for t in s[1]], w) for s, w in zip(streams, whole, strict=True)]


def build_records(rows: list[tuple], prompts: list[Prompt], warmup: int, tokenizer, t0_ns: int):
    """Request records (docs/records.md) from the workers' result rows, sorted by index.
    A row is (index, status, error, detail, sent_ns, end_ns, stream, worker) where stream is
    (chunk_ns, texts, usage_cumulative, prompt_tokens, completion_tokens) or None."""
    rows = sorted(rows, key=lambda r: r[0])
    good = [r for r in rows if r[2] is None]
    retok = _retokenize(tokenizer, [r[6] for r in good]) if tokenizer is not None else None
    retok_by_index = {r[0]: rt for r, rt in zip(good, retok, strict=True)} if retok else {}

    records = []
    for index, status, error, detail, sent_ns, end_ns, stream, worker in rows:
        rec = {
            "index": index,
            "warmup": index < warmup,
            "ok": error is None,
            "error": error,
            "status_code": status,
            "prompt_tokens": prompts[index].input_tokens,
            "output_tokens": None,
            "retokenized_tokens": None,
            "retokenized_whole_tokens": None,
            "usage_reported": False,
            "worker": worker,
            "sent_s": round((sent_ns - t0_ns) / 1e9, 6),
            "end_s": round((end_ns - t0_ns) / 1e9, 6),
            "ttft_ms": None,
            "e2el_ms": None,
            "tpot_ms": None,
            "chunk_times_ms": [],
            "chunk_tokens": [],
            "error_detail": detail,
        }
        if error is not None:
            records.append(rec)
            continue
        chunk_ns, texts, usage_cumulative, prompt_tokens, completion_tokens = stream
        chunks, whole = retok_by_index.get(index, (None, None))
        if prompt_tokens is not None:
            rec["prompt_tokens"] = prompt_tokens
        rec["usage_reported"] = completion_tokens is not None
        # Each chunk's text encoded alone, at least one token each (it came from one). The
        # whole text encoded at once (SGLang's retokenized count) is kept for comparison;
        # it is no check: random tokens do not re-encode to themselves.
        rec["retokenized_tokens"] = sum(max(1, c) for c in chunks) if chunks else None
        rec["retokenized_whole_tokens"] = whole
        if completion_tokens is not None:
            out = completion_tokens
        else:
            out = rec["retokenized_tokens"] if chunks is not None else len(chunk_ns)
        rec["output_tokens"] = out
        per_chunk = metrics.tokens_per_chunk(usage_cumulative, chunks, out)
        rec.update(metrics.request_metrics(sent_ns, end_ns, chunk_ns, per_chunk, out))
        records.append(rec)
    return records


# ---- entry points ---------------------------------------------------------------------------


def run_level(
    settings: ClientSettings,
    prompts: list[Prompt],
    concurrency: int,
    warmup: int,
    records_path: Path,
    level: int,
    repeat: int,
    progress: Callable[[str], None] | None = None,
    error_rate_threshold: float = metrics.DEFAULT_ERROR_RATE_THRESHOLD,
) -> dict:
    """Run `warmup` requests (recorded with warmup: true, excluded from every statistic),
    then the rest with at most `concurrency` in flight. Writes one JSON line per request to
    records_path and returns the level summary. Server faults never raise: they become
    per-request errors, and a stall ends the level with status failed, cause hung."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if not 0 <= warmup < len(prompts):
        raise ValueError(f"need more prompts ({len(prompts)}) than warmup requests ({warmup})")
    endpoint_url(settings)  # fails early on a bad endpoint
    raise_open_file_limit()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    n = len(prompts)
    workers = worker_count(settings, concurrency)
    label = f"L{level} r{repeat}: "

    with tempfile.TemporaryDirectory(prefix="servesweep-client-") as tmp:
        # Request bodies in one file the workers map; they take job numbers from a shared
        # counter (per phase: warmup, measured) so any free slot sends the next request.
        offsets = [0]
        with open(Path(tmp) / "jobs", "wb") as f:
            for p in prompts:
                body = json.dumps(request_body(settings, p.text, p.output_tokens)).encode()
                f.write(body)
                offsets.append(offsets[-1] + len(body))
        (Path(tmp) / "counter").write_bytes(
            (0).to_bytes(8, "little") + warmup.to_bytes(8, "little")
        )
        slots = [_split(min(concurrency, warmup), workers), _split(min(concurrency, n), workers)]
        cfgs = [
            {
                "url": endpoint_url(settings),
                "timeout_s": settings.request_timeout_s,
                "jobs_path": str(Path(tmp) / "jobs"),
                "counter_path": str(Path(tmp) / "counter"),
                "offsets": offsets,
                "phase_end": [warmup, n],
                "slots": [slots[0][w], slots[1][w]],
                "workers": workers,
                "defer_budget_bytes": DEFER_BUDGET_BYTES // workers,
                "packed_budget_bytes": PACKED_BUDGET_BYTES // workers,
            }
            for w in range(workers)
        ]
        results, stalled, t0_ns = _run_workers(cfgs, n, settings.stall_timeout_s, progress, label)

    rows = [(*row, w) for w, (worker_rows, _) in enumerate(results) for row in worker_rows]
    stats = [s for _, s in results]
    records = build_records(rows, prompts, warmup, settings.tokenizer, t0_ns)
    records_path = Path(records_path)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    with open(records_path, "w") as f:
        for rec in records:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    summary = metrics.summarize(
        records,
        level,
        repeat,
        concurrency=concurrency,
        num_prompts=n - warmup,
        stalled=stalled,
        error_rate_threshold=error_rate_threshold,
        client_cpu_s=sum(s["cpu_s"] for s in stats),
        client_cpu_share=max(s["cpu_s"] / s["wall_s"] if s["wall_s"] else 0.0 for s in stats),
        client_max_loop_lag_ms=max(s["max_lag_ms"] for s in stats),
        client_workers=workers,
        started_at=started_at,
        clock_origin_ns=t0_ns,
    )
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
    r = await cw.fetch(endpoint_url(settings), payload, timeout_s)
    if r.error:
        return GenerationProbe(r.error, r.detail, 0)
    s: Stream = r.stream
    if s.completion_tokens is not None:
        tokens = s.completion_tokens
    elif settings.tokenizer is not None:
        tokens = _token_counts(settings.tokenizer, ["".join(s.texts)])[0]
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
