"""Software stacks: build (or adopt) the environment a server runs in, and describe it.

Kinds: `venv` (built from a requirements file, uv when present else pip) and `existing`
(a given interpreter, e.g. a box's /root/ml-env/bin/python3). The manifest is written
from inside the stack's own interpreter.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROBE = Path(__file__).with_name("stack_probe.py")


class StackError(Exception):
    """The stack could not be built or probed; one line naming the stack."""


def _run_logged(cmd: list[str], log, env: dict | None = None) -> None:
    """Run a command, streaming its output to `log` line by line (build progress)."""
    log(f"$ {' '.join(cmd)}")
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        log(f"[{time.monotonic() - start:6.1f}s] {line}")
    if proc.wait() != 0:
        last = next((t for t in reversed(tail) if t.strip()), "")
        raise StackError(f"`{cmd[0]} ...` failed with exit code {proc.returncode}: {last}")


def _installer(choice: str) -> str:
    if choice == "auto":
        return "uv" if shutil.which("uv") else "pip"
    if choice == "uv" and not shutil.which("uv"):
        raise StackError("installer 'uv' requested but uv is not on PATH")
    return choice


def build_venv(name: str, stack: dict, dest: Path, log=print) -> tuple[Path, str]:
    """Create dest/venv from the stack's requirements file; return (python, installer)."""
    requirements = Path(stack["requirements"])
    if not requirements.is_file():
        raise StackError(f"stack {name!r}: requirements file {requirements} not found")
    venv = dest / "venv"
    if venv.exists():
        shutil.rmtree(venv)  # a requirements change means a clean rebuild
    base = stack.get("python", sys.executable)
    installer = _installer(stack.get("installer", "auto"))
    extra = list(stack.get("pip_args", []))
    python = venv / "bin" / "python"
    if installer == "uv":
        _run_logged(["uv", "venv", "--python", base, str(venv)], log)
        # uv does not read pip's config: carry its local wheel folders over.
        links = os.environ.get("PIP_FIND_LINKS", "").split()
        for link in links:
            extra += ["--find-links", link]
        _run_logged(
            ["uv", "pip", "install", "--python", str(python), "-r", str(requirements), *extra], log
        )
    else:
        _run_logged([base, "-m", "venv", str(venv)], log)
        _run_logged(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--progress-bar",
                "off",
                "-r",
                str(requirements),
                *extra,
            ],
            log,
        )
    return python, installer


def probe(python: str | Path) -> dict:
    """Facts about an interpreter, gathered by running it."""
    try:
        out = subprocess.run([str(python), str(PROBE)], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"cannot run {python}: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise StackError(f"probing {python} failed: {last}")
    return json.loads(out.stdout)


def setup_stack(name: str, stack: dict, dest: Path, log=print) -> dict:
    """Build or adopt the stack, then write dest/manifest.json (last, atomically)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    installer = None
    if stack["kind"] == "venv":
        python, installer = build_venv(name, stack, dest, log)
    elif stack["kind"] == "existing":
        python = Path(stack["python"])
        if not os.access(python, os.X_OK):
            raise StackError(f"stack {name!r}: python {python} is not an executable file")
    else:
        raise StackError(f"stack {name!r}: unknown kind {stack['kind']!r}")
    log(f"probing {python}")
    facts = probe(python)
    # The interpreter path exactly as used (a venv's bin/python, not its resolved target).
    facts["python"] = str(Path(python).absolute())
    manifest = {
        "stack": name,
        "kind": stack["kind"],
        **facts,
        "installer": installer,
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "build_s": round(time.monotonic() - start, 1),
    }
    tmp = dest / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(dest / "manifest.json")
    log(
        f"stack {name!r} ready in {manifest['build_s']} s: python {manifest['python_version']}, "
        f"torch {manifest['torch']}, transformers {manifest['transformers']}"
    )
    return manifest
