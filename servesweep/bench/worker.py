"""Benchmark client worker: one process, one event loop, its share of a level's streams.

`servesweep.bench.client.run_level` starts one or more of these
(`python -m servesweep.bench.worker`; standard library only, plus uvloop where installed) and
talks to each over its stdin/stdout (`servesweep.bench.messages`). The workers share the
level's requests through a counter in a small file (taken under flock), so a slot that frees
up in any worker sends the next request at once; together they keep `level` in flight.

Requests are timed by `servesweep.bench.http1`; their bodies are parsed after the level
while a memory budget lasts (raw bytes kept, then compressed while a second one lasts; past
both, a body is parsed as its request ends). perf_counter_ns is CLOCK_MONOTONIC on Linux, so
stamps from all workers share one clock.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import mmap
import os
import struct
import time
from typing import cast

from servesweep.bench.http1 import (
    Client,
    Connection,
    Request,
    Target,
    pack,
    parse_response,
    result_row,
)
from servesweep.bench.messages import (
    Abort,
    Go,
    MsgReader,
    PhaseDone,
    Ready,
    Result,
    Setup,
    Status,
    WorkerConfig,
    WorkerStats,
    send_msg,
)
from servesweep.bench.rate_phase import RatePhase

_now = time.perf_counter_ns
TICK_S = 0.01  # loop-lag ticker period
STATUS_EVERY_S = 0.1  # how often a worker tells the parent where it stands


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

    def __init__(self, cfg: WorkerConfig, out: int):
        self.cfg = cfg
        self.out = out  # messages to the parent
        self.jobs = open(cfg.jobs_path, "rb")  # noqa: SIM115 - lives as long as the process
        self.payloads = mmap.mmap(self.jobs.fileno(), 0, access=mmap.ACCESS_READ)
        self.offsets = cfg.offsets
        self.lock = open(cfg.counter_path, "r+b")  # noqa: SIM115 - likewise
        self.counter = mmap.mmap(self.lock.fileno(), 16)
        self.shared = cfg.workers > 1
        self.budget = cfg.defer_budget_bytes
        self.packed_budget = cfg.packed_budget_bytes
        self.kept = self.packed = 0
        self.done: list[Request] = []
        self.inflight = self.finished = self.errors = self.events = 0
        self.last_end_ns = 0  # the last finished request's end: a batch's exact boundary
        self.max_lag_s = 0.0
        self.aborted = False
        self.slots: set[Slot] = set()
        self.phase_over: asyncio.Future[None] | None = None  # set while a phase runs
        self.rate: RatePhase | None = None  # the measured phase of a rate level

    def claim(self, phase: int) -> int | None:
        """Next job of the phase, shared with the other workers."""
        end = self.cfg.phase_end[phase]
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
        over = cast("asyncio.Future[None]", self.phase_over)  # a slot ends inside a phase
        if not self.slots and not over.done():
            over.set_result(None)

    def book(self, r: Request) -> None:
        self.finished += 1
        self.last_end_ns = max(self.last_end_ns, r.end_ns)
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
            parse_response(r)

    def abort(self) -> None:
        """End every request in flight as stalled; no slot sends again."""
        self.aborted = True
        if self.rate is not None:
            self.rate.abort()
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
            Status(
                self.inflight,
                self.finished,
                self.errors,
                self.events,
                self.client.last_progress_ns,
                self.last_end_ns,
            ),
        )

    async def run_phase(self, phase: int) -> None:
        if phase == 0 and self.cfg.warmup_schedule_ns is not None:
            await RatePhase(self, self.cfg.warmup_schedule_ns, self.cfg.cap, phase=0).run()
            return
        if phase == 1 and self.cfg.schedule_ns is not None:
            self.rate = RatePhase(self, self.cfg.schedule_ns, self.cfg.cap)
            await self.rate.run()
            return
        loop = asyncio.get_running_loop()
        self.phase_over = loop.create_future()
        idle = self.client.idle
        self.slots = {
            Slot(self, phase, idle.pop() if idle else None) for _ in range(self.cfg.slots[phase])
        }
        if not self.slots:
            return
        for slot in list(self.slots):
            slot.next()
        await self.phase_over

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.client = Client(Target.from_url(self.cfg.url), self.cfg.timeout_s)
        reader = MsgReader()
        inbox: asyncio.Queue = asyncio.Queue()

        def on_stdin() -> None:
            data = os.read(0, 65536)
            if not data:  # parent gone
                loop.remove_reader(0)
                self.abort()
                inbox.put_nowait(Abort())
                return
            for msg in reader.feed(data):
                if isinstance(msg, Abort):
                    self.abort()
                inbox.put_nowait(msg)

        os.set_blocking(0, False)
        loop.add_reader(0, on_stdin)
        send_msg(self.out, Ready(_now()))
        ticker = None
        cpu0: float = 0
        wall0: float = 0
        for phase in (0, 1):
            msg = await inbox.get()
            if not isinstance(msg, Go):
                break
            self.client.last_progress_ns = _now()
            if ticker is None:
                ticker = asyncio.create_task(self.ticker())
                cpu0, wall0 = time.process_time(), time.perf_counter()
            await self.run_phase(phase)
            self.status()
            send_msg(self.out, PhaseDone(phase))
            if self.aborted:
                break
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        if ticker is not None:
            ticker.cancel()
        self.client.close()
        loop.remove_reader(0)
        for r in self.done:
            if r.stream is None:
                parse_response(r)
        rows = [result_row(r) for r in self.done]
        stats = WorkerStats(cpu_s, wall_s, self.max_lag_s * 1e3)
        rate = self.rate
        origin = rate.origin_ns if rate is not None else None
        held = tuple(rate.held) if rate is not None else ()
        send_msg(self.out, Result(rows, stats, origin, held))


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
    if len(msgs) != 1 or not isinstance(msgs[0], Setup):
        raise RuntimeError("expected one setup message before the level starts")
    cfg = msgs[0].config
    out = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, not into the messages
    # No garbage collection while requests are timed: its pauses delay every timestamp,
    # and a level makes almost no cyclic garbage.
    gc.disable()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(Worker(cfg, out).run())


if __name__ == "__main__":
    main()
