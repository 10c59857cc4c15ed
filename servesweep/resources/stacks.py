"""Software stacks: build (or adopt) the environment a server runs in, and describe it.

Kinds:
- `venv`: built from a requirements file (uv when present, else pip);
- `conda`: built from an environment file (mamba, micromamba or conda, whichever is there);
- `container`: an image run by docker or apptainer. Its "python" is a small wrapper script
  under the stack's directory that runs `python` inside the image, so engines launch it
  like any interpreter and the manifest probe runs through it;
- `existing`: a given interpreter (or environment prefix), e.g. a box's /root/ml-env.

The manifest is always written from inside the stack: `stack_probe.py` is run by the
stack's own interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from servesweep.jsonfile import utc_now, write_json
from servesweep.resources.stack_builders import (
    PACKAGE_DIR,
    PROBE,
    StackError,
    build_conda,
    build_container,
    build_venv,
    file_sha256,
)
from servesweep.server.engines import ENGINES, probed_packages

__all__ = ["PACKAGE_DIR", "PROBE", "StackError", "setup_stack", "stack_python"]


# -- existing --------------------------------------------------------------------------


def existing_python(name: str, stack: dict) -> Path:
    """The given interpreter, or bin/python3 (bin/python) of a given environment prefix."""
    given = Path(stack["python"])
    if given.is_dir():
        for candidate in (given / "bin" / "python3", given / "bin" / "python"):
            if os.access(candidate, os.X_OK):
                return candidate
        raise StackError(
            f"stack {name!r}: prefix {given} has no bin/python3 or bin/python",
            "interpreter_missing",
        )
    if not os.access(given, os.X_OK) or not given.is_file():
        raise StackError(
            f"stack {name!r}: python {given} is not an executable file", "interpreter_missing"
        )
    return given


def stack_python(name: str, stack: dict, stacks_dir: Path) -> Path:
    """Where a stack's interpreter is (or will be, once setup_env built it): what the plan
    shows before a manifest exists. The manifest's own `python` wins once it does."""
    dest = Path(stacks_dir).absolute() / name
    kind = stack["kind"]
    if kind == "venv":
        return dest / "venv" / "bin" / "python"
    if kind == "conda":
        return dest / "env" / "bin" / "python"
    if kind == "container":
        return dest / "python"
    try:
        return existing_python(name, stack).absolute()
    except StackError:
        return Path(stack["python"])  # not there (yet): shown as given


# -- probe and manifest ----------------------------------------------------------------


def probe(python: str | Path) -> dict:
    """Facts about an interpreter, gathered by running the probe with it."""
    try:
        out = subprocess.run(
            [str(python), str(PROBE), json.dumps(probed_packages())],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"cannot run {python}: {exc}", "probe_failed") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise StackError(f"probing {python} failed: {last}", "probe_failed")
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise StackError(f"probing {python} printed no JSON", "probe_failed") from None


def setup_stack(name: str, stack: dict, dest: Path, log=print) -> dict:
    """Build or adopt the stack, then write dest/manifest.json (last, atomically)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    installer = None
    extra: dict = {}
    kind = stack["kind"]
    if kind == "venv":
        python, installer = build_venv(name, stack, dest, log)
        extra = {
            "spec_file": stack["requirements"],
            "spec_sha256": file_sha256(Path(stack["requirements"])),
        }
    elif kind == "conda":
        python, installer = build_conda(name, stack, dest, log)
        env_file = Path(stack["env_file"])
        extra = {"spec_file": stack["env_file"], "spec_sha256": file_sha256(env_file)}
    elif kind == "container":
        python, extra = build_container(name, stack, dest, log)
    elif kind == "existing":
        python = existing_python(name, stack)
    else:
        raise StackError(f"stack {name!r}: unknown kind {kind!r}")
    log(f"probing {python}")
    facts = probe(python)
    if kind == "container":
        extra["python_inside"] = facts.get("python")
    # The interpreter path exactly as engines will run it (a venv's bin/python, not its
    # resolved target; a container's wrapper).
    facts["python"] = str(Path(python).absolute())
    manifest = {
        "stack": name,
        "kind": kind,
        **facts,
        **extra,
        "installer": installer,
        "built_at": utc_now(),
        "build_s": round(time.monotonic() - start, 1),
    }
    write_json(dest / "manifest.json", manifest)
    # An engine's own package is the fact named like it (sglang, vllm, transformers).
    engines = ", ".join(f"{k} {manifest[k]}" for k in ENGINES if manifest.get(k))
    log(
        f"stack {name!r} ready in {manifest['build_s']} s: python {manifest['python_version']}, "
        f"torch {manifest['torch']} (CUDA {manifest.get('torch_cuda')}), {engines or 'no engine'}"
    )
    return manifest
