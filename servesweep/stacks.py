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

import datetime as dt
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROBE = Path(__file__).with_name("stack_probe.py")
PACKAGE_DIR = Path(__file__).parent

# Conda front-ends, fastest first.
CONDA_TOOLS = ("mamba", "micromamba", "conda")

# Variables a docker container gets from the host environment (docker passes none by
# itself): engine, NCCL, CUDA and library settings a variant's `env:` may set.
CONTAINER_ENV_PREFIXES = (
    "SGLANG_",
    "VLLM_",
    "NCCL_",
    "CUDA_",
    "NVIDIA_",
    "TORCH_",
    "PYTORCH_",
    "FLASHINFER_",
    "TRITON_",
    "MSCCLPP_",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "OMP_",
    "MKL_",
    "GLOO_",
    "UCX_",
    "NVSHMEM_",
)


class StackError(Exception):
    """The stack could not be built or probed; one line naming the stack."""


def _run_logged(cmd: list[str], log, env: dict | None = None) -> None:
    """Run a command, streaming its output to `log` line by line (build progress)."""
    log(f"$ {shlex.join(cmd)}")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
    except OSError as exc:
        raise StackError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        log(f"[{time.monotonic() - start:6.1f}s] {line}")
    if proc.wait() != 0:
        last = next((t for t in reversed(tail) if t.strip()), "")
        raise StackError(f"`{cmd[0]} ...` failed with exit code {proc.returncode}: {last}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- venv ------------------------------------------------------------------------------


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
    uninstall = list(stack.get("uninstall", []))
    python = venv / "bin" / "python"
    if installer == "uv":
        _run_logged(["uv", "venv", "--python", base, str(venv)], log)
        # uv does not read pip's config: carry its local wheel folders over.
        links = os.environ.get("PIP_FIND_LINKS", "").split()
        for link in links:
            extra += ["--find-links", link]
        # pip's meaning of an --extra-index-url in a requirements file (best version
        # across all indexes), so a file pinned for pip installs the same under uv.
        extra += ["--index-strategy", "unsafe-best-match"]
        _run_logged(
            ["uv", "pip", "install", "--python", str(python), "-r", str(requirements), *extra], log
        )
        if uninstall:
            _run_logged(["uv", "pip", "uninstall", "--python", str(python), *uninstall], log)
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
        if uninstall:
            _run_logged([str(python), "-m", "pip", "uninstall", "-y", *uninstall], log)
    return python, installer


# -- conda -----------------------------------------------------------------------------


def conda_tool(name: str, choice: str = "auto") -> tuple[str, str]:
    """(tool name, its path) for building a conda stack."""
    candidates = CONDA_TOOLS if choice in (None, "auto") else (choice,)
    for tool in candidates:
        path = shutil.which(tool)
        if path:
            return tool, path
    wanted = "conda, mamba or micromamba" if len(candidates) > 1 else repr(candidates[0])
    raise StackError(f"stack {name!r}: kind conda needs {wanted} on PATH; none was found")


def conda_create_command(tool: str, path: str, prefix: Path, env_file: Path) -> list[str]:
    if tool == "micromamba":
        return [path, "create", "--yes", "--prefix", str(prefix), "--file", str(env_file)]
    # conda and mamba: `env create` reads the file's channels, dependencies and pip: list.
    return [path, "env", "create", "--prefix", str(prefix), "--file", str(env_file)]


def build_conda(name: str, stack: dict, dest: Path, log=print) -> tuple[Path, str]:
    """Create dest/env from the stack's environment file; return (python, tool)."""
    env_file = Path(stack["env_file"])
    if not env_file.is_file():
        raise StackError(f"stack {name!r}: environment file {env_file} not found")
    tool, path = conda_tool(name, stack.get("installer", "auto"))
    prefix = dest / "env"
    if prefix.exists():
        shutil.rmtree(prefix)  # an environment change means a clean rebuild
    _run_logged(conda_create_command(tool, path, prefix, env_file.absolute()), log)
    python = prefix / "bin" / "python"
    if not python.exists():
        raise StackError(
            f"stack {name!r}: {env_file} built no bin/python; add python to its dependencies"
        )
    return python, tool


# -- container -------------------------------------------------------------------------


def _mount(spec: str) -> str:
    """`src`, `src:dst` or `src:dst:ro` -> the same, with dst defaulting to src."""
    return spec if ":" in spec else f"{spec}:{spec}"


def container_wrapper(name: str, stack: dict, runtime_path: str, image: str) -> str:
    """The shell script that stands in for the stack's python."""
    runtime = stack.get("runtime", "docker")
    inner_python = stack.get("python", "python3")
    gpus = stack.get("gpus", True)
    mounts = [_mount(m) for m in stack.get("mounts", [])]
    run_args = list(stack.get("run_args", []))
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# servesweep container stack {name!r}: runs {inner_python} inside {image}",
        f"# with {runtime}, so engines and the stack probe use it like an interpreter.",
        "# Written by servesweep.stacks; rebuilt with the stack.",
    ]
    if runtime == "docker":
        # Docker passes no host variables by itself: forward the ones a variant's env:
        # may set (the server's env is this script's env).
        patterns = "|".join(f"{p}*" for p in CONTAINER_ENV_PREFIXES)
        lines += [
            'env_args=""',
            "for var in $(env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p'); do",
            f'  case "$var" in {patterns}) env_args="$env_args -e $var" ;; esac',
            "done",
        ]
        args = [
            q(runtime_path),
            "run",
            "--rm",
            "--interactive",
            "--init",  # PID 1 that forwards SIGTERM to the server and reaps it
            "--network",
            "host",  # the server's host:port is the host's
            "--ipc",
            "host",  # NCCL and torch shared memory
            "--label",
            q(f"servesweep.stack={name}"),
        ]
        if gpus:
            args += ["--gpus", "all"]
        # The work directory (model files, logs) and the package (the probe) at the same
        # paths inside, so every path servesweep passes means the same file.
        args += ['--volume "$PWD:$PWD"', '--workdir "$PWD"']
        args += ["--volume", q(f"{PACKAGE_DIR}:{PACKAGE_DIR}:ro")]
        for mount in mounts:
            args += ["--volume", q(mount)]
        args += [q(a) for a in run_args]
        args += ["$env_args", q(image), q(inner_python), '"$@"']
    else:
        # apptainer passes the host environment and binds the work directory itself.
        args = [q(runtime_path), "exec"]
        if gpus:
            args.append("--nv")
        args += ["--bind", q(f"{PACKAGE_DIR}:{PACKAGE_DIR}:ro")]
        for mount in mounts:
            args += ["--bind", q(mount)]
        args += [q(a) for a in run_args]
        args += [q(image), q(inner_python), '"$@"']
    lines.append("exec " + " ".join(args))
    return "\n".join(lines) + "\n"


def _runtime(name: str, stack: dict) -> str:
    runtime = stack.get("runtime", "docker")
    path = shutil.which(runtime)
    if not path:
        raise StackError(
            f"stack {name!r}: container runtime {runtime!r} not found on PATH "
            "(install it, or use a venv, conda or existing stack)"
        )
    return path


def _capture(cmd: list[str]) -> tuple[int, str]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return out.returncode, (out.stdout.strip() or out.stderr.strip())


def build_container(name: str, stack: dict, dest: Path, log=print) -> tuple[Path, dict]:
    """Fetch the image and write dest/python; return (wrapper, manifest facts)."""
    runtime = stack.get("runtime", "docker")
    runtime_path = _runtime(name, stack)
    image = stack["image"]
    facts = {"container_runtime": runtime, "container_image": image, "container_image_id": None}
    if runtime == "docker":
        code, _ = _capture([runtime_path, "image", "inspect", image])
        if code != 0:
            _run_logged([runtime_path, "pull", image], log)
        code, out = _capture([runtime_path, "image", "inspect", "--format", "{{.Id}}", image])
        facts["container_image_id"] = out if code == 0 else None
    elif "://" in image:
        # A registry reference: pull once into a local image file.
        sif = dest / "image.sif"
        if sif.exists():
            sif.unlink()
        _run_logged([runtime_path, "pull", str(sif), image], log)
        image = str(sif)
    elif not Path(image).exists():
        raise StackError(f"stack {name!r}: image file {image} not found")
    wrapper = dest / "python"
    wrapper.write_text(container_wrapper(name, stack, runtime_path, image))
    wrapper.chmod(0o755)
    return wrapper, facts


# -- existing --------------------------------------------------------------------------


def existing_python(name: str, stack: dict) -> Path:
    """The given interpreter, or bin/python3 (bin/python) of a given environment prefix."""
    given = Path(stack["python"])
    if given.is_dir():
        for candidate in (given / "bin" / "python3", given / "bin" / "python"):
            if os.access(candidate, os.X_OK):
                return candidate
        raise StackError(f"stack {name!r}: prefix {given} has no bin/python3 or bin/python")
    if not os.access(given, os.X_OK) or not given.is_file():
        raise StackError(f"stack {name!r}: python {given} is not an executable file")
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
        out = subprocess.run([str(python), str(PROBE)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"cannot run {python}: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise StackError(f"probing {python} failed: {last}")
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise StackError(f"probing {python} printed no JSON") from None


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
            "spec_sha256": _sha256(Path(stack["requirements"])),
        }
    elif kind == "conda":
        python, installer = build_conda(name, stack, dest, log)
        extra = {"spec_file": stack["env_file"], "spec_sha256": _sha256(Path(stack["env_file"]))}
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
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "build_s": round(time.monotonic() - start, 1),
    }
    tmp = dest / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(dest / "manifest.json")
    engines = ", ".join(
        f"{k} {manifest[k]}" for k in ("sglang", "vllm", "transformers") if manifest.get(k)
    )
    log(
        f"stack {name!r} ready in {manifest['build_s']} s: python {manifest['python_version']}, "
        f"torch {manifest['torch']} (CUDA {manifest.get('torch_cuda')}), {engines or 'no engine'}"
    )
    return manifest
