"""`num_prompts: auto` inside one level: the coordinator cuts the measured requests into
batches as they finish and asks the stop rule (`servesweep.sizing.request_stop`) at each
batch boundary; once it says stop, no worker takes another request (the ones in flight end
as usual and are recorded).

What the coordinator sees is each worker's status every 0.1 s: finished requests and the
SSE events of finished streams (about one per token; the role, usage and [DONE] events add
a few per request). A batch ends at the first status at which B more requests have
finished; its tokens are the events that finished in it, its seconds the time between the
ends of the last requests finished at the two statuses (each status carries its worker's
last end, `Status.last_end_ns`): exact, where the coordinator's clock between statuses moves
in steps of the statuses' 0.1 s, which at one stream (a batch of 10 requests in ~2 s) made
batches look alike and the RSE 10 times too small (docs/sglang-h200.md, 2026-12-07). With
several workers a status may be up to 0.1 s old; where the newest end has not moved the
coordinator's clock is used. So the rule's estimate is of events per second, which
differs from output tokens per second by a constant factor when every request asks for the
same output length: the RSE, which is all the rule uses, is the same. The level's recorded
throughput is computed from its requests afterwards, as for any level.
"""

from __future__ import annotations

import fcntl
import struct
import time
from collections.abc import Sequence

from servesweep.bench.messages import Status
from servesweep.level import Level
from servesweep.sizing import Batch, Precision, RequestStop, request_stop, target_rse


class PrecisionStop:
    """The stop rule over one level's measured phase, fed the workers' statuses."""

    def __init__(
        self,
        rule: Precision,
        batch_requests: int,
        warmup: int,
        boot_share_s: float | None,
        level: Level,
    ):
        self.rule, self.size, self.warmup = rule, batch_requests, warmup
        self.boot_share_s = boot_share_s  # the cost-optimal target's c_b (sizing.target_rse)
        self.level = level  # whose σ_B the target takes (`Precision.boot_cv`)
        self.batches: list[Batch] = []
        self.answer: RequestStop | None = None
        self.start_s = self.mark_s = 0.0
        self.mark_finished = self.mark_events = self.mark_end_ns = 0

    def start(self, status: Sequence[Status]) -> None:
        """The measured phase begins (the warm-up's requests have all ended)."""
        self.start_s = self.mark_s = time.monotonic()
        self.mark_end_ns = time.perf_counter_ns()  # the workers' clock
        self.mark_finished = self.warmup
        self.mark_events = sum(s.events for s in status)

    @property
    def stopped(self) -> bool:
        return self.answer is not None and self.answer.stop

    def observe(self, status: Sequence[Status]) -> bool:
        """True once the rule says stop: at a batch boundary (precision), or at any time
        for the caps."""
        if self.stopped:
            return True
        now = time.monotonic()
        finished = sum(s.finished for s in status)
        sent = finished - self.warmup + sum(s.inflight for s in status)
        boundary = finished - self.mark_finished >= self.size
        if boundary:
            events = sum(s.events for s in status)
            end_ns = max(s.last_end_ns for s in status)
            moved = end_ns > self.mark_end_ns
            seconds = (end_ns - self.mark_end_ns) / 1e9 if moved else now - self.mark_s
            self.batches.append(Batch(events - self.mark_events, seconds))
            self.mark_finished, self.mark_events, self.mark_s = finished, events, now
            self.mark_end_ns = max(end_ns, self.mark_end_ns)
        if boundary or sent >= self.rule.max_requests or now - self.start_s >= self.rule.max_s:
            elapsed = now - self.start_s
            self.answer = request_stop(
                self.rule, self.batches, elapsed, sent, self.boot_share_s, self.level
            )
        return self.stopped

    def fields(self) -> dict:
        """The level summary's record of why it stopped."""
        answer = self.answer or request_stop(self.rule, self.batches, 0.0, 0, None, self.level)
        rse = answer.estimate.rse
        fields = {
            "stop_reason": answer.reason if answer.stop else None,
            "stop_rse": None if rse is None else round(rse, 5),
            "stop_batches": answer.estimate.batches,
        }
        if self.rule.boot_cv_pct is not None:  # the cost-optimal target where it stopped
            elapsed = self.mark_s - self.start_s
            target = target_rse(self.rule, elapsed, self.boot_share_s, self.level)
            fields["stop_target_rse"] = None if target is None else round(target, 5)
            fields["boot_share_s"] = self.boot_share_s
        return fields


def end_claims(counter_path: str, phase: int, end: int) -> None:
    """No worker takes another job of `phase`: its counter set to the phase's end (under
    the workers' lock; the coordinator sets it again at every poll while the phase runs,
    so a lone worker's unlocked increment cannot undo it)."""
    with open(counter_path, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(8 * phase)
            (now,) = struct.unpack("<q", f.read(8))
            if now < end:
                f.seek(8 * phase)
                f.write(struct.pack("<q", end))
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
