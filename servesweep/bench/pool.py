"""The level's worker processes, driven through their phases by the coordinator.

The coordinator only hands out the work (`Setup`, `Go`), watches for a stall (no bytes on
any stream for `stall_timeout_s` while requests are in flight: `Abort`) and reports
progress; the workers do the timing (`servesweep.bench.worker`).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, NamedTuple, cast

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
    send_msg,
)
from servesweep.bench.stopping import PrecisionStop, end_claims

PROGRESS_EVERY_S = 5.0
WORKER_START_TIMEOUT_S = 60.0
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class PoolOutcome(NamedTuple):
    results: list[Result]  # one per worker, in worker order
    stalled: bool  # the level was aborted: nothing progressed for stall_timeout_s
    timed_out: bool  # the level was aborted: the job's time limit was near
    t0_ns: int  # perf_counter_ns when the first phase started: the level's clock origin


def worker_command() -> tuple[list[str], dict[str, str]]:
    """argv and environment of one worker: our module on the standard library alone."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT + (os.pathsep + path if path else "")}
    return [sys.executable, "-m", "servesweep.bench.worker"], env


class WorkerPool:
    """The level's worker processes, and what each last said."""

    def __init__(self, configs: list[WorkerConfig]):
        self.configs = configs
        self.procs: list[subprocess.Popen] = []
        self.readers = [MsgReader() for _ in configs]
        now = time.perf_counter_ns()
        self.status = [Status(0, 0, 0, 0, now) for _ in configs]
        self.results: list[Result | None] = [None] * len(configs)
        self.phase_done: list[set[int]] = [set() for _ in configs]
        self.ready: list[Ready | None] = [None] * len(configs)
        self.sel = selectors.DefaultSelector()
        argv, env = worker_command()
        for i, config in enumerate(configs):
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, env=env
            )
            self.procs.append(proc)
            # Both pipes exist (PIPE above); the casts say so to the type checker.
            self.sel.register(cast(IO[bytes], proc.stdout), selectors.EVENT_READ, i)
            send_msg(cast(IO[bytes], proc.stdin).fileno(), Setup(config))

    def send(self, msg) -> None:
        for proc in self.procs:
            try:
                send_msg(cast(IO[bytes], proc.stdin).fileno(), msg)
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
                if isinstance(msg, Status):
                    self.status[i] = msg
                elif isinstance(msg, PhaseDone):
                    self.phase_done[i].add(msg.phase)
                elif isinstance(msg, Ready):
                    self.ready[i] = msg
                elif isinstance(msg, Result):
                    self.results[i] = msg

    def wait_started(self) -> None:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while None in self.ready:
            if time.monotonic() > deadline:
                raise RuntimeError("client workers did not start")
            self.poll(0.1)

    def close(self) -> None:
        self.sel.close()
        for proc in self.procs:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    cast(IO[bytes], pipe).close()
                except OSError:
                    pass
            if proc.poll() is None:
                proc.kill()  # our own child, by its pid
            proc.wait()


class _Progress:
    """Progress lines every PROGRESS_EVERY_S while a phase runs."""

    def __init__(self, say: Callable[[str], None] | None, label: str, total: int):
        self.say, self.label, self.total = say, label, total
        self.last, self.last_events = time.monotonic(), 0

    def __call__(self, status: list[Status]) -> None:
        now = time.monotonic()
        if not self.say or now - self.last < PROGRESS_EVERY_S:
            return
        events = sum(s.events for s in status)
        # SSE events of finished requests: about one per token for most servers.
        rate = (events - self.last_events) / (now - self.last)
        self.say(
            f"{self.label}{sum(s.finished for s in status)}/{self.total} done, "
            f"{sum(s.inflight for s in status)} in flight, {sum(s.errors for s in status)} "
            f"errors, {rate:.0f} events/s"
        )
        self.last, self.last_events = now, events


def _run_phase(
    pool: WorkerPool,
    phase: int,
    stall_ns: int,
    progress: _Progress,
    cutoff: float | None,
    stopper: PrecisionStop | None = None,
) -> tuple[bool, bool]:
    """Run one phase to its end; returns (stalled, timed_out): whether it was aborted
    because nothing progressed, or because `cutoff` (time.monotonic) passed. `stopper`
    (the measured phase under num_prompts: auto) ends the phase's claims once it says so."""
    start_ns = time.perf_counter_ns()
    # A stall is measured from the phase's start, whatever came before.
    pool.status = [s._replace(inflight=0, last_progress_ns=start_ns) for s in pool.status]
    if stopper is not None:
        stopper.start(pool.status)
    pool.send(Go(phase))
    stalled = timed_out = False
    while not all(phase in done for done in pool.phase_done):
        pool.poll(0.05)
        if stopper is not None and stopper.observe(pool.status):
            config = pool.configs[0]
            end_claims(config.counter_path, phase, config.phase_end[phase])
        inflight = sum(s.inflight for s in pool.status)
        last_ns = max(start_ns, *(s.last_progress_ns for s in pool.status))
        why = None
        if not (stalled or timed_out) and inflight and time.perf_counter_ns() - last_ns > stall_ns:
            stalled, why = True, f"no progress for {stall_ns / 1e9:g} s with {inflight} in flight"
        elif not (stalled or timed_out) and cutoff is not None and time.monotonic() > cutoff:
            timed_out, why = True, "the job's time limit is near"
        if why:
            if progress.say:
                progress.say(f"{progress.label}{why}: aborting the level")
            pool.send(Abort())
        progress(pool.status)
    return stalled, timed_out


def run_workers(
    configs: list[WorkerConfig],
    total: int,
    stall_timeout_s: float,
    say,
    label: str,
    cutoff: float | None = None,
    stopper: PrecisionStop | None = None,
) -> PoolOutcome:
    """Run the level's phases (warmup, measured) on the workers; abort on a stall, or once
    `cutoff` (time.monotonic) passes; `stopper`: the measured phase ends when it says."""
    pool = WorkerPool(configs)
    try:
        pool.wait_started()
        progress = _Progress(say, label, total)
        stalled = timed_out = False
        t0_ns = time.perf_counter_ns()
        for phase in (0, 1):
            stall_ns = int(stall_timeout_s * 1e9)
            stop = stopper if phase == 1 else None
            stalled, timed_out = _run_phase(pool, phase, stall_ns, progress, cutoff, stop)
            warmups = configs[0].phase_end[0]
            if phase == 0 and warmups > 0 and say and not (stalled or timed_out):
                say(f"{label}warmup done ({warmups} requests)")
            if stalled or timed_out:
                break
        while None in pool.results:
            pool.poll(1.0)
        return PoolOutcome(cast(list[Result], pool.results), stalled, timed_out, t0_ns)  # all in
    finally:
        pool.close()
