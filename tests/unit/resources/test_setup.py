"""A failed setup is a result: the manifest it leaves, the attempt that retries it, and the
failed cell it becomes (no Snakemake here; tests/workflow/test_setup_failures.py runs it)."""

import json
import sys

import pytest

from servesweep.resources.models import ModelSourceError, materialize
from servesweep.resources.setup import (
    ATTEMPT_KEY,
    SETUP_CAUSES,
    SetupError,
    next_setup_attempt,
    run_setup,
    setup_failure,
    setup_params,
    split_params,
)
from servesweep.resources.stacks import StackError, setup_stack
from servesweep.run.cell import run_cell
from servesweep.sweep.config import load


def failing(cause):
    def build():
        raise StackError("stack 'x': `pip ...` failed with exit code 1: no", cause)

    return build


def test_a_failed_build_writes_a_failed_manifest_with_its_log_tail(tmp_path):
    log = tmp_path / "setup.log"
    log.write_text("".join(f"line {i}\n" for i in range(80)) + "ERROR: no such file\n")
    identity = {"stack": "x", "kind": "venv"}
    manifest = run_setup(
        "stack", "x", failing("install_failed"), tmp_path, log, 2, identity, log=lambda m: None
    )
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == manifest
    assert (manifest["stack"], manifest["kind"], manifest["status"]) == ("x", "venv", "failed")
    assert manifest["attempt"] == 2 and manifest["build_s"] >= 0
    failure = manifest["failure"]
    assert (failure["stage"], failure["cause"]) == ("stack", "install_failed")
    assert failure["log_tail"][-1] == "ERROR: no such file" and len(failure["log_tail"]) == 50


def test_a_good_build_is_marked_ok_with_its_attempt(tmp_path):
    def build():
        return {"model": "m", "path": "/x"}

    manifest = run_setup("model", "m", build, tmp_path, tmp_path / "log", 1)
    assert manifest == {"model": "m", "path": "/x", "status": "ok", "attempt": 1}
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest


def test_an_unexpected_error_is_not_swallowed(tmp_path):
    # A bug is a broken job (non-zero exit), not a recorded result.
    def build():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_setup("stack", "x", build, tmp_path, tmp_path / "log")
    assert not (tmp_path / "manifest.json").exists()


def test_an_unknown_cause_is_recorded_as_unknown():
    assert SetupError("x", "no-such-cause").cause == "unknown"
    assert ModelSourceError("x").cause == "bad_source"
    assert "unknown" in SETUP_CAUSES


@pytest.mark.parametrize(
    "manifest, attempt",
    [
        (None, 0),
        ({"status": "ok"}, 0),  # a manifest from before setups were results
        ({"status": "ok", "attempt": 3}, 3),
        ({"status": "failed", "attempt": 0}, 1),
        ({"status": "failed", "attempt": 4}, 5),
    ],
)
def test_a_failed_setup_moves_its_attempt_on_and_a_good_one_keeps_it(tmp_path, manifest, attempt):
    path = tmp_path / "manifest.json"
    if manifest is not None:
        path.write_text(json.dumps(manifest))
    assert next_setup_attempt(path) == attempt


def test_the_params_are_the_config_until_a_setup_failed(tmp_path):
    path = tmp_path / "manifest.json"
    config = {"kind": "venv", "requirements": "r.txt"}
    # No manifest yet, or a good one: exactly the config (as the rule's param always was, so
    # no stack set up before this change is set up again).
    assert repr(setup_params(config, path)) == repr(config)
    path.write_text(json.dumps({"status": "ok"}))
    assert setup_params(config, path) == config
    path.write_text(json.dumps({"status": "failed", "attempt": 0}))
    params = setup_params(config, path)
    assert params == {**config, ATTEMPT_KEY: 1}
    assert split_params(params) == (config, 1)
    assert split_params(config) == (config, 0)


def test_a_cell_inherits_its_setups_failure_stack_first():
    stack = {"stack": "s", "status": "failed", "failure": {"cause": "install_failed"}}
    stack["failure"] |= {"message": "pip failed", "log_tail": ["ERROR"]}
    model = {"model": "m", "status": "failed", "failure": {"cause": "path_missing"}}
    assert setup_failure({"stack": "s", "status": "ok"}, {"model": "m"}) is None
    assert setup_failure(None, None) is None
    one = setup_failure(stack, {"model": "m", "status": "ok"})
    assert one == {
        "stage": "stack",
        "cause": "install_failed",
        "message": "stack 's' could not be set up: pip failed",
        "log_tail": ["ERROR"],
    }
    both = setup_failure(stack, model)
    assert both["stage"] == "stack" and both["message"].endswith("; model 'm' failed too")
    only_model = setup_failure({"stack": "s"}, model)
    assert (only_model["stage"], only_model["cause"]) == ("model", "path_missing")


def test_causes_of_real_setup_errors(tmp_path):
    with pytest.raises(StackError) as missing:
        setup_stack("box", {"kind": "existing", "python": str(tmp_path / "nope")}, tmp_path)
    assert missing.value.cause == "interpreter_missing"
    with pytest.raises(StackError) as spec:
        setup_stack("v", {"kind": "venv", "requirements": str(tmp_path / "r.txt")}, tmp_path)
    assert spec.value.cause == "spec_missing"
    with pytest.raises(ModelSourceError) as path:
        materialize("m", {"path": str(tmp_path / "weights")}, tmp_path / "m")
    assert path.value.cause == "path_missing"
    with pytest.raises(ModelSourceError) as source:
        materialize("m", {"hf": "org/name"}, tmp_path / "m")  # no revision
    assert source.value.cause == "bad_source"


@pytest.mark.parametrize(
    "stack",
    [
        {"kind": "container", "image": "example/image:1", "runtime": "docker"},
        {"kind": "conda", "env_file": "env.yaml"},
        {"kind": "venv", "requirements": "r.txt", "installer": "uv"},
    ],
)
def test_a_missing_tool_is_a_cause(tmp_path, monkeypatch, stack):
    (tmp_path / "env.yaml").write_text("dependencies: [python]\n")
    (tmp_path / "r.txt").write_text("\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no docker, conda or uv
    with pytest.raises(StackError) as failed:
        setup_stack("s", stack, tmp_path / "s")
    assert failed.value.cause == "tool_missing"


def test_a_cell_of_a_failed_stack_is_a_failed_result_without_a_launch(tmp_path):
    config = {
        "stacks": {"s": {"kind": "existing", "python": sys.executable}},
        "models": {"m": {"path": "unused"}},
        "engine": "command",
        "variants": {"baseline": {"command": "{python} -c pass --port {port}"}},
        "benchmark": {"levels": [1, 4], "repeats_in_boot": 2},
    }
    spec = load(config).spec("s", "m", "baseline")
    stack = {"stack": "s", "kind": "existing", "status": "failed", "attempt": 0}
    stack["failure"] = {"stage": "stack", "cause": "interpreter_missing", "message": "gone"}
    stack["failure"]["log_tail"] = ["no python"]
    lines: list[str] = []
    out = tmp_path / "cell"
    cell = run_cell(
        spec, stack, {"model": "m"}, out, out / "server.log", log=lines.append, repeat=1
    )
    assert json.loads((out / "cell.json").read_text()) == cell
    assert cell["status"] == "failed" and cell["server_pid"] is None and cell["command"] == []
    assert cell["failure"] == {
        "stage": "stack",
        "cause": "interpreter_missing",
        "message": "stack 's' could not be set up: gone",
        "log_tail": ["no python"],
        "level": None,
        "repeat": 1,
    }
    assert [(lv["level"], lv["in_boot"], lv["status"]) for lv in cell["levels"]] == [
        (1, 0, "not_run"),
        (1, 1, "not_run"),
        (4, 0, "not_run"),
        (4, 1, "not_run"),
    ]
    assert cell["correctness"] == {"status": "skipped", "why": "the stack failed"}
    assert json.loads((out / "correctness.json").read_text())["status"] == "skipped"
    assert (out / "levels").is_dir() and not list((out / "levels").iterdir())
    assert any("FAILED at stack" in line for line in lines)
