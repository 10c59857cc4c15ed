"""The sweep file's JSON schema (servesweep/sweep/schemas/config.schema.yaml): read once, and
the defaults of its sections, for the config loader and the typed sections alike."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
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


def _fill_defaults(
    validator: Any, properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    # Set a missing property to its schema default (a copy: a mutable default shared by
    # every config would leak between them), then validate as usual, which descends into
    # what was just set and fills its own defaults, and into an `if`'s `then` or `else`
    # (a default that depends on another key: `benchmark.workload.output_tokens`).
    if isinstance(instance, dict):
        for name, subschema in properties.items():
            if "default" in subschema and name not in instance:
                instance[name] = copy.deepcopy(subschema["default"])
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](
        validator, properties, instance, schema
    )


_DefaultFiller = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"properties": _fill_defaults}
)


def filled(value: Any, *path: str) -> Any:
    """A copy of `value` with the schema's defaults filled in, as `snakemake.utils.validate`
    fills them: the whole config (no path), or one section of it (`benchmark`,
    `workload`). Errors are not reported: the config has been validated already."""
    root = node = schema()
    for section in path:
        node = node["properties"][section]
    # A section's `$ref`s ("#/$defs/...") resolve against the document they sit in: give
    # the section the root's definitions, so any section fills as the whole config does.
    node = {**node, "$defs": root.get("$defs", {})}
    out = copy.deepcopy(value)
    for _ in _DefaultFiller(node).iter_errors(out):
        pass
    return out
