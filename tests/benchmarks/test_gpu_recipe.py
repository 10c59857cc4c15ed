"""The GPU recipes' shell library (benchmarks/gpu/lib.sh) the way a device call uses it, with
the device's /tmp simulated in a temp dir: wheels rewritten stored, packed into one
reproducible tar.xz in parts, each part carried and checked as it lands, joined, verified,
installed with --no-index --no-deps --target, and the stack's interpreter run; a damaged or
missing piece stops it with one line; every wait has a deadline."""

import base64
import hashlib
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from fixtures.paths import ROOT

LIB = ROOT / "benchmarks" / "gpu" / "lib.sh"


def sh(script: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    """bash with lib.sh sourced; `env` on top of ours (PY: the interpreter to install with)."""
    full = {**os.environ, "PY": sys.executable, "GPU_PART": "4K", **env}
    return subprocess.run(
        ["bash", "-c", f". {LIB}\n{script}"],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def make_wheel(
    directory: Path, name: str, payload: bytes, when=(2020, 5, 6, 7, 8, 9), extra=None
) -> Path:
    """A pure-Python wheel as PyPI serves them (deflated, its own timestamps), RECORD right;
    `extra`: more files of the package (path: text)."""
    files = {
        f"{name}/__init__.py": f"VALUE = {name!r}\nSIZE = {len(payload)}\n".encode(),
        f"{name}/data.bin": payload,
        **{path: text.encode() for path, text in (extra or {}).items()},
        f"{name}-1.0.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
        ),
        f"{name}-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{name}-1.0.dist-info/RECORD,,\n"
    files[f"{name}-1.0.dist-info/RECORD"] = record.encode()
    path = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in files.items():
            z.writestr(zipfile.ZipInfo(member, date_time=when), data)
    return path


@pytest.fixture
def wheels(tmp_path) -> Path:
    src = tmp_path / "dl"
    src.mkdir()
    # Incompressible payloads: the tar.xz needs several 4 KiB parts.
    make_wheel(src, "alpha", os.urandom(9000))
    make_wheel(src, "beta", os.urandom(5000))
    return src


def pack(tmp_path: Path, src: Path, dest: str) -> Path:
    out = tmp_path / dest
    r = sh(
        f"wheels_stored {src} {out}-stored && wheels_pack {out}-stored {out}",
        tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def carry(dest: Path, device_tmp: Path) -> None:
    """What the documented part calls do there, one folder a call, each part checked."""
    device_tmp.mkdir(parents=True, exist_ok=True)
    parts = sorted(p for p in dest.iterdir() if p.is_dir())
    for folder in parts:
        for f in folder.iterdir():
            (device_tmp / f.name).write_bytes(f.read_bytes())
        r = subprocess.run(
            "sha256sum -c part.*.sha256", shell=True, cwd=device_tmp, capture_output=True
        )
        assert r.returncode == 0, r.stdout


def test_pack_carry_join_install_run(tmp_path, wheels):
    dest = pack(tmp_path, wheels, "whl")
    parts = sorted(p.name for p in dest.iterdir() if p.is_dir())
    assert len(parts) >= 3, parts  # several calls' worth
    last = dest / parts[-1]
    assert (last / "SHA256").read_text() == (dest / "SHA256").read_text()  # travels with it
    sums = (dest / "SHA256").read_text()
    assert "whl/alpha-1.0-py3-none-any.whl" in sums and " wheels.tar\n" in sums
    # Each stored wheel is an uncompressed zip that pip installs unchanged.
    stored = tmp_path / "whl-stored" / "alpha-1.0-py3-none-any.whl"
    with zipfile.ZipFile(stored) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
        assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert z.namelist()[-1].endswith(".dist-info/WHEEL")  # the dist-info last

    device = tmp_path / "device-tmp"
    carry(dest, device / "sglang-wheels")
    site, python = device / "site-sglang", device / "stack-sglang" / "bin" / "python3"
    r = sh(
        f"wheels_join {device}/sglang-wheels && wheels_install {device}/sglang-wheels {site} && "
        f"stack_python {python} {site} CUDA_HOME=/usr/local/cuda-13.0 'PATH+=${{CUDA_HOME}}/bin'",
        tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every sum matches" in r.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CUDA_HOME")}
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import os, alpha, beta; print(alpha.SIZE, beta.VALUE, "
            "os.environ['CUDA_HOME'], os.environ['PATH'].split(':')[0])",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.stdout.split() == [
        "9000",
        "beta",
        "/usr/local/cuda-13.0",
        "/usr/local/cuda-13.0/bin",
    ], out.stderr


# An engine's server module: where it, Snakemake and the other engine come from.
WHO = """import importlib.util, os, sys, snakemake
other = {"sglang": "vllm", "vllm": "sglang"}[__spec__.name.split(".")[0]]
print(__spec__.name, os.path.dirname(os.path.dirname(snakemake.__file__)),
      importlib.util.find_spec(other) is not None, "/bogus" in sys.path,
      os.environ.get("CUDA_HOME", "-"), os.environ.get("VLLM_USE_FLASHINFER_SAMPLER", "-"))
"""


def test_both_engines_set_up_in_one_lease(tmp_path):
    """`start.sh engines`: both wheel sets (each with Snakemake's wheels) joined and
    installed, each into its own site, and one interpreter that runs each engine's own by
    the module it runs (config/examples/h200-engines.yaml's stack)."""
    sets = {}
    for engine, module in (
        ("sglang", "sglang/launch_server.py"),
        ("vllm", "vllm/entrypoints/openai/api_server.py"),
    ):
        src = tmp_path / f"{engine}-dl"
        src.mkdir()
        make_wheel(src, engine, os.urandom(6000), extra={module: WHO})
        make_wheel(src, "snakemake", os.urandom(3000))  # in both sets, as prepare.sh packs them
        sets[engine] = pack(tmp_path, src, f"{engine}-whl")
    device = tmp_path / "device-tmp"
    for engine, dest in sets.items():
        carry(dest, device / f"{engine}-wheels")
    setup = ROOT / "benchmarks" / "gpu" / "setup.sh"
    source = f"ENGINE=engines GPU_TMP={device} . {setup} && echo PYTHONPATH=$PYTHONPATH"
    r = sh(source, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("every sum matches") == 2 and r.stdout.count("installed into") == 2
    assert f"PYTHONPATH={device}/site-sglang" in r.stdout  # the workflow's own site
    assert "sglang 1.0" in r.stdout and "vllm 1.0" in r.stdout
    for engine in ("sglang", "vllm"):
        assert (device / f"site-{engine}" / "snakemake" / "__init__.py").is_file()

    python = device / "stack-engines" / "bin" / "python3"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    env.pop("VLLM_USE_FLASHINFER_SAMPLER", None)
    env["PYTHONPATH"] = "/bogus"  # the workflow's own path, which no engine gets

    def run(*args):
        out = subprocess.run([str(python), *args], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    # Each engine on its own site alone (the caller's PYTHONPATH dropped), its own variables.
    assert run("-m", "sglang.launch_server", "--port", "1") == [
        "sglang.launch_server",
        f"{device}/site-sglang",
        "False",
        "False",
        "/usr/local/cuda-13.0",
        "-",
    ]
    assert run("-m", "vllm.entrypoints.openai.api_server") == [
        "vllm.entrypoints.openai.api_server",
        f"{device}/site-vllm",
        "False",
        "False",
        "-",
        "0",
    ]
    # Anything else (the stack probe): SGLang's interpreter, vLLM's site behind its own.
    probe = (
        "import importlib.metadata as m, sglang, vllm; "
        "print(m.version('sglang'), m.version('vllm'), sglang.__file__, vllm.__file__)"
    )
    assert run("-c", probe) == [
        "1.0",
        "1.0",
        f"{device}/site-sglang/sglang/__init__.py",
        f"{device}/site-vllm/vllm/__init__.py",
    ]
    # Sourced again (a later step), nothing is installed twice; one engine alone still works.
    r = sh(source, tmp_path)
    assert r.returncode == 0 and "installed into" not in r.stdout, r.stdout + r.stderr
    r = sh(f"ENGINE=vllm GPU_TMP={device} . {setup} && echo PYTHONPATH=$PYTHONPATH", tmp_path)
    assert r.returncode == 0 and f"PYTHONPATH={device}/site-vllm" in r.stdout, r.stderr
    r = sh(f"ENGINE=tgi GPU_TMP={device} . {setup}", tmp_path)
    assert r.returncode != 0 and "not sglang, vllm or engines" in r.stderr


def test_the_engines_recipe_runs_the_engines_example():
    run = (ROOT / "benchmarks" / "gpu" / "run.sh").read_text()
    assert "CFG=${SERVESWEEP_GPU_CONFIG:-config/examples/h200-$ENGINE.yaml}" in run
    assert (ROOT / "config" / "examples" / "h200-engines.yaml").is_file()
    config = (ROOT / "config" / "examples" / "h200-engines.yaml").read_text()
    assert "python: /tmp/stack-engines/bin/python3" in config


def test_the_same_wheels_pack_to_the_same_bytes(tmp_path, wheels):
    first = (pack(tmp_path, wheels, "a") / "SHA256").read_text()
    # The same files downloaded again: other mtimes, another order on disk.
    for f in wheels.iterdir():
        os.utime(f, (time.time() + 3600, time.time() + 3600))
    second = (pack(tmp_path, wheels, "b") / "SHA256").read_text()
    assert first == second
    # A wheel rebuilt with other timestamps inside (an sdist built twice) too.
    make_wheel(wheels, "beta", b"x", when=(2024, 1, 1, 0, 0, 0))
    third = (pack(tmp_path, wheels, "c") / "SHA256").read_text()
    make_wheel(wheels, "beta", b"x", when=(2025, 2, 2, 2, 2, 2))
    assert (pack(tmp_path, wheels, "d") / "SHA256").read_text() == third != first


def test_a_damaged_or_missing_piece_stops_the_join(tmp_path, wheels):
    dest = pack(tmp_path, wheels, "whl")
    device = tmp_path / "dev"
    carry(dest, device)
    part = sorted(device.glob("part.?"))[1]
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    r = sh(f"wheels_join {device}", tmp_path)
    assert r.returncode != 0 and "FAILED: wheels_join: a part in" in r.stderr
    # A part that never came.
    device = tmp_path / "dev2"
    carry(dest, device)
    part = device / part.name
    part.unlink()
    (device / (part.name + ".sha256")).unlink()
    r = sh(f"wheels_join {device}", tmp_path)
    assert r.returncode != 0 and "parts in" in r.stderr
    # The sums that travel with the last part, missing.
    (device / "SHA256").unlink()
    r = sh(f"wheels_join {device}", tmp_path)
    assert r.returncode != 0 and "SHA256 missing" in r.stderr


def test_two_versions_of_one_name_are_refused(tmp_path, wheels):
    other = wheels / "alpha-2.0-py3-none-any.whl"
    other.write_bytes((wheels / "alpha-1.0-py3-none-any.whl").read_bytes())
    r = sh(f"wheels_stored {wheels} {tmp_path}/s", tmp_path)
    assert r.returncode != 0 and "two versions of alpha" in r.stderr


def test_every_wait_has_a_deadline(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = time.monotonic()
        r = sh(f"wait_pid {sleeper.pid} 2; echo rc=$?", tmp_path)
        assert r.stdout.strip() == "rc=1" and time.monotonic() - start < 10
    finally:
        sleeper.kill()
        sleeper.wait()
    quick = subprocess.Popen(["sleep", "0.2"])
    r = sh(f"wait_pid {quick.pid} 30; echo rc=$?", tmp_path)
    quick.wait()
    assert r.stdout.strip() == "rc=0"


def test_what_travels_is_ignored_and_the_devtree_is_a_commit(tmp_path):
    main, work = tmp_path / "main", tmp_path / "work"
    for repo in (main, work):
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (work / "a.txt").write_text("committed\n")
    evidence = work / "benchmarks" / "results" / "gpu" / "lease" / "sweep.tar.xz"
    evidence.parent.mkdir(parents=True)
    evidence.write_bytes(b"records a device never needs")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a.txt", "benchmarks"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (work / "a.txt").write_text("not committed\n")
    r = sh(f"exclude_add {main} .devtree .sglang-whl && devtree_make {work} {main}", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "uncommitted changes" in r.stderr  # said, and left out
    assert (main / ".devtree" / "a.txt").read_text() == "committed\n"
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert (main / ".devtree" / "COMMIT").read_text() == head
    # Committed GPU evidence stays home: the 64 MiB a call may carry is the wheels' and code's.
    assert not (main / ".devtree" / "benchmarks" / "results").exists()
    (main / ".sglang-whl").mkdir()
    (main / ".sglang-whl" / "part.0").write_bytes(b"x")
    untracked = subprocess.run(
        ["git", "-C", str(main), "ls-files", "-o", "--exclude-standard"],
        capture_output=True,
        text=True,
    )
    assert untracked.stdout == ""  # nothing of it travels unless a call carries it


def test_a_waiting_call_brings_back_the_sweep_and_a_later_slot_resumes_from_it(tmp_path):
    # The device's run copy (/tmp/ss): two finished boots and one cut mid-level.
    run = tmp_path / "ss"
    for variant, done in (("baseline", True), ("cb", True), ("eager", False)):
        boot = run / "results" / "cells" / "s" / "m" / variant / "r0"
        (boot / "levels").mkdir(parents=True)
        (boot / "levels" / "L1_i0.requests.jsonl").write_text("{}\n")
        if done:
            (boot / "cell.json").write_text(f'{{"variant": "{variant}"}}\n')
    out = tmp_path / "OUT"
    r = sh(f"results_pack {run} {out}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    archive = out / "sweep.tar.xz"
    assert archive.is_file()
    # The next slot: a fresh copy of the repo with the archive carried in resume/.
    later = tmp_path / "later"
    (later / "resume").mkdir(parents=True)
    (later / "resume" / "sweep.tar.xz").write_bytes(archive.read_bytes())
    r = sh(f"sweep_resume resume/sweep.tar.xz {later}", later)
    assert r.returncode == 0, r.stdout + r.stderr
    cells = sorted(p.parent.name for p in (later / "results" / "cells").glob("*/*/*/r0"))
    assert cells == ["baseline", "cb"]  # the cut boot is measured again there
    assert (later / "results/cells/s/m/cb/r0/levels/L1_i0.requests.jsonl").is_file()
    r = sh(f"sweep_resume resume/missing.tar.xz {later}", later)
    assert r.returncode != 0 and "no archive at resume/missing.tar.xz" in r.stderr
    assert "resume)" in (ROOT / "benchmarks" / "gpu" / "run.sh").read_text()


def test_a_parity_run_is_packed_and_an_archive_over_the_limit_comes_back_in_parts(tmp_path):
    # A parity run has parity/ and no results/ (the 2026-12-08 lease packed nothing of it).
    run = tmp_path / "ss"
    (run / "parity" / "runs").mkdir(parents=True)
    (run / "parity" / "runs" / "L256_r0_ours.json").write_bytes(os.urandom(6000))
    (run / "parity" / "sglang_parity.json").write_text('{"benchmark": "sglang_parity"}\n')
    small = tmp_path / "small"
    r = sh(f"results_pack {run} {small}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in small.iterdir()) == ["parity.tar.xz"]
    whole = (small / "parity.tar.xz").read_bytes()
    # Over the limit (a few KiB here, 16 MiB there): parts, the whole's sum, no whole.
    out = tmp_path / "OUT"
    r = sh(f"results_pack {run} {out}", tmp_path, GPU_BACK_MAX="2000", GPU_BACK_PART="2500")
    assert r.returncode == 0, r.stdout + r.stderr
    parts = sorted(out.glob("parity.tar.xz.part*"))
    assert len(parts) == 3 and not (out / "parity.tar.xz").exists()
    assert "brought back in 3 parts" in r.stdout
    joined = tmp_path / "parity.tar.xz"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    assert joined.read_bytes() == whole
    (tmp_path / "parity.tar.xz.sha256").write_text((out / "parity.tar.xz.sha256").read_text())
    check = subprocess.run(["sha256sum", "-c", "parity.tar.xz.sha256"], cwd=tmp_path)
    assert check.returncode == 0
    r = subprocess.run(["tar", "-xJf", str(joined), "-C", str(tmp_path)], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "parity" / "sglang_parity.json").is_file()


def test_run_sh_passes_one_config_override_before_the_sweep_file():
    # SM_CONFIG varies an example for one lease (`benchmark={repeats: 3}`) without an edited
    # copy; --configfile takes every value after it, so the override goes before it.
    run = (ROOT / "benchmarks" / "gpu" / "run.sh").read_text()
    body = run[run.index("sm() {") : run.index("\n}\n", run.index("sm() {")) + 3]
    script = f"set -u\nCFG=c.yaml\nSM=(printf '%s\\n')\n{body}sm results/plan.txt\n"
    plain = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert plain.stdout.splitlines() == [
        "results/plan.txt", "--resources", "gpu=1", "--configfile", "c.yaml",
    ]  # fmt: skip
    over = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SM_CONFIG": "benchmark={repeats: 3}"},
    )
    assert over.stdout.splitlines() == [
        "results/plan.txt", "--resources", "gpu=1", "--config", "benchmark={repeats: 3}",
        "--configfile", "c.yaml",
    ]  # fmt: skip
