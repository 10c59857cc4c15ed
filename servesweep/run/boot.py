"""One boot of a cell, on a launched server: readiness, the levels in order, the correctness
pass, teardown; every failure written into the boot's record (`CellRun.fail`)."""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from pathlib import Path
from typing import Any, cast

from servesweep.bench.client import ClientSettings, probe_generation, run_level
from servesweep.capacity.run import search_capacity
from servesweep.correctness.answers import run_correctness
from servesweep.jsonfile import utc_now, write_json
from servesweep.level import Level
from servesweep.records import CellRecord, LevelRead, LevelSummary
from servesweep.run.job import CellJob
from servesweep.run.levels import level_plan, level_prompts, rate_schedule
from servesweep.run.record import new_cell_record
from servesweep.run.scheduler import time_limit_margin
from servesweep.server.engines import get_engine, launch_command
from servesweep.server.engines.gauges import GaugeSampler
from servesweep.server.engines.prometheus import counter_delta
from servesweep.server.env import comm_env, server_env, workflow_env
from servesweep.server.failures import log_tail, read_log
from servesweep.server.gpu_slots import GpuLease
from servesweep.server.process import ServerProcess, port_is_free
from servesweep.server.readiness import BootFailure, check_alive, diagnose, exited, wait_ready
from servesweep.server.settings import ServerSettings
from servesweep.server.telemetry import GpuSampler, joules_per_token, visible_indices
from servesweep.sizing import level_requests
from servesweep.sweep.benchmark import BenchmarkSettings, Search
from servesweep.sweep.layout import level_name
from servesweep.workloads.base import load_tokenizer

LOG_TAIL_LINES = 50
LIVENESS_PROBE_MAX_S = 60.0


class CellRun:
    """One measurement of one cell: its record, its log, and how a failure is written."""

    def __init__(self, job: CellJob, log=print):
        spec, deadline = job.spec, job.deadline
        self.spec = spec
        self.repeat = job.repeat
        # The spec's server section, read once for the whole boot.
        self.server = server = ServerSettings.of(spec["server"])
        # The job's time limit (time.time) as a time.monotonic cutoff, less the margin.
        self.cutoff = None
        if deadline is not None:
            left = deadline - time_limit_margin(server) - time.time()
            self.cutoff = time.monotonic() + left
        self.out_dir = Path(job.out_dir)
        self.levels_dir = self.out_dir / "levels"
        self.server_log = Path(job.server_log)
        self.log = log
        self.engine = get_engine(spec["engine"], spec["engine_options"])
        self.host = server.host
        self.python = job.stack_manifest["python"]
        self.model_path = job.model_manifest["path"]
        # The spec's benchmark, read once for the whole boot.
        self.bench = bench = BenchmarkSettings.of(spec["benchmark"])
        self.plan = level_plan(bench)
        self.tokenizer = load_tokenizer(Path(self.model_path))
        self.settings = ClientSettings(
            base_url="",
            endpoint=bench.endpoint,
            model=self.engine.served_model_name(self.model_path),
            request_timeout_s=bench.request_timeout_s,
            stall_timeout_s=bench.stall_timeout_s,
            extra_body=self.engine.request_extras(),
            tokenizer=self.tokenizer,
        )
        self.record = new_cell_record(job, self.plan, server)
        self.use_gpus(None)

    def use_gpus(self, lease: GpuLease | None) -> None:
        """The server gets the lease's GPUs (and inherits its locks), NVLink multicast off
        unless the variant says otherwise; the record says what was set outside the spec."""
        spec_env, gpu_env = self.record["env"], lease.env() if lease else {}
        self.lease = lease
        self.server_env = server_env(spec_env, gpu_env)
        self.record["gpu_slots"] = lease.as_record() if lease else None
        self.record["workflow_env"] = workflow_env(spec_env, gpu_env)
        self.record["comm_env"] = comm_env({**os.environ, **self.server_env})

    def fail(
        self, stage: str, cause: str, message: str, level: Level | None = None, repeat=None
    ) -> None:
        self.record["status"] = "failed"
        self.record["failure"] = {
            "stage": stage,
            "cause": cause,
            "level": None if level is None else level.json,
            "repeat": repeat,
            "message": message,
            "log_tail": log_tail(self.server_log, LOG_TAIL_LINES),
        }
        where = f" (level {level})" if level else ""
        self.log(f"FAILED at {stage}{where}: {cause}: {message}")

    def prepare(self, port: int) -> None:
        """Point the command and the client at `port`."""
        command = launch_command(self.spec, self.python, self.model_path, self.host, port)
        self.record.update({"command": command, "command_str": shlex.join(command), "port": port})
        self.settings.base_url = f"http://{self.host}:{port}"

    def launch(self) -> ServerProcess | None:
        """Start the server on the prepared port; None (recorded) when it cannot start."""
        port = self.record["port"]
        self.log(f"$ {self.record['command_str']}")
        if not port_is_free(self.host, port):
            message = f"port {port} on {self.host} is already taken; not launching"
            self.fail("launch", "port_in_use", message)
            self.record["boot_attempts"].append({"cause": "port_in_use", "message": message})
            return None
        # The compile caches as this launch finds them (a first boot on a host is cold).
        self.record["boot_facts"] = self.engine.cache_state({**os.environ, **self.server_env})
        try:
            server = ServerProcess(
                self.record["command"],
                self.server_env,
                self.server_log,
                self.host,
                port,
                pass_fds=self.lease.fds if self.lease else (),
            )
        except OSError as exc:
            command = self.record["command"][0]
            self.fail("launch", "unknown", f"cannot start {command}: {exc.strerror or exc}")
            raise
        self.record["server_pid"] = server.pid
        self.log(f"server pid {server.pid} (process group {server.pgid}), log {self.server_log}")
        return server

    def generate(self, prompt: str, max_tokens: int):
        """A short real generation as (error, detail, tokens), bounded by its argument."""
        return lambda timeout_s: asyncio.run(
            probe_generation(self.settings, prompt, max_tokens, timeout_s)
        )

    def measure(self, server: ServerProcess) -> bool:
        """Boot, run the levels, tear down (on every path). Returns False when the server
        never became ready (so the caller may relaunch)."""
        booted = completed = False
        boot_timeout = self.server.boot_timeout_s
        left = self.left()
        limited = left is not None and left < boot_timeout
        try:
            try:
                boot_s = wait_ready(
                    server,
                    self.engine.health_path,
                    self.engine.models_path,
                    self.settings.model,
                    max(0.0, cast(float, left)) if limited else boot_timeout,
                    generate=self.generate("Hello", 4),
                    log=self.log,
                )
                booted = True
                self.record["boot_s"] = round(boot_s, 3)
                # An earlier boot try may have failed.
                self.record["status"], self.record["failure"] = "ok", None
                self.log(f"ready in {self.record['boot_s']} s")
                facts = self.record["boot_facts"]
                facts.update(self.engine.boot_facts(read_log(self.server_log)))
                self.engine.note_cache_growth(facts, {**os.environ, **self.server_env})
                self.run_levels(server)
                self.check_answers(server)
            except BootFailure as exc:
                cause, message = exc.cause, exc.message
                if cause == "boot_timeout" and limited:
                    cause = "time_limit"
                    message = f"the job's time limit came first ({message})"
                self.record["boot_attempts"].append({"cause": cause, "message": message})
                self.fail("boot", cause, message)
            completed = True
        finally:
            # Every path tears down. Only a completed measurement is written, so an
            # interrupted cell is measured again next run.
            self.tear_down(server, completed)
        return booted

    def left(self) -> float | None:
        """Seconds until this cell must stop for the job's time limit (None: no limit)."""
        return None if self.cutoff is None else self.cutoff - time.monotonic()

    def tear_down(self, server: ServerProcess, completed: bool) -> None:
        teardown = server.stop(grace_s=self.server.teardown_grace_s)
        self.record["teardown"] = teardown.as_dict()
        self.log(
            f"teardown: {'clean' if teardown.clean else 'NOT clean'} in {teardown.seconds:.1f} s"
            f"{' (needed SIGKILL)' if teardown.escalated else ''}"
        )
        if completed and not teardown.clean and self.record["status"] == "ok":
            self.fail(
                "teardown",
                "unknown",
                f"processes {teardown.leftover_pids} or port {server.port} still held after "
                "SIGKILL",
            )

    def run_levels(self, server: ServerProcess) -> None:
        # NVML numbers GPUs physically; follow the server's CUDA_VISIBLE_DEVICES.
        gpu_indices = visible_indices(
            self.server_env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
        )
        probe_s = min(LIVENESS_PROBE_MAX_S, self.bench.stall_timeout_s)
        for index, (level, in_boot) in enumerate(self.plan):
            unfit = check_alive(server, self.engine.health_path, self.generate("ping", 2), probe_s)
            if unfit:
                message = f"{unfit[1]} before level {level}"
                self.fail("level", unfit[0], message, level, self.repeat)
                return
            left = self.left()
            if left is not None and left <= 0:
                margin = time_limit_margin(self.server)
                message = f"the job's time limit is under {margin:.0f} s away before level {level}"
                self.fail("level", "time_limit", message, level, self.repeat)
                return
            if not self.run_level(server, index, level, in_boot, gpu_indices):
                return
        if self.bench.search is not None:
            self.search_capacity(server, gpu_indices, probe_s, self.bench.search)

    def search_capacity(
        self, server: ServerProcess, gpu_indices, probe_s: float, search: Search
    ) -> None:
        """The capacity search (servesweep.capacity.run) after the configured levels; each
        probe is one more level of this boot, recorded like any; the result in `capacity`."""
        levels = self.record["levels"]

        def measure(level: Level) -> LevelSummary | None:
            unfit = check_alive(server, self.engine.health_path, self.generate("ping", 2), probe_s)
            left = self.left()
            if unfit or (left is not None and left <= 0):
                return None
            levels.append(
                {
                    "level": level.json,
                    "repeat": self.repeat,
                    "in_boot": 0,
                    "status": "not_run",
                    "cause": None,
                    "probe": True,
                }
            )
            self.run_level(server, len(levels) - 1, level, 0, gpu_indices, probe=True)
            return levels[-1]

        measured = [(lv, i, s) for (lv, i), s in zip(self.plan, levels, strict=True)]
        capacity = search_capacity(
            search, self.spec["slo"], self.levels_dir, measured, measure, self.log
        )
        if capacity is not None:
            self.record["capacity"] = capacity.as_record()
            self.log(f"capacity within SLO: {self.record['capacity']}")

    def run_level(
        self,
        server,
        index: int,
        level: Level,
        in_boot: int,
        gpu_indices,
        probe: bool = False,
    ) -> bool:
        """One level against a live server; its summary written at once. False when it
        failed (recorded), which ends the cell."""
        bench, engine, base_url = self.bench, self.engine, self.settings.base_url
        engine.flush_cache(base_url)
        before = engine.snapshot(base_url)
        prompts = level_prompts(bench, self.tokenizer, level, in_boot)
        name = level_name(level, in_boot)
        sends = level_requests(bench, level)
        warmup = sends.warmup
        # A concurrency level's value is an int; a rate level's cap replaces it below.
        concurrency, schedule, warmup_schedule = cast(int, level.value), None, None
        if level.is_rate:
            schedule = rate_schedule(bench, level, in_boot, sends.measured)
            if sends.paced_warmup:
                warmup_schedule = rate_schedule(bench, level, in_boot, warmup, warmup=True)
            concurrency = bench.max_concurrency or len(prompts)
        load = f"{level} requests/s" if level.is_rate else f"concurrency {level}"
        self.log(
            f"level {level} ({name}, boot r{self.repeat}): {len(prompts)} requests "
            f"({warmup} warmup, unrecorded in every statistic), {load}"
        )
        # The engine's gauges at their peak while the level runs (KV-cache usage, ...).
        watched = engine.peak_gauges if engine.metrics_path else {}
        gauges = GaugeSampler(base_url + (engine.metrics_path or ""), watched)
        with GpuSampler(gpu_indices) as sampler, gauges:
            summary = run_level(
                self.settings,
                prompts,
                concurrency=concurrency,
                warmup=warmup,
                records_path=self.levels_dir / f"{name}.requests.jsonl",
                level=level,
                repeat=self.repeat,
                progress=lambda msg: self.log(f"  [level {level}] {msg}"),
                error_rate_threshold=bench.error_rate_threshold,
                cutoff=self.cutoff,
                schedule_s=schedule,
                warmup_schedule_s=warmup_schedule,
                precision=bench.precision if bench.is_auto else None,
                # A boot's start-up, shared by its measured levels (sizing.target_rse).
                boot_share_s=(self.record["boot_s"] or 0.0) / max(1, len(self.plan)),
            )
        summary["in_boot"] = in_boot
        if probe:
            summary["probe"] = True
        # Server-side counters around the level (speculative accept length, cache hits…).
        after = engine.snapshot(base_url) if server.alive() else {}
        summary["server_before"], summary["server_after"] = before, after
        summary["server_counters"] = counter_delta(
            before.get("metrics", {}), after.get("metrics", {})
        )
        # The level's own hit rate and accept length, where the counters give them.
        figures = engine.level_figures(summary["server_counters"])
        if figures and after:
            after["headline"] = {**after.get("headline", {}), **figures}
        if gauges.gauges:
            summary["server_peaks"] = gauges.result()
        gpu = sampler.result()
        summary["gpu"] = gpu
        summary["energy_j"] = gpu.get("energy_j")
        summary["joules_per_output_token"] = joules_per_token(
            gpu, LevelRead.of(summary).total_output_tokens or 0
        )
        ok = LevelRead.of(summary).status == "ok"
        if not ok:
            message = self._level_fault(server, summary, level)
        self.record["levels"][index] = summary
        write_json(self.levels_dir / f"{name}.json", summary)
        if not ok:
            cause = LevelRead.of(summary).cause or "unknown"
            self.fail("level", cause, message, level, self.repeat)
            return False
        read = LevelRead.of(summary)
        self.log(
            f"level {level} ({name}): "
            f"{read.output_throughput or 0:.1f} output tok/s, median TTFT "
            f"{read.median_ttft_ms or 0:.1f} ms, median TPOT "
            f"{read.median_tpot_ms or 0:.1f} ms"
        )
        return True

    def _level_fault(self, server: ServerProcess, summary: LevelSummary, level: Level) -> str:
        """The client saw a fault; the process and its log say what it was."""
        before = LevelRead.of(summary).cause
        cause, died = diagnose(server, before or "unknown")
        if died or before in (None, "http_errors", "unknown"):
            summary["cause"] = cause
        summary["status"] = "failed"
        if died:
            return exited(server, f"during level {level}")
        read = LevelRead.of(summary, failed=0)
        if read.cause == "time_limit":
            return (
                f"the job's time limit was near: level {level} aborted "
                f"({read.failed} of {read.num_prompts} unfinished)"
            )
        return f"level {level}: {read.cause} ({read.failed} of {read.num_prompts} failed)"

    def check_answers(self, server: ServerProcess) -> None:
        """The correctness pass (servesweep.correctness.answers): the same boot, after the levels,
        before teardown. It never fails the cell; a pass not run says why."""
        given = self.spec["correctness"]
        if not given:
            return self.skip_answers("correctness: false")
        config = cast(dict[str, Any], given)  # the pass's settings (True is not one)
        if self.record["status"] != "ok":
            return self.skip_answers("a level failed")
        probe_s = min(LIVENESS_PROBE_MAX_S, self.bench.stall_timeout_s)
        unfit = check_alive(server, self.engine.health_path, self.generate("ping", 2), probe_s)
        if unfit:
            return self.skip_answers(f"the server is not fit: {unfit[1]}")
        left = self.left()
        if left is not None:
            if left <= 0:
                return self.skip_answers("the job's time limit is near")
            config = {**config, "timeout_s": min(config["timeout_s"], left)}
        path = self.out_dir / "correctness.json"
        summary = run_correctness(
            self.settings, self.tokenizer, self.engine, config, path, self.log
        )
        self.record["correctness"] = {"status": "done", **summary}

    def skip_answers(self, why: str) -> None:
        skipped = {"status": "skipped", "why": why}
        self.record["correctness"] = skipped
        write_json(self.out_dir / "correctness.json", {"version": 1, **skipped})

    def finish(self) -> CellRecord:
        if self.record["correctness"] is None:
            self.skip_answers("the server never became ready")
        self.record["finished_at"] = utc_now()
        write_json(self.out_dir / "cell.json", self.record)
        return self.record
