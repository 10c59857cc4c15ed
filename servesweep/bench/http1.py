"""A bare HTTP/1.1 client on asyncio.Protocol: the timing path of the benchmark client.

`Connection.data_received` stamps `perf_counter_ns` as the event loop hands it the bytes and
appends (stamp, bytes); nothing is decoded while requests are in flight, except a response's
status line and headers. A response ends at its chunked terminator, its Content-Length or the
connection's close. `parse_response` decodes a finished one (off the timing path).
Standard library only (it runs in the client's worker processes).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from array import array
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from servesweep.bench.messages import ResultRow, StreamRow
from servesweep.bench.sse import BadStream, Stream, dechunk, parse_stream

_now = time.perf_counter_ns
_HEAD_END = b"\r\n\r\n"
_CHUNKED_END = b"\r\n0\r\n\r\n"  # last chunk; servers send no trailers on SSE streams

# How the rest of a response is framed, once its head is read.
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
        self.status: int | None = None  # HTTP status code
        self.error: str | None = None
        self.detail: str | None = None
        self.reads: list[tuple[int, bytes]] = []
        self.mode = _HEAD
        self.left = 0  # Content-Length bytes still to come
        self.tail = b""  # last bytes seen, to spot the chunked terminator across reads
        self.head = b""
        self.keep_alive = True
        self.on_end = on_end  # called once, when the response ended or failed
        self.conn: Connection | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.ended = False
        self.retried = False
        # (stamps, lengths, zlib of the bytes) instead of reads
        self.packed: tuple[array[int], array[int], bytes] | None = None
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
        self.transport: Any = None  # the asyncio transport, once connection_made ran
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
    stamps, lengths, blob = cast("tuple[array[int], array[int], bytes]", r.packed)  # packed
    data, at, r.reads = zlib.decompress(blob), 0, []
    for t, n in zip(stamps, lengths, strict=True):
        r.reads.append((t, data[at : at + n]))
        at += n
    r.packed = None


def parse_response(r: Request) -> None:
    """Decode and parse a finished request's body into r.stream; stream faults become its
    error."""
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


def result_row(r: Request) -> ResultRow:
    s = r.stream if r.error is None else None
    stream = None
    if s is not None:
        stream = StreamRow(
            s.chunk_ns, s.texts, s.usage_cumulative, s.prompt_tokens, s.completion_tokens
        )
    return ResultRow(r.index, r.status, r.error, r.detail, r.sent_ns, r.end_ns, stream)


async def fetch(url: str, payload: bytes, timeout_s: float) -> Request:
    """One request on a fresh connection (readiness checks), parsed."""
    client = Client(Target.from_url(url), timeout_s)
    done = client.loop.create_future()

    def ended(_: Request) -> None:
        if not done.done():
            done.set_result(None)

    r = client.request(0, payload, ended)
    client.send(r, None)
    await done
    parse_response(r)
    return r
