"""Whether a finished boot still stands, decided from its own record, not from file times
or Snakemake's metadata (neither travels with a copied `results/`).

A boot's cell.json copies the stack and model manifests it was measured on. It stands
while each resource it used has the same identity now (servesweep.resources.identity):
the same sweep-file entry, and, once the resource is built here, the same content. Then
its `run_cell` job takes the manifests as `ancient()` inputs, which Snakemake neither
compares by time nor reruns for when their setup job runs again, as long as they exist;
while a manifest is missing (a fresh clone, `resources/` not built yet) the boot takes no
input for it at all, since Snakemake would rerun every job downstream of a job it must
run. A boot that does not stand takes the manifests as ordinary inputs: its setup job
running again, or a manifest rebuilt after it, reruns it (and the plan says why).
"""

from __future__ import annotations

from typing import NamedTuple

from servesweep.jsonfile import read_json
from servesweep.records import CellRead
from servesweep.resources.identity import SPEC_CHANGED, changes, spec_identity
from servesweep.sweep.config import Sweep, next_attempt, spec_hash
from servesweep.sweep.layout import Paths


class Standing(NamedTuple):
    """A boot against the resources in force."""

    measured: bool  # its cell.json exists
    changed: list[str]  # why it no longer stands for its resources, in words
    setup_failed: bool  # it recorded a failed setup (set up again each invocation)
    missing: list[str]  # "stack" / "model": manifests not built here yet
    respec: bool = False  # a resource's sweep-file entry changed: its setup runs again

    @property
    def stands(self) -> bool:
        return self.measured and not self.changed and not self.setup_failed


def standing(
    record: dict | None,
    manifests: dict[str, dict | None],
    specs: dict[str, str],
    names: dict[str, str],
) -> Standing:
    """`manifests`, `specs` and `names` by kind (`stack`, `model`): the manifest in force
    (None before it is built), the spec identity of the sweep file's entry, its name."""
    missing = [kind for kind in ("stack", "model") if manifests.get(kind) is None]
    if record is None:
        return Standing(False, [], False, missing)
    cell = CellRead.of(record)
    recorded = {"stack": cell.stack_manifest, "model": cell.model_manifest}
    failed = any((recorded[kind] or {}).get("status") == "failed" for kind in recorded)
    changed, respec = [], False
    for kind in ("stack", "model"):
        why = changes(recorded[kind], manifests.get(kind), specs.get(kind))
        if why:
            changed.append(f"{kind} {names[kind]} changed: {why}")
            respec |= why == SPEC_CHANGED
    return Standing(True, changed, failed, missing, respec)


def cell_standing(sweep: Sweep, paths: Paths, stack: str, model: str, variant: str, repeat: int):
    """`standing` of one boot of the sweep, read from its files; a boot whose spec changed
    or that is retried (its attempt moved on) does not stand either."""
    path = paths.cell_json(stack, model, variant, repeat)
    record = read_json(path)
    now = standing(
        record,
        {
            "stack": read_json(paths.stack_manifest(stack)),
            "model": read_json(paths.model_manifest(model)),
        },
        {"stack": spec_identity(sweep.stacks[stack]), "model": spec_identity(sweep.models[model])},
        {"stack": stack, "model": model},
    )
    if record is not None:
        cell = CellRead.of(record)
        if cell.spec_hash != spec_hash(sweep.spec(stack, model, variant)):
            now.changed.append("its spec changed")
        elif int(cell.attempt or 0) != next_attempt(path, sweep.retries):
            now.changed.append("retried")
    return now


def cell_inputs(sweep: Sweep, paths: Paths, stack: str, model: str, variant: str, repeat: int):
    """run_cell's inputs: {name: (path, ancient)}; see the module's docstring."""
    now = cell_standing(sweep, paths, stack, model, variant, repeat)
    files = {
        "stack": str(paths.stack_manifest(stack)),
        "model": str(paths.model_manifest(model)),
    }
    if not now.stands:
        return {kind: (path, False) for kind, path in files.items()}
    return {kind: (path, True) for kind, path in files.items() if kind not in now.missing}
