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
import shlex
import shutil
from pathlib import Path

from servesweep import CLIENT_VERSION
from servesweep.client import ClientSettings, generate_once, run_level
from servesweep.config import spec_hash
from servesweep.engines import get_engine
from servesweep.failures import classify_exit, classify_log, log_tail, read_log
from servesweep.server import (
    BootFailure,
    ServerProcess,
    free_port,
    http_get,
    port_is_free,
    wait_ready,
)
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
) -> dict:
    """Measure one cell; write out_dir/cell.json and out_dir/levels/*; return the cell."""
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
    port = free_port(host) if server_cfg["port"] == "auto" else int(server_cfg["port"])
    python = stack_manifest["python"]
    model_path = model_manifest["path"]
    command = engine.command(
        python=python,
        model_path=model_path,
        host=host,
        port=port,
        flags=spec["flags"],
        gpus=spec["gpus"],
    )
    env = engine.env(spec["env"])
    plan = level_plan(spec)
    cell = {
        "stack": spec["stack"]["name"],
        "model": spec["model"]["name"],
        "variant": spec["variant"],
        "engine": spec["engine"],
        "spec_hash": spec_hash(spec),
        "spec": spec,
        "client_version": CLIENT_VERSION,
        "status": "ok",
        "failure": None,
        "command": command,
        "command_str": shlex.join(command),
        "env": env,
        "host": host,
        "port": port,
        "boot_s": None,
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
    log(f"$ {cell['command_str']}")
    if not port_is_free(host, port):
        fail("launch", "port_in_use", f"port {port} on {host} is already taken; not launching")
        return _finish(cell, out_dir)

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
    try:
        server = ServerProcess(command, env, server_log, host, port)
    except OSError as exc:
        fail("launch", "unknown", f"cannot start {command[0]}: {exc.strerror or exc}")
        return _finish(cell, out_dir)
    log(f"server pid {server.pid} (process group {server.pgid}), log {server_log}")
    completed = False
    try:
        try:
            cell["boot_s"] = round(
                wait_ready(
                    server,
                    engine.health_path,
                    engine.models_path,
                    settings.model,
                    server_cfg["boot_timeout_s"],
                    generate=lambda: asyncio.run(generate_once(settings, "Hello", 4)),
                    log=log,
                ),
                3,
            )
            log(f"ready in {cell['boot_s']} s")
            _run_levels(
                cell, spec, plan, server, engine, settings, tokenizer, levels_dir, fail, log
            )
        except BootFailure as exc:
            fail("boot", exc.cause, exc.message)
        completed = True
    finally:
        # Every path tears down; only a completed measurement writes cell.json, so an
        # interrupted cell is measured again next run.
        teardown = server.stop(grace_s=server_cfg["teardown_grace_s"])
        cell["teardown"] = teardown.as_dict()
        log(
            f"teardown: {'clean' if teardown.clean else 'NOT clean'} in {teardown.seconds:.1f} s"
            f"{' (needed SIGKILL)' if teardown.escalated else ''}"
        )
        if completed:
            if not teardown.clean and cell["status"] == "ok":
                fail(
                    "teardown",
                    "unknown",
                    f"processes {teardown.leftover_pids} or port {port} still held after SIGKILL",
                )
            _finish(cell, out_dir)
    return cell


def _run_levels(cell, spec, plan, server, engine, settings, tokenizer, levels_dir, fail, log):
    for index, (level, repeat) in enumerate(plan):
        # Liveness before each level: a dead or silent server ends the cell here.
        if not server.alive():
            cause = classify_exit(server.returncode, read_log(server.log_path))
            fail(
                "level",
                cause,
                f"server exited with code {server.returncode} before level {level}",
                level,
                repeat,
            )
            return
        status, _ = http_get(settings.base_url + engine.health_path, timeout_s=10)
        if status != 200:
            fail(
                "level",
                "hung",
                f"health check answered {status or 'nothing'} before level {level}",
                level,
                repeat,
            )
            return
        engine.flush_cache(settings.base_url)
        prompts = make_prompts(spec, tokenizer, level, repeat)
        name = f"L{level}_r{repeat}"
        log(
            f"level {level} repeat {repeat}: {len(prompts)} requests "
            f"({spec['benchmark']['warmup']} warmup), concurrency {level}"
        )
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
        if summary.get("status") != "ok":
            # The client saw a fault; the process and its log say what it was.
            if not server.alive():
                summary["cause"] = classify_exit(server.returncode, read_log(server.log_path))
                message = f"server exited with code {server.returncode} during level {level}"
            else:
                cause = classify_log(read_log(server.log_path))
                if cause and summary.get("cause") in (None, "http_errors"):
                    summary["cause"] = cause
                message = (
                    f"level {level}: {summary.get('cause')} "
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
