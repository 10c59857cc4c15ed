"""One cell, start to finish: launch, readiness, the levels in order, teardown.

Whatever happens to the server, the cell's records are written: a failure is a result
(status, stage, cause, log tail), and levels finished before it keep their records.
Only an interruption of the owner (Ctrl-C, SIGTERM) leaves no cell.json, so the next
Snakemake run measures the cell again. A cell whose stack or model could not be set up is
a failed result too (stage `stack` or `model`), written without a launch.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from servesweep.jsonfile import utc_now, write_json
from servesweep.records import (
    CellRecord,
    CellSpec,
    Failure,
    ModelManifest,
    SetupFailure,
    StackManifest,
)
from servesweep.resources.setup import setup_failure
from servesweep.run.boot import CellRun
from servesweep.run.job import CellJob
from servesweep.run.levels import level_plan
from servesweep.run.record import new_cell_record
from servesweep.server.failures import BOOT_RETRY_CAUSES
from servesweep.server.gpu_slots import SlotsUnavailable, hold
from servesweep.server.process import free_port
from servesweep.server.settings import ServerSettings
from servesweep.sweep.benchmark import BenchmarkSettings
from servesweep.sweep.schema import section_defaults


def run_cell(
    spec: CellSpec,
    stack_manifest: StackManifest,
    model_manifest: ModelManifest,
    out_dir: Path,
    server_log: Path,
    log=print,
    attempt: int = 0,
    boot_retries: int = 0,
    repeat: int = 0,
    deadline: float | None = None,
    gpu_slots: dict | None = None,
) -> CellRecord:
    """Measure one boot of a cell; write out_dir/cell.json and out_dir/levels/*; return the
    record.

    `repeat` is which boot of the cell this is (recorded); `attempt` counts reruns of a failed
    boot; `boot_retries` is how many more launches a boot failure gets within this job (only
    for causes a relaunch may cure); `deadline` (time.time) is when the job will be killed: the
    cell ends itself a margin before it, with cause time_limit (servesweep.run.scheduler);
    `gpu_slots` (the config's, else the schema's defaults) says where the cell takes its GPUs
    (servesweep.server.gpu_slots): held for every launch of this job, or the cell fails at launch
    with cause gpu_slots.
    """
    levels_dir = Path(out_dir) / "levels"
    if levels_dir.exists():
        shutil.rmtree(levels_dir)
    levels_dir.mkdir(parents=True)
    (Path(out_dir) / "correctness.json").unlink(missing_ok=True)
    server_log = Path(server_log)
    server_log.parent.mkdir(parents=True, exist_ok=True)
    server_log.write_bytes(b"")

    job = CellJob(
        spec, stack_manifest, model_manifest, Path(out_dir), server_log, attempt, repeat, deadline
    )
    inherited = setup_failure(stack_manifest, model_manifest)
    if inherited is not None:
        return setup_failed(job, inherited, log)
    run = CellRun(job, log)
    log(
        f"cell {run.record['stack']}/{run.record['model']}/{run.record['variant']} boot "
        f"r{repeat}, spec {run.record['spec_hash']}"
    )
    log(f"run_cell owner pid {os.getpid()}, attempt {attempt}")
    cell = f"{run.record['stack']}/{run.record['model']}/{run.record['variant']} r{repeat}"
    try:
        with hold(spec["gpus"], gpu_slots or default_gpu_slots(), cell, log=log) as lease:
            run.use_gpus(lease)
            if lease.cuda_visible_devices is not None:
                log(f"GPUs held: CUDA_VISIBLE_DEVICES={lease.cuda_visible_devices!r}")
            _boots(run, server_log, boot_retries, log)
    except SlotsUnavailable as exc:
        run.fail("launch", "gpu_slots", str(exc))
    return run.finish()


def setup_failed(
    job: CellJob, failure: SetupFailure, log: Callable[[str], object] = print
) -> CellRecord:
    """The record of a boot whose stack or model could not be set up: failed at stage
    `stack` or `model` with the setup's cause, message and log tail; nothing launched, every
    level not run."""
    plan = level_plan(BenchmarkSettings.of(job.spec["benchmark"]))
    record = new_cell_record(job, plan, ServerSettings.of(job.spec["server"]))
    record["status"] = "failed"
    record["failure"] = Failure(**failure, level=None, repeat=job.repeat)
    record["gpu_slots"], record["workflow_env"], record["comm_env"] = None, {}, {}
    skipped = {"status": "skipped", "why": f"the {failure['stage']} failed"}
    record["correctness"] = skipped
    record["finished_at"] = utc_now()
    log(f"FAILED at {failure['stage']}: {failure['cause']}: {failure['message']}")
    write_json(job.out_dir / "correctness.json", {"version": 1, **skipped})
    write_json(job.out_dir / "cell.json", record)
    return record


def default_gpu_slots() -> dict:
    """The schema's defaults of `gpu_slots` (for callers without a sweep)."""
    return section_defaults("gpu_slots")


def _boots(run: CellRun, server_log: Path, boot_retries: int, log) -> None:
    """Launch and measure, relaunching after a boot failure a relaunch may cure."""
    auto_port = run.server.auto_port
    for boot_try in range(boot_retries + 1):
        if boot_try:
            with server_log.open("ab") as handle:
                handle.write(f"\n--- relaunch {boot_try} ---\n".encode())
            log(f"boot failed; relaunching ({boot_try} of {boot_retries})")
        if boot_try == 0 or auto_port:
            # A fresh port for a relaunch: the failed server may have left it in TIME_WAIT.
            run.prepare(free_port(run.host) if auto_port else int(run.server.port))
        try:
            server = run.launch()
        except OSError:
            break
        if server is not None and run.measure(server):
            break
        attempts = run.record["boot_attempts"]
        cause = attempts[-1]["cause"] if attempts else None
        if cause not in BOOT_RETRY_CAUSES:
            if boot_try < boot_retries:
                log(f"not relaunching: a boot that failed with {cause} would fail again")
            break
