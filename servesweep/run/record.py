"""A boot's record before anything ran (docs/records.md, servesweep.records.CellRecord)."""

from __future__ import annotations

from typing import cast

from servesweep import CLIENT_VERSION
from servesweep.jsonfile import utc_now
from servesweep.level import Level
from servesweep.records import CellRecord
from servesweep.run.job import CellJob
from servesweep.run.scheduler import scheduler_info
from servesweep.server.engines import launch_env
from servesweep.server.machine import machine_facts
from servesweep.server.settings import ServerSettings
from servesweep.sweep.config import spec_hash


def new_cell_record(
    job: CellJob, plan: list[tuple[Level, int]], server: ServerSettings
) -> CellRecord:
    """A boot's record before anything ran: every level of `plan` not run yet; `env` is
    the spec's (servesweep.server.engines.launch_env), `server` its `server:`."""
    spec, repeat = job.spec, job.repeat
    # Less gpu_slots, workflow_env and comm_env: the boot sets them (or setup_failed does).
    record = {
        "stack": spec["stack"]["name"],
        "model": spec["model"]["name"],
        "variant": spec["variant"],
        "repeat": repeat,
        "engine": spec["engine"],
        "spec_hash": spec_hash(spec),
        "spec": spec,
        "client_version": CLIENT_VERSION,
        "attempt": job.attempt,
        "status": "ok",
        "failure": None,
        "command": [],
        "command_str": "",
        "env": launch_env(spec),
        "host": server.host,
        "port": 0,
        "server_pid": None,
        "boot_s": None,
        "boot_facts": {},
        "boot_attempts": [],
        "started_at": utc_now(),
        "finished_at": None,
        "teardown": None,
        "scheduler": scheduler_info(),
        "machine": machine_facts(),
        "correctness": None,
        "deadline": job.deadline,
        "stack_manifest": job.stack_manifest,
        "model_manifest": job.model_manifest,
        "levels": [
            {
                "level": lv.json,
                "repeat": repeat,
                "in_boot": i,
                "status": "not_run",
                "cause": None,
            }
            for lv, i in plan
        ],
    }
    return cast(CellRecord, record)
