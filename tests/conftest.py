"""Shared fixtures: the real CPU stack and a tiny synthetic model, built once per session."""

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Built stacks and models are reused across test sessions (CI builds them once).
CACHE = Path(os.environ.get("SERVESWEEP_TEST_CACHE", ROOT / ".cache" / "tests"))

TINY_MODEL = {
    "synthetic": {
        "hidden_size": 64,
        "num_layers": 2,
        "num_experts": 4,
        "experts_per_token": 2,
        "vocab_size": 2048,
        "seed": 7,
    }
}


@pytest.fixture(scope="session")
def cpu_stack() -> dict:
    """The real `cpu` stack (torch CPU + transformers[serving]) built by setup_stack from
    envs/cpu.txt, or the interpreter named by SERVESWEEP_TEST_STACK_PYTHON."""
    from servesweep.stacks import setup_stack

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
    from servesweep.models import materialize

    dest = CACHE / "tiny-model"
    manifest = dest / "manifest.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if data.get("source") == TINY_MODEL:
            return data
    return materialize("tiny", TINY_MODEL, dest)


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    """Real Snakemake on this repository's workflow, run in `workdir`. Targets must come
    before `--configfile`, which takes every argument after it."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        *args,
    ]


def run_snakemake(workdir: Path, *args: str, timeout: int = 900):
    import subprocess

    return subprocess.run(
        snakemake_cmd(workdir, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workdir,
    )
