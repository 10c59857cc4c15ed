"""Shared fixtures: the real CPU stack and a tiny synthetic model, built once per session."""

import json
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

import pytest
from fixtures.browser import close_browser
from fixtures.configs import TINY_MODEL
from fixtures.engine_sweep import EngineSweep, run_engine_sweep
from fixtures.paths import ROOT

sys.path.insert(0, str(ROOT))

# Ctrl-C as a terminal sends it: a suite started in the background (`cmd &` in a script,
# some CI runners) inherits SIGINT ignored, and so would every Snakemake and server it
# starts, so the tests that interrupt a run with SIGINT would test nothing (seen: a hunt
# that ran on through its "Ctrl-C"). A handler here is reset to the default in each child.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Built stacks and models are reused across test sessions (CI builds them once).
CACHE = Path(os.environ.get("SERVESWEEP_TEST_CACHE", ROOT / ".cache" / "tests"))


@pytest.fixture(scope="session", autouse=True)
def slurm_controller_answers():
    """Where Slurm's commands are installed, the SLURM executor plugin asks `scontrol show
    config` each time Snakemake starts, and waits 10 s for a controller that is not
    running: every workflow test would pay that. So the one-node local cluster
    (tests/cluster) runs for the whole session where it can (root, Slurm installed), and
    is stopped at the end if this session started it."""
    if not shutil.which("scontrol"):
        yield
        return
    sys.path.insert(0, str(ROOT / "tests" / "cluster"))
    import localslurm

    was_up = localslurm.is_up()
    started = False
    if not was_up:
        try:
            localslurm.up()
            started = True
        except Exception as error:  # not root, a daemon that would not start, ...
            warnings.warn(
                f"Slurm is installed but its controller is down ({error}): every Snakemake "
                "start waits 10 s for it",
                stacklevel=1,
            )
    yield
    if started:
        localslurm.down()


@pytest.fixture(scope="session", autouse=True)
def shared_browser_closed():
    """The Chromium that tests/fixtures/browser.py keeps for the session's reports, closed
    at its end."""
    yield
    close_browser()


@pytest.fixture(scope="session")
def cpu_stack() -> dict:
    """The real `cpu` stack (torch CPU + transformers[serving]) built by setup_stack from
    envs/cpu.txt, or the interpreter named by SERVESWEEP_TEST_STACK_PYTHON."""
    from servesweep.resources.stacks import setup_stack

    given = os.environ.get("SERVESWEEP_TEST_STACK_PYTHON")
    if given:
        return setup_stack("cpu", {"kind": "existing", "python": given}, CACHE / "given-stack")
    dest = CACHE / "cpu-stack"
    requirements = ROOT / "envs" / "cpu.txt"
    stamp = dest / "requirements.txt"
    manifest = dest / "manifest.json"
    if manifest.exists() and stamp.exists() and stamp.read_text() == requirements.read_text():
        return json.loads(manifest.read_text())
    result = setup_stack(
        "cpu", {"kind": "venv", "requirements": str(requirements)}, dest, log=lambda msg: None
    )
    stamp.write_text(requirements.read_text())
    return result


@pytest.fixture(scope="session")
def tiny_model() -> dict:
    from servesweep.resources.models import materialize

    dest = CACHE / "tiny-model"
    manifest = dest / "manifest.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if data.get("source") == TINY_MODEL:
            return data
    return materialize("tiny", TINY_MODEL, dest)


@pytest.fixture(scope="session")
def engine_sweep(tmp_path_factory, cpu_stack) -> EngineSweep:
    """The real `transformers serve` sweep (tests/fixtures/engine_sweep.py), run through real
    Snakemake once for every test that reads it: each boot of a real engine costs seconds
    to minutes on 2 cores."""
    return run_engine_sweep(tmp_path_factory.mktemp("engine-sweep"), cpu_stack["python"])
