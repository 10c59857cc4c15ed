# Config validation and the input functions of every rule. Logic lives in the
# servesweep package; this file only connects it to Snakemake.
import functools
import re
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)

from servesweep.resources.setup import setup_params
from servesweep.results.judge import stages
from servesweep.sweep.config import (
    ConfigError,
    load,
    next_attempt,
    spec_json,
)
from servesweep.sweep.schema import SCHEMA_PATH
from servesweep.sweep.layout import Paths
from servesweep.sweep import resume
from servesweep.sweep.plan import state_digest
from servesweep.sweep.sweep_file import sweep_in_force

# A --configfile replaces the default sweep instead of being merged into it; --config
# key=value applies on top of whichever file is in force.
try:
    IN_FORCE = sweep_in_force(
        workflow.overwrite_configfiles,
        workflow.config_settings.config,
        Path.cwd(),
        Path(workflow.basedir),
    )
    config.clear()
    config.update(IN_FORCE.config)
    # Our own check first: it names the key in one line. Snakemake's validate then
    # agrees (same draft 2020-12 schema) and fills the schema's defaults.
    SWEEP = load(config)
except ConfigError as error:
    raise WorkflowError(str(error)) from None
validate(config, schema=str(SCHEMA_PATH))
# Relative paths, as the rules write them.
PATHS = Paths(Path("."))


wildcard_constraints:
    stack="|".join(map(re.escape, SWEEP.stacks)),
    model="|".join(map(re.escape, SWEEP.models)),
    # A hunt's arms are composed variants (start+cand1+cand2): matched by their pattern.
    variant="|".join(
        [*map(re.escape, SWEEP.variants)]
        + ([SWEEP.hunt.variant_pattern()] if SWEEP.hunt else [])
    ),
    repeat=r"\d+",
    step=r"\d+",


@functools.cache
def setup_params_for(kind, name):
    # The stack's (model's) config, with the attempt once a setup failed: a failed setup
    # runs again next time. Read once per run, while planning (as cell_attempt_for).
    if kind == "stack":
        return setup_params(SWEEP.stacks[name], PATHS.stack_manifest(name))
    return setup_params(SWEEP.models[name], PATHS.model_manifest(name))


def stack_config(wildcards):
    return setup_params_for("stack", wildcards.stack)


def stack_requirements(wildcards):
    # The spec file a stack is built from: editing it rebuilds the stack.
    stack = SWEEP.stacks[wildcards.stack]
    return [stack[key] for key in ("requirements", "env_file") if key in stack]


def model_source(wildcards):
    return setup_params_for("model", wildcards.model)


def cell_spec(wildcards):
    # Canonical JSON: Snakemake's params trigger reruns exactly the cells whose
    # resolved spec changed.
    return spec_json(SWEEP.spec(wildcards.stack, wildcards.model, wildcards.variant))


@functools.cache
def cell_attempt_for(path):
    # Read once per run, while planning: Snakemake deletes a job's outputs before it
    # runs, and may evaluate params again then.
    return next_attempt(path, SWEEP.retries)


def cell_attempt(wildcards):
    # Moves on only for a failed boot that config.retries allows to rerun.
    return cell_attempt_for(
        PATHS.cell_json(
            wildcards.stack, wildcards.model, wildcards.variant, int(wildcards.repeat)
        )
    )


def cell_inputs(wildcards):
    # A finished boot that stands for its resources (same identity) is not rerun because
    # they were rebuilt: servesweep/sweep/resume.py.
    inputs = resume.cell_inputs(
        SWEEP,
        PATHS,
        wildcards.stack,
        wildcards.model,
        wildcards.variant,
        int(wildcards.repeat),
    )
    return {
        name: ancient(path) if old else path for name, (path, old) in inputs.items()
    }


def cell_gpus(wildcards):
    return SWEEP.gpus(wildcards.variant)


JOB_ORDER = {job: i for i, job in enumerate(SWEEP.jobs)}


def job_priority(wildcards):
    # Earlier in SWEEP.jobs = higher priority: every cell's first boot, then the second…
    # (a later stage's boots: the earlier boot index first, so the stage interleaves).
    key = (wildcards.stack, wildcards.model, wildcards.variant, int(wildcards.repeat))
    return len(JOB_ORDER) - JOB_ORDER.get(key, len(JOB_ORDER) + int(wildcards.repeat))


def all_cells(wildcards=None):
    # A hunt's cells are the boots its steps measured (known once it is done).
    if SWEEP.hunt:
        return hunt_run_steps().observed_cells(SWEEP, PATHS, hunt_steps(wildcards)[-1])
    if SWEEP.repeats_rule.staged:
        return stages.measured_cells(PATHS, stage_steps(wildcards)[-1])
    return [str(PATHS.cell_json(*job)) for job in SWEEP.jobs]


def stage_params(wildcards):
    return stages.stage_params(SWEEP)


def stage_inputs(wildcards):
    # Step s: step s-1 and the boots it asked for (servesweep/results/judge/stages.py).
    # Step 0 is known from the sweep alone: a dry run shows the first stage's cells.
    step = int(wildcards.step)
    if step == 0:
        return {}
    if step == 1:
        return {
            "previous": stages.STAGE_JSON.format(step=0),
            "cells": stages.first_cells(SWEEP, PATHS),
        }
    previous = checkpoints.repeats_stage.get(step=step - 1).output[0]
    return {"previous": previous, "cells": stages.next_cells(PATHS, previous)}


def stage_steps(wildcards=None):
    # Every step up to the first that is done (each found once Snakemake has made it).
    steps = [stages.STAGE_JSON.format(step=0)]
    while True:
        steps.append(checkpoints.repeats_stage.get(step=len(steps)).output[0])
        if stages.step_done(steps[-1]):
            return steps


def stage_record(wildcards):
    # collect's verdicts say at which look each variant was decided.
    return [stage_steps(wildcards)[-1]] if SWEEP.repeats_rule.staged else []


@functools.cache
def hunt_run_steps():
    # Imported for a hunt only: it brings scipy and pandas (~1 s of every parse).
    from servesweep.hunt_run import steps

    return steps


def hunt_record(wildcards):
    return [hunt_run_steps().HUNT_JSON] if SWEEP.hunt else []


def hunt_params(wildcards):
    return hunt_run_steps().hunt_params(SWEEP)


def hunt_step_inputs(wildcards):
    # Step s: step s-1 and the boots it asked for (docs/hunt.md, servesweep/hunt_run/steps.py).
    # Step 0 (nothing measured) is known from the spec alone: a dry run shows round 1's cells.
    step = int(wildcards.step)
    if step == 0:
        return {}
    if step == 1:
        return {
            "previous": hunt_run_steps().STEP_JSON.format(step=0),
            "cells": hunt_run_steps().first_cells(SWEEP, PATHS),
        }
    previous = checkpoints.hunt_step.get(step=step - 1).output[0]
    return {
        "previous": previous,
        "cells": hunt_run_steps().needed_cells(SWEEP, PATHS, previous),
    }


def hunt_steps(wildcards):
    # Every step up to the first that is done (each found once Snakemake has made it).
    steps = [hunt_run_steps().STEP_JSON.format(step=0)]
    while True:
        steps.append(checkpoints.hunt_step.get(step=len(steps)).output[0])
        if hunt_run_steps().step_done(steps[-1]):
            return steps


def plan_state(wildcards):
    return state_digest(SWEEP, PATHS)
