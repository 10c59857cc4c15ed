"""Where benchmarks leave their numbers: one JSON file each under benchmarks/results/, with
the date, the commit and the machine, so docs cite a file instead of typing numbers in."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path

from benchmarks.support import RESULTS, ROOT


def commit() -> str | None:
    """The checkout's commit, with `+dirty` when it has uncommitted changes; on a copy without
    git (the lent GPU machine), SERVESWEEP_COMMIT as the caller set it."""
    if os.environ.get("SERVESWEEP_COMMIT"):
        return os.environ["SERVESWEEP_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return None
    return (head + ("+dirty" if dirty else "")) or None


def write_result(name: str, data: dict, out: Path | None = None) -> Path:
    """Write benchmarks/results/<name>.json (or `out`) and return its path."""
    path = Path(out) if out else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        **data,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
