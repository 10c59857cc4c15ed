"""Building a stack's environment: a venv (uv or pip), a conda environment, or a container
wrapper that stands in for the image's interpreter. `servesweep.resources.stacks` picks the builder
and writes the manifest."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from servesweep.resources.setup import SetupError

PROBE = Path(__file__).with_name("stack_probe.py")
PACKAGE_DIR = Path(__file__).parents[1]  # the servesweep package

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


class StackError(SetupError):
    """The stack could not be built or probed; one line naming the stack, and a cause
    (servesweep.resources.setup.SETUP_CAUSES)."""


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
        raise StackError(f"cannot run {cmd[0]}: {exc.strerror or exc}", "tool_missing") from None
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        log(f"[{time.monotonic() - start:6.1f}s] {line}")
    if proc.wait() != 0:
        last = next((t for t in reversed(tail) if t.strip()), "")
        raise StackError(
            f"`{cmd[0]} ...` failed with exit code {proc.returncode}: {last}", "install_failed"
        )


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- venv ------------------------------------------------------------------------------


def _installer(choice: str) -> str:
    if choice == "auto":
        return "uv" if shutil.which("uv") else "pip"
    if choice == "uv" and not shutil.which("uv"):
        raise StackError("installer 'uv' requested but uv is not on PATH", "tool_missing")
    return choice


def build_venv(name: str, stack: dict, dest: Path, log=print) -> tuple[Path, str]:
    """Create dest/venv from the stack's requirements file; return (python, installer)."""
    requirements = Path(stack["requirements"])
    if not requirements.is_file():
        raise StackError(
            f"stack {name!r}: requirements file {requirements} not found", "spec_missing"
        )
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
    raise StackError(
        f"stack {name!r}: kind conda needs {wanted} on PATH; none was found", "tool_missing"
    )


def conda_create_command(tool: str, path: str, prefix: Path, env_file: Path) -> list[str]:
    if tool == "micromamba":
        return [path, "create", "--yes", "--prefix", str(prefix), "--file", str(env_file)]
    # conda and mamba: `env create` reads the file's channels, dependencies and pip: list.
    return [path, "env", "create", "--prefix", str(prefix), "--file", str(env_file)]


def build_conda(name: str, stack: dict, dest: Path, log=print) -> tuple[Path, str]:
    """Create dest/env from the stack's environment file; return (python, tool)."""
    env_file = Path(stack["env_file"])
    if not env_file.is_file():
        raise StackError(f"stack {name!r}: environment file {env_file} not found", "spec_missing")
    tool, path = conda_tool(name, stack.get("installer", "auto"))
    prefix = dest / "env"
    if prefix.exists():
        shutil.rmtree(prefix)  # an environment change means a clean rebuild
    _run_logged(conda_create_command(tool, path, prefix, env_file.absolute()), log)
    python = prefix / "bin" / "python"
    if not python.exists():
        raise StackError(
            f"stack {name!r}: {env_file} built no bin/python; add python to its dependencies",
            "install_failed",
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
        "# Written by servesweep.resources.stacks; rebuilt with the stack.",
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
            "(install it, or use a venv, conda or existing stack)",
            "tool_missing",
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
        raise StackError(f"stack {name!r}: image file {image} not found", "install_failed")
    wrapper = dest / "python"
    wrapper.write_text(container_wrapper(name, stack, runtime_path, image))
    wrapper.chmod(0o755)
    return wrapper, facts
