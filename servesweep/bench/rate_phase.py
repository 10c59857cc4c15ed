"""A rate level's phases, inside a worker (standard library only): the measured one, and
its warm-up when that runs at the level's rate too.

Each request goes out at its scheduled time (`WorkerConfig.schedule_ns`, ns after the phase
starts; drawn by `servesweep.bench.arrivals`), whatever the others are doing: an open-loop arrival
process, as vLLM's and AIPerf's request-rate modes. With a concurrency cap, a request due
while the cap is full waits for the first request to end and is sent from that callback;
it is counted as `held`, so a late send the cap caused is told apart from the client's own
lateness. Timers: the loop is woken for the next due request (`call_later`); every request
already due is sent in that callback, so a late wake-up never loses a request, only delays it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

_now = time.perf_counter_ns


class RatePhase:
    """Sends one phase's jobs on schedule for one worker (the level's only worker)."""

    def __init__(self, worker, schedule_ns: list[int], cap: int, phase: int = 1):
        self.w = worker
        self.phase = phase
        self.schedule = schedule_ns
        self.cap = cap if cap > 0 else 1 << 62
        self.next = 0  # position in the schedule of the next job to send
        self.waiting: deque[int] = deque()  # due, but the cap was full
        self.live: set = set()
        self.held: list[int] = []
        self.origin_ns = 0
        self.timer: asyncio.TimerHandle | None = None
        self.over: asyncio.Future | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.over = loop.create_future()
        self.origin_ns = _now()
        self.fire()
        await self.over

    def fire(self) -> None:
        """Send (or queue behind the cap) every job now due; wake again for the next."""
        self.timer = None
        w = self.w
        if w.aborted:
            self._maybe_over()
            return
        now = _now()
        schedule = self.schedule
        while self.next < len(schedule) and self.origin_ns + schedule[self.next] <= now:
            index = w.claim(self.phase)
            self.next += 1
            if index is None:
                break
            if len(self.live) < self.cap:
                self._send(index)
            else:
                self.waiting.append(index)
                self.held.append(index)
        if self.next < len(schedule) and not w.aborted:
            delay = (self.origin_ns + schedule[self.next] - _now()) / 1e9
            self.timer = asyncio.get_running_loop().call_later(max(0.0, delay), self.fire)
        self._maybe_over()

    def _send(self, index: int) -> None:
        w = self.w
        payload = w.payloads[w.offsets[index] : w.offsets[index + 1]]
        r = w.client.request(index, payload, self.ended)
        self.live.add(r)
        w.inflight += 1
        idle = w.client.idle
        w.client.send(r, idle.pop() if idle else None)

    def ended(self, r) -> None:
        w = self.w
        if r.error == "retry":
            w.client.resend(r)
            return
        r.data = b""
        self.live.discard(r)
        w.inflight -= 1
        w.client.last_progress_ns = r.end_ns
        conn = r.conn
        if conn is not None and not conn.closed:
            w.client.idle.append(conn)
        if self.waiting and not w.aborted:
            self._send(self.waiting.popleft())
        w.book(r)
        self._maybe_over()

    def abort(self) -> None:
        """End every request in flight as stalled; send nothing more."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.waiting.clear()
        for r in list(self.live):
            if not r.ended:
                conn = r.conn
                if conn is not None and conn.req is r:
                    conn.fail(r, "stalled")
                else:
                    r.end("stalled")
        self._maybe_over()

    def _maybe_over(self) -> None:
        done_sending = self.w.aborted or (self.next >= len(self.schedule) and not self.waiting)
        if done_sending and not self.live and self.over is not None and not self.over.done():
            self.over.set_result(None)
