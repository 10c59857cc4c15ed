"""The sweep file's JSON schema (servesweep/sweep/schemas/config.schema.yaml): read once, and
the defaults of its sections, for the config loader and the typed sections alike."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.yaml"


@cache
def schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def section_defaults(*path: str) -> dict:
    """The schema's defaults of a section's keys (those that have one): a top-level section
    (`analysis`), or one inside it (`benchmark`, `search`)."""
    node = schema()
    for section in path:
        node = node["properties"][section]
    keys = node["properties"]
    return {key: value["default"] for key, value in keys.items() if "default" in value}
