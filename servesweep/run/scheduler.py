"""What a batch scheduler says about the job a cell runs in (SLURM; nothing elsewhere).

`scheduler_info()` goes into every cell record, so a result names the SLURM job that
measured it. `job_deadline()` is when the job will be killed: a cell that would run past it
ends itself a margin earlier with a failed result (cause `time_limit`), because SLURM marks
a job killed at its limit TIMEOUT and Snakemake then deletes whatever it wrote.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import time

from servesweep.server.settings import ServerSettings

TIME_LIMIT_MARGIN_S = 30.0  # at least this long before the job's limit a cell ends itself


def time_limit_margin(server: ServerSettings) -> float:
    """How long before the job's time limit a cell stops: long enough to tear the server
    down (SIGTERM, grace, SIGKILL, checks) and write its records before SLURM's SIGTERM."""
    return max(TIME_LIMIT_MARGIN_S, server.teardown_grace_s + 20)


def scheduler_info() -> dict | None:
    """The SLURM job this process runs in, or None outside SLURM. The job step keeps
    SLURM_JOB_ID (the plugin's jobstep clears most other SLURM_* before its srun, which then
    sets the step's own)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    return {
        "slurm_job_id": job,
        "hostname": socket.gethostname(),
        "node": os.environ.get("SLURMD_NODENAME"),
        "step_id": os.environ.get("SLURM_STEP_ID"),
        "partition": os.environ.get("SLURM_JOB_PARTITION"),
        "gpus": os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS"),
    }


def _slurm_end_time(job: str) -> float | None:
    """The job's end time (epoch seconds) as squeue reports it: `2026-12-01T23:28:49`,
    local time. Newer SLURM releases set SLURM_JOB_END_TIME; 22.05 does not."""
    if os.environ.get("SLURM_JOB_END_TIME", "").isdigit():
        return float(os.environ["SLURM_JOB_END_TIME"])
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    try:
        return dt.datetime.fromisoformat(text).timestamp() if out.returncode == 0 else None
    except ValueError:
        return None  # "N/A", "UNLIMITED", …


def job_deadline(runtime_min: float | None, started: float | None = None) -> float | None:
    """When this job will be killed, as a time.time() value; None when nothing limits it.

    The SLURM end time where there is one (it counts the job's queueing and start-up); the
    job's `runtime` resource (minutes, from `started`) otherwise; the earlier of the two."""
    started = time.time() if started is None else started
    candidates = []
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        end = _slurm_end_time(job)
        if end is not None:
            candidates.append(end)
    if runtime_min:
        candidates.append(started + float(runtime_min) * 60)
    return min(candidates) if candidates else None
