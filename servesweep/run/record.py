"""A boot's record before anything ran (docs/records.md, servesweep.records.CellRecord)."""

from __future__ import annotations

from servesweep import CLIENT_VERSION
from servesweep.jsonfile import utc_now
from servesweep.level import Level
from servesweep.records import CellRecord
from servesweep.run.scheduler import scheduler_info


def new_cell_record(
    spec: dict,
    spec_hash: str,
    env: dict[str, str],
    repeat: int,
    attempt: int,
    deadline: float | None,
    stack_manifest: dict,
    model_manifest: dict,
    plan: list[tuple[Level, int]],
) -> CellRecord:
    """A boot's record before anything ran: every level not run yet. `spec_hash` and
    `env` are the spec's (servesweep.sweep.config.spec_hash,
    servesweep.server.engines.launch_env)."""
    return {
        "stack": spec["stack"]["name"],
        "model": spec["model"]["name"],
        "variant": spec["variant"],
        "repeat": repeat,
        "engine": spec["engine"],
        "spec_hash": spec_hash,
        "spec": spec,
        "client_version": CLIENT_VERSION,
        "attempt": attempt,
        "status": "ok",
        "failure": None,
        "command": [],
        "command_str": "",
        "env": env,
        "host": spec["server"]["host"],
        "port": 0,
        "server_pid": None,
        "boot_s": None,
        "boot_facts": {},
        "boot_attempts": [],
        "started_at": utc_now(),
        "finished_at": None,
        "teardown": None,
        "scheduler": scheduler_info(),
        "correctness": None,
        "deadline": deadline,
        "stack_manifest": stack_manifest,
        "model_manifest": model_manifest,
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
