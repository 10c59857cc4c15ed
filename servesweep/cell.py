"""One cell, start to finish: launch, readiness, the levels in order, teardown.

Whatever happens to the server, the cell's records are written: a failure is a result
(status, stage, cause, log tail), and levels finished before it keep their records.
Only an interruption of the owner (Ctrl-C, SIGTERM) leaves no cell.json, so the next
Snakemake run measures the cell again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from servesweep import CLIENT_VERSION
from servesweep.client import ClientSettings, generate_once, probe_generation, run_level
from servesweep.config import spec_hash
from servesweep.engines import get_engine, launch_command, launch_env
from servesweep.engines.base import counter_delta
from servesweep.failures import (
    BOOT_RETRY_CAUSES,
    classify_exit,
    classify_log,
    log_tail,
    read_log,
)
from servesweep.server import (
    BootFailure,
    ServerProcess,
    free_port,
    http_get,
    port_is_free,
    wait_ready,
)
from servesweep.telemetry import GpuSampler, joules_per_token, visible_indices
from servesweep.workload import load_tokenizer, random_prompts, sharegpt_prompts

LOG_TAIL_LINES = 50


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def level_plan(spec: dict) -> list[tuple[int, int]]:
    """(level, repeat) in the order they run: each level's repeats back to back."""
    bench = spec["benchmark"]
    return [(level, r) for level in bench["levels"] for r in range(bench["repeats"])]


def make_prompts(spec: dict, tokenizer, level: int, repeat: int) -> list:
    """The level's prompts (warmup first). Seeded by level and repeat, so every variant
    sees exactly the same requests."""
    bench = spec["benchmark"]
    workload = bench["workload"]
    n = bench["warmup"] + bench["num_prompts_per_level"][str(level)]
    seed = workload["seed"] * 1_000_003 + level * 101 + repeat
    if workload["kind"] == "sharegpt":
        return sharegpt_prompts(
            Path(workload["path"]), tokenizer, n, workload.get("output_tokens"), seed
        )
    return random_prompts(tokenizer, n, workload["input_tokens"], workload["output_tokens"], seed)


def not_run(level: int, repeat: int) -> dict:
    return {"level": level, "repeat": repeat, "status": "not_run", "cause": None}


def run_cell(
    spec: dict,
    stack_manifest: dict,
    model_manifest: dict,
    out_dir: Path,
    server_log: Path,
    log=print,
    attempt: int = 0,
    boot_retries: int = 0,
) -> dict:
    """Measure one cell; write out_dir/cell.json and out_dir/levels/*; return the cell.

    `attempt` counts reruns of a failed cell (recorded); `boot_retries` is how many more
    launches a boot failure gets within this job.
    """
    out_dir = Path(out_dir)
    levels_dir = out_dir / "levels"
    if levels_dir.exists():
        shutil.rmtree(levels_dir)
    levels_dir.mkdir(parents=True)
    server_log = Path(server_log)
    server_log.parent.mkdir(parents=True, exist_ok=True)
    server_log.write_bytes(b"")

    engine = get_engine(spec["engine"], spec.get("engine_options"))
    server_cfg = spec["server"]
    host = server_cfg["host"]
    python = stack_manifest["python"]
    model_path = model_manifest["path"]
    env = launch_env(spec)
    plan = level_plan(spec)
    port = free_port(host) if server_cfg["port"] == "auto" else int(server_cfg["port"])
    command = launch_command(spec, python, model_path, port)
    cell = {
        "stack": spec["stack"]["name"],
        "model": spec["model"]["name"],
        "variant": spec["variant"],
        "engine": spec["engine"],
        "spec_hash": spec_hash(spec),
        "spec": spec,
        "client_version": CLIENT_VERSION,
        "attempt": attempt,
        "status": "ok",
        "failure": None,
        "command": command,
        "command_str": shlex.join(command),
        "env": env,
        "host": host,
        "port": port,
        "server_pid": None,
        "boot_s": None,
        "boot_attempts": [],
        "started_at": _now(),
        "finished_at": None,
        "teardown": None,
        "stack_manifest": stack_manifest,
        "model_manifest": model_manifest,
        "levels": [not_run(level, r) for level, r in plan],
    }

    def fail(stage: str, cause: str, message: str, level=None, repeat=None) -> None:
        cell["status"] = "failed"
        cell["failure"] = {
            "stage": stage,
            "cause": cause,
            "level": level,
            "repeat": repeat,
            "message": message,
            "log_tail": log_tail(server_log, LOG_TAIL_LINES),
        }
        log(f"FAILED at {stage}{f' (level {level})' if level else ''}: {cause}: {message}")

    log(f"cell {cell['stack']}/{cell['model']}/{cell['variant']} spec {cell['spec_hash']}")
    log(f"run_cell owner pid {os.getpid()}, attempt {attempt}")
    tokenizer = load_tokenizer(Path(model_path))
    settings = ClientSettings(
        base_url=f"http://{host}:{port}",
        endpoint=spec["benchmark"]["endpoint"],
        model=engine.served_model_name(model_path),
        request_timeout_s=spec["benchmark"]["request_timeout_s"],
        stall_timeout_s=spec["benchmark"]["stall_timeout_s"],
        extra_body=engine.request_extras(),
        tokenizer=tokenizer,
    )

    for boot_try in range(boot_retries + 1):
        if boot_try:
            # A fresh port for a relaunch: the failed server may have left it in TIME_WAIT.
            if server_cfg["port"] == "auto":
                port = free_port(host)
                command = launch_command(spec, python, model_path, port)
            settings.base_url = f"http://{host}:{port}"
            with server_log.open("ab") as handle:
                handle.write(f"\n--- relaunch {boot_try} ---\n".encode())
            log(f"boot failed; relaunching ({boot_try} of {boot_retries})")
        cell.update(command=command, command_str=shlex.join(command), port=port)
        log(f"$ {cell['command_str']}")
        if not port_is_free(host, port):
            fail("launch", "port_in_use", f"port {port} on {host} is already taken; not launching")
            cell["boot_attempts"].append({"cause": "port_in_use", "message": "port taken"})
            continue
        try:
            server = ServerProcess(command, env, server_log, host, port)
        except OSError as exc:
            fail("launch", "unknown", f"cannot start {command[0]}: {exc.strerror or exc}")
            return _finish(cell, out_dir)
        cell["server_pid"] = server.pid
        log(f"server pid {server.pid} (process group {server.pgid}), log {server_log}")
        booted = _measure(
            cell, spec, plan, server, engine, settings, tokenizer, levels_dir, fail, log
        )
        if booted:
            break
        cause = cell["boot_attempts"][-1]["cause"] if cell["boot_attempts"] else None
        if cause not in BOOT_RETRY_CAUSES:
            if boot_try < boot_retries:
                log(f"not relaunching: a boot that failed with {cause} would fail again")
            break
    return _finish(cell, out_dir)


def _measure(cell, spec, plan, server, engine, settings, tokenizer, levels_dir, fail, log) -> bool:
    """Boot, run the levels, tear down (on every path). Returns False when the server
    never became ready (so the caller may relaunch)."""
    server_cfg = spec["server"]
    booted = False
    completed = False
    try:
        try:
            boot_s = wait_ready(
                server,
                engine.health_path,
                engine.models_path,
                settings.model,
                server_cfg["boot_timeout_s"],
                generate=lambda left: asyncio.run(probe_generation(settings, "Hello", 4, left)),
                log=log,
            )
            booted = True
            cell["boot_s"] = round(boot_s, 3)
            cell["status"], cell["failure"] = "ok", None  # an earlier boot try may have failed
            log(f"ready in {cell['boot_s']} s")
            _run_levels(
                cell, spec, plan, server, engine, settings, tokenizer, levels_dir, fail, log
            )
        except BootFailure as exc:
            cell["boot_attempts"].append({"cause": exc.cause, "message": exc.message})
            fail("boot", exc.cause, exc.message)
        completed = True
    finally:
        # Every path tears down. Only a completed measurement is written (by the
        # caller), so an interrupted cell is measured again next run.
        teardown = server.stop(grace_s=server_cfg["teardown_grace_s"])
        cell["teardown"] = teardown.as_dict()
        log(
            f"teardown: {'clean' if teardown.clean else 'NOT clean'} in {teardown.seconds:.1f} s"
            f"{' (needed SIGKILL)' if teardown.escalated else ''}"
        )
        if completed and not teardown.clean and cell["status"] == "ok":
            fail(
                "teardown",
                "unknown",
                f"processes {teardown.leftover_pids} or port {server.port} still held after "
                "SIGKILL",
            )
    return booted


def diagnose(server, observed: str, exit_wait_s: float = 2.0) -> tuple[str, bool]:
    """(cause, died) for a fault the client observed. A server that is dying gets a
    moment to exit, so a crash is not mistaken for a hang; a live server's log may
    still name the cause (an NCCL error, say) better than the symptom does."""
    try:
        server.proc.wait(timeout=exit_wait_s)
    except subprocess.TimeoutExpired:
        return classify_log(read_log(server.log_path)) or observed, False
    return classify_exit(server.returncode, read_log(server.log_path)), True


def _check_alive(spec, server, engine, settings, level) -> tuple[str, str] | None:
    """Liveness before a level: alive, health answers, and a 2-token generation
    finishes in time (/health alone misses a hung-but-healthy server). Returns
    (cause, message) when the server is not fit to measure."""
    if not server.alive():
        return diagnose(server, "died")[0], f"server exited with code {server.returncode}"
    status, _ = http_get(settings.base_url + engine.health_path, timeout_s=10)
    if status != 200:
        cause, died = diagnose(server, "hung")
        if died:
            return cause, f"server exited with code {server.returncode}"
        return cause, f"health check answered {status or 'nothing'}"
    probe_s = min(60.0, spec["benchmark"]["stall_timeout_s"])
    try:
        asyncio.run(asyncio.wait_for(generate_once(settings, "ping", 2), probe_s))
    except Exception as exc:  # noqa: BLE001 - any failure of the probe is the finding
        timed_out = isinstance(exc, TimeoutError)
        cause, died = diagnose(server, "hung" if timed_out else "http_errors")
        if died:
            return cause, f"server exited with code {server.returncode}"
        return cause, f"liveness probe: {'timed out' if timed_out else str(exc)[:200]}"
    return None


def _run_levels(cell, spec, plan, server, engine, settings, tokenizer, levels_dir, fail, log):
    # NVML numbers GPUs physically; follow CUDA_VISIBLE_DEVICES when the cell has one.
    gpu_indices = visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    for index, (level, repeat) in enumerate(plan):
        unfit = _check_alive(spec, server, engine, settings, level)
        if unfit:
            fail("level", unfit[0], f"{unfit[1]} before level {level}", level, repeat)
            return
        engine.flush_cache(settings.base_url)
        before = engine.snapshot(settings.base_url)
        prompts = make_prompts(spec, tokenizer, level, repeat)
        name = f"L{level}_r{repeat}"
        log(
            f"level {level} repeat {repeat}: {len(prompts)} requests "
            f"({spec['benchmark']['warmup']} warmup), concurrency {level}"
        )
        with GpuSampler(gpu_indices) as sampler:
            summary = run_level(
                settings,
                prompts,
                concurrency=level,
                warmup=spec["benchmark"]["warmup"],
                records_path=levels_dir / f"{name}.requests.jsonl",
                level=level,
                repeat=repeat,
                progress=lambda msg, lv=level: log(f"  [level {lv}] {msg}"),
                error_rate_threshold=spec["benchmark"]["error_rate_threshold"],
            )
        summary["started_at"] = summary.get("started_at") or _now()
        # Server-side counters around the level (speculative accept length, cache hits…).
        after = engine.snapshot(settings.base_url) if server.alive() else {}
        summary["server_before"], summary["server_after"] = before, after
        summary["server_counters"] = counter_delta(
            before.get("metrics", {}), after.get("metrics", {})
        )
        gpu = sampler.result()
        summary["gpu"] = gpu
        summary["energy_j"] = gpu.get("energy_j")
        summary["joules_per_output_token"] = joules_per_token(
            gpu, summary.get("total_output_tokens") or 0
        )
        if summary.get("status") != "ok":
            # The client saw a fault; the process and its log say what it was.
            cause, died = diagnose(server, summary.get("cause") or "unknown")
            if died or summary.get("cause") in (None, "http_errors", "unknown"):
                summary["cause"] = cause
            if died:
                message = f"server exited with code {server.returncode} during level {level}"
            else:
                message = (
                    f"level {level}: {summary['cause']} "
                    f"({summary.get('failed', 0)} of {summary.get('num_prompts')} failed)"
                )
            summary["status"] = "failed"
            cell["levels"][index] = summary
            _write_json(levels_dir / f"{name}.json", summary)
            fail("level", summary.get("cause") or "unknown", message, level, repeat)
            return
        cell["levels"][index] = summary
        _write_json(levels_dir / f"{name}.json", summary)
        log(
            f"level {level} repeat {repeat}: {summary.get('output_throughput', 0):.1f} output "
            f"tok/s, median TTFT {summary.get('median_ttft_ms', 0):.1f} ms, median TPOT "
            f"{summary.get('median_tpot_ms') or 0:.1f} ms"
        )


def _finish(cell: dict, out_dir: Path) -> dict:
    cell["finished_at"] = _now()
    _write_json(Path(out_dir) / "cell.json", cell)
    return cell
