"""Which sweep is in force: the user's file replaces the default, it never extends it.

Snakemake merges a `--configfile` key by key into a Snakefile's `configfile:`, so with the
default sweep declared there every user sweep would inherit its stacks, models, variants and
even a baseline's flags. The Snakefile therefore declares no `configfile:`; the workflow asks
`sweep_in_force` instead:

- one or more `--configfile` (on the command line or in a profile): exactly those files, merged
  with each other in order, then `--config key=value` on top;
- no `--configfile`: the default sweep (`config/config.yaml` of the working directory, or the
  one shipped beside the Snakefile), with `--config key=value` merged on top.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import NamedTuple

import yaml

from servesweep.sweep.config import read_sweep

DEFAULT_SWEEP = Path("config") / "config.yaml"


class SweepInForce(NamedTuple):
    config: dict  # the whole configuration the workflow runs
    files: list[str]  # the sweep files it came from, in merge order
    is_default: bool  # no --configfile was given


def merge_overrides(base: dict, overrides: dict) -> dict:
    """`overrides` merged into a copy of `base`, mappings recursively (as Snakemake merges
    `--config` into a config file); any other value replaces the base's."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overrides(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def default_sweep_path(workdir: Path, workflow_dir: Path) -> Path:
    """The working directory's config/config.yaml, else the one beside the Snakefile."""
    local = Path(workdir) / DEFAULT_SWEEP
    return local if local.is_file() else Path(workflow_dir) / DEFAULT_SWEEP


def typed(value):
    """--config values as YAML means them. Snakemake reads a nested value such as
    `benchmark={levels: [1, 2]}` with YAML's base loader, which leaves every scalar a
    string ('2'); its top-level values it already converts."""
    if isinstance(value, dict):
        return {key: typed(v) for key, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if not isinstance(parsed, dict | list) else value
    return value


def sweep_in_force(configfiles, overrides, workdir: Path, workflow_dir: Path) -> SweepInForce:
    """The configuration to run: the given sweep files (or the default), merged in order,
    then the `--config` values on top."""
    files = [Path(f) for f in configfiles or ()]
    is_default = not files
    if is_default:
        files = [default_sweep_path(workdir, workflow_dir)]
    config: dict = {}
    for path in files:
        config = merge_overrides(config, read_sweep(path))
    top = {key: typed(value) for key, value in dict(overrides or {}).items()}
    return SweepInForce(merge_overrides(config, top), [str(f) for f in files], is_default)
