"""What the client's coordinator and its worker processes say to each other.

Length-prefixed pickles over the worker's stdin and stdout. Every message and row is a
NamedTuple defined here, so both sides name the same fields and the pickles stay small and
standard-library only.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import NamedTuple


class WorkerConfig(NamedTuple):
    """A worker's share of one level (sent once, in Setup)."""

    url: str  # the endpoint every request goes to
    timeout_s: float  # one request, send -> last byte
    jobs_path: str  # the level's request bodies, one after another
    counter_path: str  # the next job number of each phase, shared by all workers
    offsets: list[int]  # where each body starts in jobs_path (and where the last ends)
    phase_end: list[int]  # job numbers end here: [warmup, all]
    slots: list[int]  # this worker's concurrent streams in each phase
    workers: int  # how many workers share the level
    defer_budget_bytes: int  # raw stream bytes kept for parsing after the level
    packed_budget_bytes: int  # then compressed stream bytes
    # Rate levels only: when each measured job is due, ns after the measured phase starts
    # (servesweep.bench.arrivals), and at most this many in flight (0: no cap). None: a concurrency
    # level, whose slots send the next request as soon as one ends.
    schedule_ns: list[int] | None = None
    cap: int = 0
    # A rate level's warm-up, likewise (None: its warm-up runs closed loop on the slots).
    warmup_schedule_ns: list[int] | None = None


# Coordinator -> worker
class Setup(NamedTuple):
    config: WorkerConfig


class Go(NamedTuple):
    phase: int  # 0 warmup, 1 measured


class Abort(NamedTuple):
    """End every request in flight as stalled; send no more."""


# Worker -> coordinator
class Ready(NamedTuple):
    at_ns: int


class Status(NamedTuple):
    inflight: int
    finished: int
    errors: int
    events: int  # SSE events of finished requests
    last_progress_ns: int  # the last time any of its streams received bytes
    last_end_ns: int = 0  # when its last finished request ended (perf_counter_ns; 0: none yet)


class PhaseDone(NamedTuple):
    phase: int


class StreamRow(NamedTuple):
    """What a finished response stream carried (parsed after the level)."""

    chunk_ns: list[int]  # arrival of each content chunk
    texts: list[str]  # its text
    usage_cumulative: list[int | None]  # usage.completion_tokens on that chunk, if any
    prompt_tokens: int | None
    completion_tokens: int | None


class ResultRow(NamedTuple):
    """One request as the worker saw it."""

    # mypy objects to a field that shadows tuple.index; the name stays.
    index: int  # type: ignore[assignment]
    status: int | None  # HTTP status
    error: str | None  # request error kind (docs/metrics.md), None when it streamed text
    detail: str | None
    sent_ns: int
    end_ns: int
    stream: StreamRow | None  # None for a failed request


class WorkerStats(NamedTuple):
    cpu_s: float
    wall_s: float
    max_lag_ms: float


class Result(NamedTuple):
    rows: list[ResultRow]
    stats: WorkerStats
    # Rate levels: the perf_counter_ns the schedule counts from, and the jobs that found
    # the concurrency cap full when they were due (sent when a request ended).
    schedule_origin_ns: int | None = None
    held: tuple[int, ...] = ()


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
