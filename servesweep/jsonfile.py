"""Writing records: JSON files replaced atomically, and the one UTC timestamp format."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path


def utc_now() -> str:
    """The current time as ISO 8601 UTC to the second: every record's timestamps."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_json(path: Path, data, indent: int | None = 2) -> None:
    """Write `data` as JSON to `path` through a temporary file beside it, so a reader (or a
    crash) never sees half a record. Values JSON does not know are written as strings."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=indent, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
