"""Streaming benchmark client for OpenAI-compatible servers (DESIGN.md §5, docs/metrics.md).

The timing path is kept lean: each request reads its raw byte stream in a tight loop and
appends (perf_counter_ns, bytes) per read. SSE parsing and retokenization wait until the
level is over (up to DEFER_BUDGET_BYTES of raw bytes; past that a stream is parsed as soon as
its request ends), and every event is stamped with the arrival of the read that completed it.
One process for now; run_requests is the unit a multi-process client would hand each worker.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import json
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from servesweep import metrics
from servesweep.workload import Prompt

PROGRESS_EVERY_S = 5.0
TICK_S = 0.01  # loop-lag ticker period; also how often stalls are checked
READ_BUFSIZE = 1 << 20
DEFER_BUDGET_BYTES = 512 << 20  # raw stream bytes kept for parsing after the level
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_SSE_FIELDS = (b"event:", b"id:", b"retry:")
_json_decode = json.JSONDecoder().decode  # skips json.loads' per-call encoding sniffing


@dataclass
class ClientSettings:
    base_url: str  # e.g. "http://127.0.0.1:8123"
    endpoint: str = "completions"  # or "chat"
    model: str | None = None  # sent as "model" when not None
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 120.0  # level aborted when NO request made progress this long
    extra_body: dict = field(default_factory=dict)  # merged into every request body
    tokenizer: object | None = None  # tokenizers.Tokenizer, for the retokenized cross-check


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


# ---- SSE parsing (off the timing path) -----------------------------------------------------


class BadStream(ValueError):
    pass


@dataclass
class Stream:
    """What a finished response stream said."""

    chunk_ns: list[int] = field(default_factory=list)  # arrival of each content chunk
    texts: list[str] = field(default_factory=list)  # its text (reasoning + content)
    usage_cumulative: list[int | None] = field(default_factory=list)  # usage on that chunk
    prompt_tokens: int | None = None  # from the last usage seen
    completion_tokens: int | None = None
    finished: bool = False  # saw a finish_reason or [DONE]
    error: str | None = None  # bad_stream or stream_error
    detail: str | None = None


def sse_events(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """(arrival_ns, event block) per SSE event, stamped with the read that completed it.
    A trailing event without its blank line still counts (some servers end that way)."""
    events: list[tuple[int, bytes]] = []
    pending = b""
    for t, data in reads:
        buf = pending + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        *blocks, pending = buf.split(b"\n\n")
        events.extend((t, b) for b in blocks)
    if pending.strip():
        events.append((reads[-1][0], pending))
    return events


def _event_data(block: bytes) -> bytes | None:
    if block.startswith(b"data: ") and b"\n" not in block:  # the usual one-line event
        return block[6:]
    data = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(b" ") else value)
        elif line and not line.startswith(b":") and not line.startswith(_SSE_FIELDS):
            raise BadStream(f"not an SSE line: {line[:80]!r}")
    return b"\n".join(data) if data else None


def _chunk_text(choice: dict) -> str:
    text = choice.get("text") or ""
    delta = choice.get("delta") or {}
    # Some servers send the same reasoning under both names: take one.
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str):
        text += reasoning
    content = delta.get("content")
    if isinstance(content, str):
        text += content
    return text


def parse_stream(reads: list[tuple[int, bytes]]) -> Stream:
    """Content chunks, usage and end of an OpenAI-style completion stream."""
    s = Stream()
    try:
        for t, block in sse_events(reads):
            data = _event_data(block)
            if data is None:
                continue
            if data.strip() == b"[DONE]":
                s.finished = True
                continue
            try:
                obj = _json_decode(data.decode())
            except ValueError as exc:
                raise BadStream(f"not JSON: {data[:80]!r}") from exc
            if not isinstance(obj, dict):
                raise BadStream(f"not a JSON object: {data[:80]!r}")
            if obj.get("error"):
                s.error, s.detail = "stream_error", str(obj["error"])[:300]
                return s
            usage = obj.get("usage")
            if isinstance(usage, dict):
                s.prompt_tokens = usage.get("prompt_tokens", s.prompt_tokens)
                s.completion_tokens = usage.get("completion_tokens", s.completion_tokens)
            choices = obj.get("choices") or []
            if not choices:  # e.g. the final usage chunk
                continue
            choice = choices[0]
            if choice.get("finish_reason"):
                s.finished = True
            text = _chunk_text(choice)
            if text:  # role-only and empty chunks carry no token
                s.chunk_ns.append(t)
                s.texts.append(text)
                s.usage_cumulative.append(
                    usage.get("completion_tokens") if isinstance(usage, dict) else None
                )
    except (BadStream, AttributeError, TypeError) as exc:
        s.error, s.detail = "bad_stream", str(exc)[:300]
    return s


# ---- the request loop ----------------------------------------------------------------------


class _State:
    """Shared by the requests of one level; read by the monitor."""

    def __init__(self, total: int):
        self.total = total
        self.inflight = 0
        self.done = 0
        self.errors = 0
        self.events = 0  # SSE events received by finished requests
        self.deferred_bytes = 0
        self.last_progress_ns = time.perf_counter_ns()
        self.stalled = False
        self.max_lag_s = 0.0
        self.tasks: list[asyncio.Task] = []


def make_session(settings: ClientSettings) -> aiohttp.ClientSession:
    # The workers bound concurrency, so the connector does not (limit=0).
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=settings.request_timeout_s),
        read_bufsize=READ_BUFSIZE,
        trust_env=False,
    )


async def _send(session, url: str, payload: bytes, raw: dict, state: _State) -> None:
    """One streamed request; fills raw with its status, reads or error kind."""
    reads: list[tuple[int, bytes]] = []
    raw.update(status_code=None, error=None, detail=None, reads=reads)
    state.inflight += 1
    raw["sent_ns"] = time.perf_counter_ns()
    try:
        async with session.post(url, data=payload, headers=_HEADERS) as resp:
            raw["status_code"] = resp.status
            if resp.status != 200:
                raw["error"] = f"http_{resp.status}"
                raw["detail"] = (await resp.read())[:300].decode(errors="replace")
            else:
                read = resp.content.readany
                while True:
                    data = await read()
                    t = time.perf_counter_ns()
                    if not data:
                        break
                    reads.append((t, data))
                    state.last_progress_ns = t
    except asyncio.CancelledError:
        raw["error"] = "stalled"  # the monitor aborted the level
        raise
    except TimeoutError:  # also aiohttp's socket timeouts
        raw["error"] = "timeout"
    except aiohttp.ClientConnectorError as exc:
        raw["error"], raw["detail"] = "connect", str(exc)[:300]
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionError) as exc:
        raw["error"], raw["detail"] = "disconnect", str(exc)[:300]
    except aiohttp.ClientOSError as exc:
        raw["error"], raw["detail"] = "disconnect", str(exc)[:300]
    except (aiohttp.ClientError, ValueError) as exc:
        raw["error"], raw["detail"] = "client_error", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        now = time.perf_counter_ns()
        # A good request ends at its last byte; a failed one when the failure was seen.
        raw["end_ns"] = reads[-1][0] if reads and raw["error"] is None else now
        state.inflight -= 1
        if raw["error"] != "stalled":
            state.last_progress_ns = now


def _finish(raw: dict, state: _State) -> None:
    """Book a finished request. Its stream is parsed after the level, while the memory budget
    lasts, so parsing does not compete with the timing of the requests still in flight."""
    state.done += 1
    if raw["error"] is not None:
        state.errors += 1
        raw.pop("reads")
        return
    reads = raw["reads"]
    state.events += sum(data.count(b"\n\n") for _, data in reads)
    if state.deferred_bytes < DEFER_BUDGET_BYTES:
        state.deferred_bytes += sum(len(data) for _, data in reads) + 100 * len(reads)
    else:
        _parse(raw)


def _parse(raw: dict) -> None:
    """Parse a request's stream and drop its raw bytes; stream faults become its error."""
    s = parse_stream(raw.pop("reads"))
    raw["stream"] = s
    if s.error:
        raw["error"], raw["detail"] = s.error, s.detail
    elif not s.chunk_ns:
        # A stream that finished properly but said nothing vs one that just ended.
        raw["error"] = "empty" if s.finished else "disconnect"


async def run_requests(
    session: aiohttp.ClientSession,
    settings: ClientSettings,
    jobs: list[tuple[int, bool, Prompt]],
    concurrency: int,
    state: _State,
    sink: list[dict],
) -> None:
    """Send jobs (index, warmup, prompt) with at most `concurrency` in flight; append one raw
    result per request to sink. This is the unit a multi-process client would give each
    worker process (perf_counter_ns is CLOCK_MONOTONIC, comparable across processes)."""
    url = endpoint_url(settings)
    pending = iter(jobs)

    async def worker() -> None:
        for index, warmup, prompt in pending:  # workers share one iterator
            payload = json.dumps(request_body(settings, prompt.text, prompt.output_tokens))
            raw = {"index": index, "warmup": warmup, "prompt": prompt}
            sink.append(raw)
            await _send(session, url, payload.encode(), raw, state)
            _finish(raw, state)

    state.tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(jobs)))]
    results = await asyncio.gather(*state.tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
            raise r


async def _monitor(state: _State, stall_timeout_s: float, progress, label: str) -> None:
    """Measures event-loop lag, aborts the level on a stall, reports progress."""
    stall_ns = int(stall_timeout_s * 1e9)
    last_report = time.perf_counter()
    last_events = 0
    while True:
        before = time.perf_counter()
        await asyncio.sleep(TICK_S)
        now = time.perf_counter()
        state.max_lag_s = max(state.max_lag_s, now - before - TICK_S)
        if state.inflight and time.perf_counter_ns() - state.last_progress_ns > stall_ns:
            state.stalled = True
            if progress:
                progress(
                    f"{label}no progress for {stall_timeout_s:g} s with {state.inflight} "
                    "in flight: aborting the level (hung)"
                )
            for task in state.tasks:
                task.cancel()
            return
        if progress and now - last_report >= PROGRESS_EVERY_S:
            # SSE events of finished requests: about one per token for most servers.
            rate = (state.events - last_events) / (now - last_report)
            progress(
                f"{label}{state.done}/{state.total} done, {state.inflight} in flight, "
                f"{state.errors} errors, {rate:.0f} events/s"
            )
            last_report, last_events = now, state.events


def raise_open_file_limit() -> None:
    """Soft open-file limit up to the hard one: 1,024 streams need more than 1,024 fds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (hard, 1 << 20, 65536):
        if target != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft >= target:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            continue


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


# ---- records --------------------------------------------------------------------------------


def _token_counts(tokenizer, texts: list[str]) -> list[int]:
    encode = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
    counts: list[int] = []
    for i in range(0, len(texts), 8192):
        counts.extend(len(e.ids) for e in encode(texts[i : i + 8192], add_special_tokens=False))
    return counts


def build_records(raws: list[dict], tokenizer, t0_ns: int) -> list[dict]:
    """Request records (docs/records.md) from raw results, sorted by index."""
    raws = sorted(raws, key=lambda r: r["index"])
    for raw in raws:
        if "reads" in raw:  # deferred, or cut off by a stall
            if raw["error"] is None:
                _parse(raw)
            else:
                del raw["reads"]
    good = [r for r in raws if r["error"] is None]
    retok_chunks: list[list[int] | None] = [None] * len(good)
    retok_total: list[int | None] = [None] * len(good)
    if tokenizer is not None and good:
        texts = [t for r in good for t in r["stream"].texts]
        texts += ["".join(r["stream"].texts) for r in good]
        counts = _token_counts(tokenizer, texts)
        at = 0
        for i, r in enumerate(good):
            n = len(r["stream"].texts)
            retok_chunks[i] = counts[at : at + n]
            at += n
        retok_total = counts[at:]
    retok = {id(r): (c, t) for r, c, t in zip(good, retok_chunks, retok_total, strict=True)}

    records = []
    for raw in raws:
        prompt: Prompt = raw["prompt"]
        rec = {
            "index": raw["index"],
            "warmup": raw["warmup"],
            "ok": raw["error"] is None,
            "error": raw["error"],
            "status_code": raw["status_code"],
            "prompt_tokens": prompt.input_tokens,
            "output_tokens": None,
            "retokenized_tokens": None,
            "usage_reported": False,
            "sent_s": round((raw["sent_ns"] - t0_ns) / 1e9, 6),
            "end_s": round((raw["end_ns"] - t0_ns) / 1e9, 6),
            "ttft_ms": None,
            "e2el_ms": None,
            "tpot_ms": None,
            "chunk_times_ms": [],
            "chunk_tokens": [],
        }
        if raw["error"] is not None:
            rec["error_detail"] = raw.get("detail")
            records.append(rec)
            continue
        s: Stream = raw["stream"]
        chunks, total = retok[id(raw)]
        if s.prompt_tokens is not None:
            rec["prompt_tokens"] = s.prompt_tokens
        rec["usage_reported"] = s.completion_tokens is not None
        rec["retokenized_tokens"] = total
        if s.completion_tokens is not None:
            out = s.completion_tokens
        else:
            out = total if total is not None else len(s.chunk_ns)
        rec["output_tokens"] = out
        per_chunk = metrics.tokens_per_chunk(s.usage_cumulative, chunks, out)
        rec.update(
            metrics.request_metrics(raw["sent_ns"], raw["end_ns"], s.chunk_ns, per_chunk, out)
        )
        records.append(rec)
    return records


# ---- entry points ---------------------------------------------------------------------------


async def _level(settings, jobs, concurrency, warmup, state, progress, label) -> list[dict]:
    sink: list[dict] = []
    async with make_session(settings) as session:
        monitor = asyncio.create_task(_monitor(state, settings.stall_timeout_s, progress, label))
        try:
            if warmup:
                await run_requests(
                    session, settings, jobs[:warmup], min(concurrency, warmup), state, sink
                )
                if progress and not state.stalled:
                    progress(f"{label}warmup done ({warmup} requests)")
            if not state.stalled:
                await run_requests(session, settings, jobs[warmup:], concurrency, state, sink)
        finally:
            monitor.cancel()
    return sink


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
    raise_open_file_limit()
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    jobs = [(i, i < warmup, p) for i, p in enumerate(prompts)]
    state = _State(len(prompts))
    label = f"L{level} r{repeat}: "
    # No garbage collection while requests are timed: its pauses delay every timestamp, and
    # a level makes almost no cyclic garbage (~2 objects per request, measured).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    cpu0 = time.process_time()
    t0_ns = time.perf_counter_ns()
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            raws = runner.run(_level(settings, jobs, concurrency, warmup, state, progress, label))
    finally:
        cpu_s = time.process_time() - cpu0
        wall_s = (time.perf_counter_ns() - t0_ns) / 1e9
        if gc_was_enabled:
            gc.enable()

    records = build_records(raws, settings.tokenizer, t0_ns)
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
        num_prompts=len(prompts) - warmup,
        stalled=state.stalled,
        error_rate_threshold=error_rate_threshold,
        client_cpu_s=cpu_s,
        client_wall_s=wall_s,
        client_max_loop_lag_ms=state.max_lag_s * 1e3,
        started_at=started_at,
        clock_origin_ns=t0_ns,
    )
    if progress:
        progress(
            f"{label}{summary['status']}: {summary['completed']} ok, {summary['failed']} failed, "
            f"{summary['output_throughput'] or 0:.0f} output tok/s, "
            f"achieved concurrency {summary['achieved_concurrency'] or 0:.1f}"
        )
    return summary


async def generate_once(settings: ClientSettings, prompt_text: str, max_tokens: int) -> int:
    """One real streamed generation; returns its output tokens. Raises RuntimeError when the
    server does not deliver one (used for readiness)."""
    state = _State(1)
    raw = {"index": 0, "warmup": True, "prompt": Prompt(prompt_text, 0, max_tokens)}
    payload = json.dumps(request_body(settings, prompt_text, max_tokens)).encode()
    async with make_session(settings) as session:
        await _send(session, endpoint_url(settings), payload, raw, state)
    _finish(raw, state)
    if "reads" in raw:
        _parse(raw)
    if raw["error"]:
        detail = f": {raw['detail']}" if raw.get("detail") else ""
        raise RuntimeError(f"generation failed: {raw['error']}{detail}")
    s: Stream = raw["stream"]
    if s.completion_tokens is not None:
        return s.completion_tokens
    if settings.tokenizer is not None:
        return _token_counts(settings.tokenizer, ["".join(s.texts)])[0]
    return len(s.chunk_ns)
