"""Benchmark client worker: one process, one event loop, its share of a level's streams.

`servesweep.client.run_level` starts one or more of these (`python client_worker.py`, run as
a file so the child imports nothing but the standard library, plus uvloop where installed)
and talks to each over its stdin/stdout with length-prefixed pickles. The workers share the
level's requests through a counter in a small file (taken under flock), so a slot that frees
up in any worker sends the next request at once; together they keep `level` in flight.

The timing path is a bare HTTP/1.1 client on asyncio.Protocol: `data_received` stamps
perf_counter_ns as the event loop hands it the bytes and appends (stamp, bytes); nothing is
decoded while requests are in flight, except a response's status line and headers. A
response ends at its chunked terminator, its Content-Length or the connection's close.
After the level the bodies are de-chunked and parsed as SSE, each event stamped with the
read that completed it (raw bytes are kept while a memory budget lasts, then compressed
while a second one lasts; past both, a body is parsed as its request ends).
perf_counter_ns is CLOCK_MONOTONIC on Linux, so stamps from all workers share one clock.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import json
import mmap
import os
import pickle
import ssl
import struct
import time
import zlib
from array import array
from dataclasses import dataclass, field
from itertools import accumulate
from urllib.parse import urlsplit

_now = time.perf_counter_ns
TICK_S = 0.01  # loop-lag ticker period
STATUS_EVERY_S = 0.1  # how often a worker tells the parent where it stands
_json_decode = json.JSONDecoder().decode  # skips json.loads' per-call encoding sniffing
_SSE_FIELDS = (b"event:", b"id:", b"retry:")
_HEAD_END = b"\r\n\r\n"
_CHUNKED_END = b"\r\n0\r\n\r\n"  # last chunk; servers send no trailers on SSE streams


# ---- framing between parent and worker ----------------------------------------------------


def send_msg(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


class MsgReader:
    """Splits a byte stream into messages."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data: bytes) -> list:
        self.buf += data
        out = []
        while len(self.buf) >= 8:
            (n,) = struct.unpack_from("<Q", self.buf)
            if len(self.buf) < 8 + n:
                break
            out.append(pickle.loads(bytes(self.buf[8 : 8 + n])))
            del self.buf[: 8 + n]
        return out


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


def dechunk(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """HTTP chunked body -> the payload bytes each read delivered, keeping its stamp."""
    raw = b"".join(d for _, d in reads)
    read_ends = list(accumulate(len(d) for _, d in reads))
    pieces: list[bytes] = []
    decoded_ends: list[int] = []  # per read: decoded bytes up to its end
    got = pos = k = 0
    find = raw.find
    while True:
        eol = find(b"\n", pos)
        if eol < 0:
            raise BadStream("chunked body ended before its last chunk")
        try:
            size = int(raw[pos:eol].split(b";")[0], 16)
        except ValueError as exc:
            raise BadStream(f"bad chunk size line: {raw[pos:eol][:40]!r}") from exc
        if size == 0:
            break
        a, b = eol + 1, eol + 1 + size
        if b > len(raw):
            raise BadStream("chunked body ended inside a chunk")
        while k < len(read_ends) and read_ends[k] <= b:
            decoded_ends.append(got + max(0, read_ends[k] - a))
            k += 1
        pieces.append(raw[a:b])
        got += size
        pos = b + 2
    decoded_ends += [got] * (len(read_ends) - k)
    body = b"".join(pieces)
    out, prev = [], 0
    for (t, _), e in zip(reads, decoded_ends, strict=True):
        if e > prev:
            out.append((t, body[prev:e]))
            prev = e
    return out


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
    delta = choice.get("delta")
    if not delta:
        return text
    # Some servers send the same reasoning under both names: take one.
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str):
        text += reasoning
    content = delta.get("content")
    if isinstance(content, str):
        text += content
    return text


def _decode_all(datas: list[bytes]) -> list:
    """JSON-decode every event's data. One decode of them all as an array is several times
    faster than one per event; a fault is looked for one by one."""
    try:
        objs = _json_decode((b"[" + b",".join(datas) + b"]").decode())
        if len(objs) == len(datas):
            return objs
    except ValueError:
        pass
    objs = []
    for data in datas:
        try:
            objs.append(_json_decode(data.decode()))
        except ValueError as exc:
            raise BadStream(f"not JSON: {data[:80]!r}") from exc
    return objs


def parse_stream(reads: list[tuple[int, bytes]]) -> Stream:
    """Content chunks, usage and end of an OpenAI-style completion stream (decoded body)."""
    s = Stream()
    try:
        stamps, datas = [], []
        for t, block in sse_events(reads):
            if block.startswith(b"data: ") and b"\n" not in block:  # the usual one-line event
                data = block[6:]
            else:
                data = _event_data(block)
            if data is None:
                continue
            if data.strip() == b"[DONE]":
                s.finished = True
                continue
            stamps.append(t)
            datas.append(data)
        for t, obj in zip(stamps, _decode_all(datas), strict=True):
            if not isinstance(obj, dict):
                raise BadStream(f"not a JSON object: {str(obj)[:80]!r}")
            if obj.get("error"):
                s.error, s.detail = "stream_error", str(obj["error"])[:300]
                return s
            usage = obj.get("usage")
            if isinstance(usage, dict):
                s.prompt_tokens = usage.get("prompt_tokens", s.prompt_tokens)
                s.completion_tokens = usage.get("completion_tokens", s.completion_tokens)
            choices = obj.get("choices")
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
    except (BadStream, AttributeError, TypeError, KeyError, IndexError) as exc:
        s.error, s.detail = "bad_stream", str(exc)[:300]
    return s


# ---- HTTP/1.1 on asyncio.Protocol ----------------------------------------------------------

_HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE = range(4)


class Request:
    """One request's timeline and raw response. `reads` holds the body only."""

    __slots__ = (
        "index",
        "data",
        "sent_ns",
        "end_ns",
        "deadline",
        "status",
        "error",
        "detail",
        "reads",
        "mode",
        "left",
        "tail",
        "head",
        "keep_alive",
        "on_end",
        "conn",
        "timer",
        "ended",
        "retried",
        "packed",
        "stream",
    )

    def __init__(self, index: int, data: bytes, on_end):
        self.index = index
        self.data = data  # the whole HTTP request
        self.sent_ns = self.end_ns = 0
        self.deadline = 0.0  # loop time
        self.status = None  # HTTP status code
        self.error = self.detail = None
        self.reads: list[tuple[int, bytes]] = []
        self.mode = _HEAD
        self.left = 0  # Content-Length bytes still to come
        self.tail = b""  # last bytes seen, to spot the chunked terminator across reads
        self.head = b""
        self.keep_alive = True
        self.on_end = on_end  # called once, when the response ended or failed
        self.conn: Connection | None = None
        self.timer = None
        self.ended = False
        self.retried = False
        self.packed = None  # (stamps, lengths, zlib of the bytes) instead of reads
        self.stream: Stream | None = None

    def end(self, error: str | None = None, detail: str | None = None, t: int = 0) -> None:
        if self.ended:
            return
        self.ended = True
        if error is not None:
            self.error, self.detail = error, detail
        self.end_ns = t or _now()
        if self.timer is not None:
            self.timer.cancel()
        self.on_end(self)


class Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    def __init__(self, owner):
        self.owner = owner  # has .last_progress_ns
        self.transport = None
        self.req: Request | None = None
        self.closed = False
        self.used = False  # answered a request before: may have gone stale while idle

    def connection_made(self, transport):
        self.transport = transport

    def send(self, r: Request) -> None:
        self.req = r
        self.transport.write(r.data)

    def data_received(self, data: bytes):
        t = _now()
        r = self.req
        if r is None:  # bytes nobody asked for: this connection is out of step
            self.closed = True
            self.transport.close()
            return
        self.owner.last_progress_ns = t
        if r.mode == _HEAD:
            self._head(r, t, data)
        else:
            self._body(r, t, data)

    def _body(self, r: Request, t: int, data: bytes) -> None:
        r.reads.append((t, data))
        if r.mode == _CHUNKED:
            tail = r.tail + data[-7:]
            if tail.endswith(_CHUNKED_END):
                self._done(r, t)
            else:
                r.tail = tail[-7:]
        elif r.mode == _LENGTH:
            r.left -= len(data)
            if r.left <= 0:
                self._done(r, t)

    def _head(self, r: Request, t: int, data: bytes) -> None:
        r.head += data
        end = r.head.find(_HEAD_END)
        if end < 0:
            if len(r.head) > 65536:
                self.fail(r, "bad_stream", "response head over 64 KiB")
            return
        lines = r.head[:end].decode("latin-1").split("\r\n")
        rest = r.head[end + 4 :]
        try:
            version, code = lines[0].split(" ", 2)[:2]
            status = int(code)
        except ValueError:
            self.fail(r, "bad_stream", f"not an HTTP response: {lines[0][:80]!r}")
            return
        if 100 <= status < 200:  # 100 Continue and friends: the real head follows
            r.head = b""
            if rest:
                self._head(r, t, rest)
            return
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        r.status = status
        r.head = b""
        connection = headers.get("connection", "")
        r.keep_alive = "close" not in connection and (
            version != "HTTP/1.0" or "keep-alive" in connection
        )
        if "chunked" in headers.get("transfer-encoding", ""):
            r.mode = _CHUNKED
            r.tail = b"\r\n"  # the head's own CRLF: an empty body is just "0\r\n\r\n"
        elif "content-length" in headers:
            try:
                r.mode, r.left = _LENGTH, int(headers["content-length"])
            except ValueError:
                self.fail(r, "bad_stream", "bad Content-Length")
                return
        else:
            r.mode, r.keep_alive = _UNTIL_CLOSE, False
        if r.mode == _LENGTH and r.left <= 0:
            self._done(r, t)
        elif rest:
            self._body(r, t, rest)

    def _done(self, r: Request, t: int) -> None:
        self.req = None
        self.used = True
        if not r.keep_alive:
            self.closed = True
            self.transport.close()
        r.end(t=t)

    def fail(self, r: Request, error: str, detail: str | None = None) -> None:
        if self.req is not r:  # it ended in this same loop iteration
            return
        self.req = None
        self.closed = True
        self.transport.close()
        r.end(error, detail)

    def timeout(self, r: Request) -> None:
        self.fail(r, "timeout")

    def connection_lost(self, exc):
        self.closed = True
        r = self.req
        if r is None:
            return
        t = _now()
        self.owner.last_progress_ns = t
        self.req = None
        if r.mode == _UNTIL_CLOSE:
            r.end(t=r.reads[-1][0] if r.reads else t)
        elif r.mode == _HEAD and not r.head and self.used and not r.retried:
            r.end("retry")  # a kept-alive connection the server had closed
        else:
            r.end("disconnect", str(exc)[:300] if exc else "connection closed early")


@dataclass
class Target:
    host: str
    port: int
    path: str
    ssl: bool

    @classmethod
    def from_url(cls, url: str) -> Target:
        u = urlsplit(url)
        tls = u.scheme == "https"
        return cls(u.hostname or "127.0.0.1", u.port or (443 if tls else 80), u.path, tls)

    def head(self) -> bytes:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return (
            f"POST {self.path} HTTP/1.1\r\nHost: {host}:{self.port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            "Content-Length: "
        ).encode()


class Client:
    """Opens connections to one target and sends requests on them."""

    def __init__(self, target: Target, timeout_s: float):
        self.target = target
        self.timeout_s = timeout_s
        self.head = target.head()
        self.ssl = ssl.create_default_context() if target.ssl else None
        self.loop = asyncio.get_running_loop()
        self.last_progress_ns = _now()
        self.idle: list[Connection] = []  # open connections no slot holds
        self.connecting: set[asyncio.Task] = set()  # the loop keeps tasks only weakly

    def request(self, index: int, payload: bytes, on_end) -> Request:
        return Request(index, self.head + b"%d\r\n\r\n" % len(payload) + payload, on_end)

    def send(self, r: Request, conn: Connection | None) -> None:
        """Stamp and send r now on conn, or on a new connection when conn is not usable.
        r.on_end is called when it ends."""
        r.sent_ns = _now()
        r.deadline = self.loop.time() + self.timeout_s
        if conn is None or conn.closed:
            self._connect_later(r)
        else:
            self._send(r, conn)

    def _connect_later(self, r: Request) -> None:
        task = self.loop.create_task(self._connect_and_send(r))
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)

    def _send(self, r: Request, conn: Connection) -> None:
        r.conn = conn
        r.timer = self.loop.call_at(r.deadline, conn.timeout, r)
        conn.send(r)

    async def _connect_and_send(self, r: Request) -> None:
        conn = Connection(self)
        try:
            await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: conn, self.target.host, self.target.port, ssl=self.ssl
                ),
                max(0.0, r.deadline - self.loop.time()),
            )
        except TimeoutError:
            r.end("timeout")
            return
        except OSError as exc:
            r.end("connect", str(exc)[:300])
            return
        except Exception as exc:  # noqa: BLE001 - e.g. a bad host name: the request failed
            r.end("client_error", f"{type(exc).__name__}: {exc}"[:300])
            return
        if r.ended:  # aborted while connecting
            conn.transport.close()
            return
        self._send(r, conn)

    def resend(self, r: Request) -> None:
        """Once more on a fresh connection, keeping its sent stamp and deadline."""
        r.ended, r.error, r.retried = False, None, True
        self._connect_later(r)

    def close(self) -> None:
        for conn in self.idle:
            conn.transport.close()
        self.idle = []


def pack(r: Request) -> int:
    """Keep a finished request's reads compressed (~26x for SSE, and ~7x cheaper than
    parsing them); returns the bytes kept."""
    stamps = array("q", [t for t, _ in r.reads])
    lengths = array("q", [len(d) for _, d in r.reads])
    r.packed = (stamps, lengths, zlib.compress(b"".join(d for _, d in r.reads), 1))
    r.reads = []
    return len(r.packed[2]) + 16 * len(stamps)


def unpack(r: Request) -> None:
    stamps, lengths, blob = r.packed
    data, at, r.reads = zlib.decompress(blob), 0, []
    for t, n in zip(stamps, lengths, strict=True):
        r.reads.append((t, data[at : at + n]))
        at += n
    r.packed = None


def finish(r: Request) -> None:
    """Decode and parse a finished request's body; stream faults become its error."""
    if r.packed is not None:
        unpack(r)
    reads, r.reads = r.reads, []
    if r.error is not None:
        return
    try:
        body = dechunk(reads) if r.mode == _CHUNKED else reads
    except BadStream as exc:
        r.error, r.detail = "bad_stream", str(exc)[:300]
        return
    if r.status != 200:
        r.error = f"http_{r.status}"
        r.detail = b"".join(d for _, d in body)[:300].decode(errors="replace")
        return
    s = parse_stream(body) if body else Stream()
    r.stream = s
    if s.error:
        r.error, r.detail = s.error, s.detail
    elif not s.chunk_ns:
        # A stream that finished properly but said nothing vs one that just ended.
        r.error = "empty" if s.finished else "disconnect"


def result_row(r: Request) -> tuple:
    s = r.stream if r.error is None else None
    stream = None
    if s is not None:
        stream = (s.chunk_ns, s.texts, s.usage_cumulative, s.prompt_tokens, s.completion_tokens)
    return (r.index, r.status, r.error, r.detail, r.sent_ns, r.end_ns, stream)


async def fetch(url: str, payload: bytes, timeout_s: float) -> Request:
    """One request on a fresh connection (readiness checks), parsed."""
    client = Client(Target.from_url(url), timeout_s)
    done = client.loop.create_future()
    r = client.request(0, payload, lambda r: done.done() or done.set_result(None))
    client.send(r, None)
    await done
    finish(r)
    return r


# ---- the worker process --------------------------------------------------------------------


class Slot:
    """One of the level's concurrent streams: the moment its request ends it sends the next
    one on the same connection, from the protocol callback itself, so a slot is never idle
    waiting for the event loop to come round to it."""

    def __init__(self, worker: Worker, phase: int, conn: Connection | None):
        self.worker = worker
        self.phase = phase
        self.conn = conn
        self.req: Request | None = None

    def next(self) -> None:
        w = self.worker
        index = None if w.aborted else w.claim(self.phase)
        if index is None:
            self.req = None
            w.slot_done(self)
            return
        payload = w.payloads[w.offsets[index] : w.offsets[index + 1]]
        r = self.req = w.client.request(index, payload, self.ended)
        w.inflight += 1
        w.client.send(r, self.conn)

    def ended(self, r: Request) -> None:
        w = self.worker
        if r.error == "retry":
            self.conn = None
            w.client.resend(r)
            return
        r.data = b""  # sent for good: its bytes are not needed again
        w.inflight -= 1
        w.client.last_progress_ns = r.end_ns
        conn = r.conn
        self.conn = conn if conn is not None and not conn.closed else None
        self.next()  # send the next request first, then book this one
        w.book(r)


class Worker:
    """Runs the phases (warmup, measured) of one level in this process."""

    def __init__(self, cfg: dict, out: int):
        self.cfg = cfg
        self.out = out  # messages to the parent
        self.jobs = open(cfg["jobs_path"], "rb")
        self.payloads = mmap.mmap(self.jobs.fileno(), 0, access=mmap.ACCESS_READ)
        self.offsets = cfg["offsets"]
        self.lock = open(cfg["counter_path"], "r+b")
        self.counter = mmap.mmap(self.lock.fileno(), 16)
        self.shared = cfg["workers"] > 1
        self.budget = cfg["defer_budget_bytes"]
        self.packed_budget = cfg["packed_budget_bytes"]
        self.kept = self.packed = 0
        self.done: list[Request] = []
        self.inflight = self.finished = self.errors = self.events = 0
        self.max_lag_s = 0.0
        self.aborted = False
        self.slots: set[Slot] = set()
        self.phase_over = None

    def claim(self, phase: int) -> int | None:
        """Next job of the phase, shared with the other workers."""
        end = self.cfg["phase_end"][phase]
        if self.shared:
            fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            (i,) = struct.unpack_from("<q", self.counter, 8 * phase)
            if i >= end:
                return None
            struct.pack_into("<q", self.counter, 8 * phase, i + 1)
            return i
        finally:
            if self.shared:
                fcntl.flock(self.lock, fcntl.LOCK_UN)

    def slot_done(self, slot: Slot) -> None:
        self.slots.discard(slot)
        if slot.conn is not None and not slot.conn.closed:
            self.client.idle.append(slot.conn)  # the next phase's slots reuse it
        if not self.slots and not self.phase_over.done():
            self.phase_over.set_result(None)

    def book(self, r: Request) -> None:
        self.finished += 1
        self.done.append(r)
        if r.error is not None:
            self.errors += 1
            r.reads = []
            return
        self.events += sum(d.count(b"\n\n") for _, d in r.reads)
        # Raw bytes are parsed after the level while the budget lasts; then compressed,
        # while a second budget lasts; past both, parsed now, at a cost to capacity.
        if self.kept < self.budget:
            self.kept += sum(len(d) for _, d in r.reads) + 100 * len(r.reads)
        elif self.packed < self.packed_budget:
            self.packed += pack(r)
        else:
            finish(r)

    def abort(self) -> None:
        """End every request in flight as stalled; no slot sends again."""
        self.aborted = True
        for slot in list(self.slots):
            r = slot.req
            if r is not None and not r.ended:
                conn = slot.conn
                if conn is not None and conn.req is r:
                    conn.fail(r, "stalled")
                else:
                    r.end("stalled")

    async def ticker(self) -> None:
        """Event-loop lag, and a status line for the parent every STATUS_EVERY_S."""
        next_status = 0.0
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            self.max_lag_s = max(self.max_lag_s, now - before - TICK_S)
            if now >= next_status:
                self.status()
                next_status = now + STATUS_EVERY_S

    def status(self) -> None:
        send_msg(
            self.out,
            (
                "status",
                self.inflight,
                self.finished,
                self.errors,
                self.events,
                self.client.last_progress_ns,
            ),
        )

    async def run_phase(self, phase: int) -> None:
        loop = asyncio.get_running_loop()
        self.phase_over = loop.create_future()
        idle = self.client.idle
        self.slots = {
            Slot(self, phase, idle.pop() if idle else None) for _ in range(self.cfg["slots"][phase])
        }
        if not self.slots:
            return
        for slot in list(self.slots):
            slot.next()
        await self.phase_over

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.client = Client(Target.from_url(self.cfg["url"]), self.cfg["timeout_s"])
        reader = MsgReader()
        inbox: asyncio.Queue = asyncio.Queue()

        def on_stdin() -> None:
            data = os.read(0, 65536)
            if not data:  # parent gone
                loop.remove_reader(0)
                self.abort()
                inbox.put_nowait(("abort",))
                return
            for msg in reader.feed(data):
                if msg[0] == "abort":
                    self.abort()
                inbox.put_nowait(msg)

        os.set_blocking(0, False)
        loop.add_reader(0, on_stdin)
        send_msg(self.out, ("ready", _now()))
        ticker = None
        cpu0 = wall0 = 0
        for phase in (0, 1):
            msg = await inbox.get()
            if msg[0] != "go":
                break
            self.client.last_progress_ns = _now()
            if ticker is None:
                ticker = asyncio.create_task(self.ticker())
                cpu0, wall0 = time.process_time(), time.perf_counter()
            await self.run_phase(phase)
            self.status()
            send_msg(self.out, ("phase_done", phase))
            if self.aborted:
                break
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        if ticker is not None:
            ticker.cancel()
        self.client.close()
        loop.remove_reader(0)
        for r in self.done:
            if r.stream is None:
                finish(r)
        rows = [result_row(r) for r in self.done]
        stats = {"cpu_s": cpu_s, "wall_s": wall_s, "max_lag_ms": self.max_lag_s * 1e3}
        send_msg(self.out, ("result", rows, stats))


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main() -> None:
    reader = MsgReader()
    msgs: list = []
    while not msgs:
        data = os.read(0, 1 << 20)
        if not data:
            return
        msgs = reader.feed(data)
    if len(msgs) != 1:
        raise RuntimeError("expected one setup message before the level starts")
    cfg = msgs[0][1]
    out = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, not into the messages
    # No garbage collection while requests are timed: its pauses delay every timestamp,
    # and a level makes almost no cyclic garbage.
    gc.disable()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(Worker(cfg, out).run())


if __name__ == "__main__":
    main()
