"""Whether a finished boot stands for its resources, and the inputs run_cell takes for
it: decided from the records, not from file times or Snakemake's metadata."""

import json

from servesweep.resources.identity import identity
from servesweep.sweep.config import load, spec_hash
from servesweep.sweep.layout import Paths
from servesweep.sweep.resume import cell_inputs, cell_standing

CONFIG = {
    "stacks": {"box": {"kind": "existing", "python": "/opt/env/bin/python3"}},
    "models": {"m": {"path": "/shared/m"}},
    "engine": "vllm",
    "variants": {"baseline": {"flags": {}}},
    "benchmark": {"levels": [1], "warmup": 0},
}
STACK = {"stack": "box", "kind": "existing", "status": "ok", "torch": "2.5.1", "python": "/x"}
MODEL = {"model": "m", "status": "ok", "path": "/shared/m", "files": []}


def setup(tmp_path, stack=STACK, model=MODEL, built=True, recorded_stack=None):
    sweep = load(json.loads(json.dumps(CONFIG)))
    paths = Paths(tmp_path)
    stack = {**stack, "identity": identity(sweep.stacks["box"], stack)}
    model = {**model, "identity": identity(sweep.models["m"], model)}
    spec = sweep.spec("box", "m", "baseline")
    cell = {
        "stack": "box",
        "model": "m",
        "variant": "baseline",
        "spec_hash": spec_hash(spec),
        "attempt": 0,
        "status": "ok",
        "stack_manifest": recorded_stack or stack,
        "model_manifest": model,
    }
    path = paths.cell_json("box", "m", "baseline", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cell))
    if built:
        for file, data in (
            (paths.stack_manifest("box"), stack),
            (paths.model_manifest("m"), model),
        ):
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(json.dumps({**data, "python": "/rebuilt/elsewhere"}))
    return sweep, paths


def inputs(sweep, paths, repeat=0):
    return cell_inputs(sweep, paths, "box", "m", "baseline", repeat)


def test_a_boot_on_the_same_resources_takes_them_as_ancient_inputs(tmp_path):
    sweep, paths = setup(tmp_path)
    assert cell_standing(sweep, paths, "box", "m", "baseline", 0).stands
    assert inputs(sweep, paths) == {
        "stack": (str(paths.stack_manifest("box")), True),
        "model": (str(paths.model_manifest("m")), True),
    }


def test_before_the_resources_are_built_a_standing_boot_takes_no_input(tmp_path):
    # A fresh clone: Snakemake would rerun it for its setup jobs running.
    sweep, paths = setup(tmp_path, built=False)
    assert inputs(sweep, paths) == {}
    # A boot not measured yet waits for them.
    assert {k: old for k, (_, old) in inputs(sweep, paths, repeat=1).items()} == {
        "stack": False,
        "model": False,
    }


def test_a_boot_on_another_stack_version_is_stale_and_says_why(tmp_path):
    sweep, paths = setup(tmp_path, recorded_stack={**STACK, "torch": "2.4.0"})
    now = cell_standing(sweep, paths, "box", "m", "baseline", 0)
    assert not now.stands
    assert now.changed == ["stack box changed: torch 2.4.0 → 2.5.1"]
    assert all(not old for _, old in inputs(sweep, paths).values())


def test_a_boot_of_a_failed_setup_follows_its_setup(tmp_path):
    failed = {"stack": "box", "kind": "existing", "status": "failed", "attempt": 0}
    sweep, paths = setup(tmp_path, recorded_stack=failed)
    assert not cell_standing(sweep, paths, "box", "m", "baseline", 0).stands
    assert all(not old for _, old in inputs(sweep, paths).values())


def test_a_changed_spec_does_not_stand(tmp_path):
    sweep, paths = setup(tmp_path)
    config = json.loads(json.dumps(CONFIG))
    config["variants"]["baseline"]["flags"] = {"x": 1}
    now = cell_standing(load(config), paths, "box", "m", "baseline", 0)
    assert now.changed == ["its spec changed"]
