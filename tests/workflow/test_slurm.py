"""The real workflow on a real SLURM cluster: a one-node cluster on localhost
(tests/cluster/localslurm.py: munged, slurmctld, slurmd), Snakemake's own executor plugin
(snakemake-executor-plugin-slurm) and the project's profiles/slurm. No mocks.

Runs only with SERVESWEEP_SLURM=1, as root, with slurm-wlm and munge installed
(.ci/slurm-setup); skipped when the daemons cannot be brought up. Every Snakemake run is
wrapped in `timeout -s INT -k 30`: a Snakemake waiting on SLURM ignores SIGTERM (SIGINT
makes it scancel its jobs), and a status command that never sees a job finish would
wait forever.
"""

import csv
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.faults import (
    config,
    fault_servers_running,
    job_log_pids,
    kill_if_running,
    planned_cells,
    wait_for,
    write,
)
from fixtures.paths import ROOT
from fixtures.workflow import processes_in, run_snakemake, snakemake_cmd

from servesweep.server.procs import group_members

sys.path.insert(0, str(ROOT / "tests" / "cluster"))

import localslurm  # noqa: E402

PROFILE = ROOT / "profiles" / "slurm"
TIMEOUT = ["timeout", "-s", "INT", "-k", "30"]
GPU_PROBE = ROOT / "tests" / "cluster" / "gpu_probe" / "Snakefile"

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        os.environ.get("SERVESWEEP_SLURM") != "1",
        reason="SLURM tier: set SERVESWEEP_SLURM=1 (needs root and .ci/slurm-setup)",
    ),
]

# Command-line additions for the local cluster only; everything else is the profile.
# No account exists here (plugin 2.8.0 ignores --slurm-no-account and guesses, fails and
# goes on without one; the flag is kept for versions that honour it), and a short first
# status check keeps the tier fast (MinJobAge 300 s >= 3 x 1 s: the plugin keeps squeue).
# The plugin checks after this many seconds, then 10 s longer each time no job finished
# (1, 12, 33 s after a submission; 2, 14, 36 s at 2): a job of a few seconds is seen 2 s
# sooner at every stage of a run.
LOCAL = ["--slurm-no-account", "--slurm-init-seconds-before-status-checks", "1", "--verbose"]


@pytest.fixture(scope="session")
def slurm_cluster():
    was_up = localslurm.is_up()
    try:
        seconds = localslurm.up()
    except localslurm.ClusterUnavailable as error:
        pytest.skip(f"local SLURM cluster unavailable: {error}")
    yield {"up_s": seconds}
    if not was_up:
        localslurm.down()


def slurm_snakemake_cmd(workdir: Path, *args: str, limit_s: int) -> list[str]:
    """The project's Snakefile through the SLURM executor and profile, bounded by
    `timeout`: SIGINT (Snakemake then scancels its jobs; SIGTERM it would ignore while
    waiting), SIGKILL 30 s later."""
    return [
        *TIMEOUT,
        str(limit_s),
        *snakemake_cmd(workdir, *args, "--workflow-profile", str(PROFILE), *LOCAL),
    ]


def run_slurm(workdir: Path, *args: str, limit_s: int = 480, name: str = "run"):
    started = time.monotonic()
    result = subprocess.run(
        slurm_snakemake_cmd(workdir, *args, limit_s=limit_s),
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    result.wall_s = time.monotonic() - started
    (workdir / f"{name}.log").write_text(result.stdout + result.stderr)
    assert result.returncode not in (124, 137), f"Snakemake ran past {limit_s} s"
    return result


def tail(result, n: int = 4000) -> str:
    return (result.stdout + result.stderr)[-n:]


def with_config(targets: list[str], cfg_path: str, *extra: str) -> list[str]:
    # Targets first: --configfile takes every argument after it.
    return [*targets, *extra, "--configfile", cfg_path]


def job_info(jobid: str) -> dict:
    """`scontrol show job` as a dict (finished jobs stay visible for MinJobAge)."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", jobid], capture_output=True, text=True, timeout=15
    ).stdout
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def cell_jobs(workdir: Path, variant: str, repeat: int = 0) -> list[str]:
    """SLURM job IDs that ran run_cell for this boot of the variant, from the plugin's log
    files (.snakemake/slurm_logs/rule_run_cell/<stack>_<model>_<variant>_<repeat>/<id>.log)."""
    logdir = (
        workdir / ".snakemake" / "slurm_logs" / "rule_run_cell" / f"test_tiny_{variant}_{repeat}"
    )
    return sorted((p.stem for p in logdir.glob("*.log")), key=int)


def sbatch_calls(text: str, rule: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("sbatch call:") and rule in line]


def seconds(hms: str) -> int:
    """SLURM's [D-]HH:MM:SS or MM:SS as seconds."""
    days, _, rest = hms.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


# --- the sweep ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(slurm_cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm-sweep")
    variants = {"baseline": {"flags": {}}, "slower": {"flags": {"gap-ms": 5}}}
    cfg_path = write(workdir, config(variants, levels=(1, 4)))
    run = run_slurm(workdir, *with_config(["results/report.html"], cfg_path), name="sweep")
    return workdir, run


def test_sweep_runs_each_cell_as_its_own_slurm_job(sweep):
    workdir, run = sweep
    assert run.returncode == 0, tail(run)
    assert (workdir / "results" / "report.html").exists()
    rows = list(csv.DictReader(open(workdir / "results" / "summary.csv")))
    assert sorted((r["variant"], int(r["level"])) for r in rows) == [
        ("baseline", 1),
        ("baseline", 4),
        ("slower", 1),
        ("slower", 4),
    ]
    assert {r["status"] for r in rows} == {"ok"}
    assert not fault_servers_running(workdir)

    ids = {}
    for variant in ("baseline", "slower"):
        jobs = cell_jobs(workdir, variant)
        assert len(jobs) == 1, (variant, jobs)
        ids[variant] = jobs[0]
        info = job_info(jobs[0])
        assert info.get("JobState") == "COMPLETED", info
        assert info.get("Comment") == f"rule_run_cell_wildcards_test_tiny_{variant}_0", info
        assert info.get("WorkDir") == str(workdir), info
        # The plugin submitted it with sbatch, and Snakemake inside the job ran the cell.
        calls = sbatch_calls(
            run.stdout + run.stderr, f"rule_run_cell_wildcards_test_tiny_{variant}_0 "
        )
        assert len(calls) == 1, calls
        slurm_log = (
            workdir
            / ".snakemake/slurm_logs/rule_run_cell"
            / f"test_tiny_{variant}_0"
            / f"{jobs[0]}.log"
        ).read_text()
        assert f"variant={variant}" in slurm_log and "--executor slurm-jobstep" in slurm_log
        cell = json.loads((workdir / f"results/cells/test/tiny/{variant}/r0/cell.json").read_text())
        assert cell["status"] == "ok"
    assert ids["baseline"] != ids["slower"]
    (workdir / "sbatch-run_cell.txt").write_text(
        "\n".join(sbatch_calls(run.stdout + run.stderr, "rule_run_cell")) + "\n"
    )


def test_cell_json_names_its_slurm_job(sweep):
    workdir, run = sweep
    assert run.returncode == 0, tail(run)
    for variant in ("baseline", "slower"):
        cell = json.loads((workdir / f"results/cells/test/tiny/{variant}/r0/cell.json").read_text())
        (jobid,) = cell_jobs(workdir, variant)
        assert cell["scheduler"]["slurm_job_id"] == jobid
        # The one node is this machine (its SLURM NodeName is "localhost").
        assert cell["scheduler"]["hostname"] == socket.gethostname()


# --- GPU resource names -------------------------------------------------------------


def test_gpu_resource_names_map_to_sbatch_options(slurm_cluster, tmp_path):
    """tests/cluster/gpu_probe/Snakefile: each rule asks for GPUs under another resource
    name; the node has 2 fake GPUs (count-only GRES with dummy device files)."""
    (tmp_path / "Snakefile").write_text(GPU_PROBE.read_text())
    result = subprocess.run(
        [
            *TIMEOUT,
            "300",
            sys.executable,
            "-m",
            "snakemake",
            "--executor",
            "slurm",
            "--slurm-status-command",
            "squeue",
            "--jobs",
            "8",
            "--keep-going",
            "--default-resources",
            "runtime=5",
            "mem_mb=500",
            *LOCAL,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    text = result.stdout + result.stderr
    (tmp_path / "probe.log").write_text(text)
    gpu_options = {}
    for name in ("none", "gpu0", "gpu1", "gpu_model", "gres1", "gres_typed", "gpus1"):
        (call,) = sbatch_calls(text, f"--comment rule_probe_{name} ")
        gpu_options[name] = re.findall(r"--(?:gpus|gres)=\S+", call)
    assert gpu_options == {
        "none": [],
        "gpu0": [],
        "gpu1": ["--gpus=1"],
        "gpu_model": ["--gpus=fake:1"],
        "gres1": ["--gres=gpu:1"],
        "gres_typed": ["--gres=gpu:fake:2"],
        # `gpus` is not a name the plugin maps for sbatch ...
        "gpus1": [],
    }

    def seen(name: str) -> dict:
        path = tmp_path / "probe" / f"{name}.txt"
        return (
            dict(line.split("=", 1) for line in path.read_text().split()) if path.exists() else {}
        )

    # Jobs run side by side, so which of the 2 fake GPUs a 1-GPU job gets varies.
    assert "CUDA_VISIBLE_DEVICES" not in seen("none")
    assert "CUDA_VISIBLE_DEVICES" not in seen("gpu0")
    for name in ("gpu1", "gpu_model", "gres1"):
        assert seen(name)["CUDA_VISIBLE_DEVICES"] in ("0", "1"), seen(name)
    assert seen("gpu1")["TresPerJob"] == "gres:gpu:1"
    assert seen("gpu_model")["TresPerJob"] == "gres:gpu:fake:1"
    assert seen("gres1")["TresPerNode"] == "gres:gpu:1"
    assert seen("gres_typed")["CUDA_VISIBLE_DEVICES"] == "0,1"
    # ... but the jobstep plugin's srun inside the job does ask for --gpus=1, which the
    # allocation does not have: the job fails.
    assert not (tmp_path / "probe" / "gpus1.txt").exists()
    assert "Step requested GRES but job doesn't have GRES" in text + "".join(
        p.read_text() for p in (tmp_path / ".snakemake/slurm_logs/rule_probe_gpus1").glob("*.log")
    )
    assert result.returncode == 1  # only the gpus1 probe failed (keep-going)


# --- faults ---------------------------------------------------------------------------


def slow_config(gap_ms: int, prompts: int) -> dict:
    """A fast baseline and a `slow` cell that serves one level of `prompts` requests of
    8 tokens `gap_ms` apart (about prompts x 8 x gap_ms, one at a time)."""
    variants = {"baseline": {"flags": {}}, "slow": {"flags": {"gap-ms": gap_ms}}}
    return config(variants, levels=(1,), min_prompts=prompts)


def test_scancel_of_a_running_cell_leaves_no_server_and_the_next_run_measures_it(
    slurm_cluster, tmp_path
):
    cfg_path = write(tmp_path, slow_config(gap_ms=20, prompts=40))  # the level: ~6 s
    log = open(tmp_path / "first.log", "w")
    owner = subprocess.Popen(
        slurm_snakemake_cmd(tmp_path, *with_config(["results/report.html"], cfg_path), limit_s=480),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        start_new_session=True,
    )
    job_log = tmp_path / "results" / "logs" / "run_cell" / "test" / "tiny" / "slow" / "r0.log"
    try:
        _, server_pid = wait_for(lambda: job_log_pids(job_log), 240, "the slow level to start")
        (jobid,) = cell_jobs(tmp_path, "slow")
        info = job_info(jobid)
        assert info["JobState"] == "RUNNING", info
        assert info["Comment"] == "rule_run_cell_wildcards_test_tiny_slow_0", info
        assert group_members(server_pid), "the server is not running"
        subprocess.run(["scancel", jobid], check=True, timeout=15)
        start = time.monotonic()
        wait_for(lambda: not group_members(server_pid), 30, "the server's group to end")
        gone_s = time.monotonic() - start
        (tmp_path / "server-gone-after-scancel-s.txt").write_text(f"{gone_s:.2f}\n")
        owner.wait(timeout=420)
    finally:
        kill_if_running(owner)
        log.close()
    first = (tmp_path / "first.log").read_text()
    assert owner.returncode == 1, first[-3000:]  # keep-going: the rest ran, then it failed
    assert not fault_servers_running(tmp_path)
    # Nothing of the cancelled job is left: not its server, not its jobstep Snakemake
    # (under proctrack/linuxproc one outlived scancel, reparented to init).
    wait_for(lambda: not processes_in(tmp_path), 30, "no process left in the sweep's dir")
    # SIGTERM to the job's processes, SIGKILL after KillWait (5 s here).
    assert gone_s < localslurm.KILL_WAIT_S + 10, f"server outlived scancel by {gone_s:.1f} s"
    assert job_info(jobid)["JobState"] == "CANCELLED"
    assert f"SLURM-job '{jobid}' failed" in first
    assert not (tmp_path / "results/cells/test/tiny/slow/r0/cell.json").exists()
    baseline = json.loads((tmp_path / "results/cells/test/tiny/baseline/r0/cell.json").read_text())
    assert baseline["status"] == "ok"

    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", cfg_path)
    assert planned_cells(dry) == ["slow"], dry.stdout[-3000:]
    again = run_slurm(tmp_path, *with_config(["results/report.html"], cfg_path), name="again")
    assert again.returncode == 0, tail(again)
    assert len(sbatch_calls(again.stdout + again.stderr, "rule_run_cell")) == 1
    assert len(cell_jobs(tmp_path, "baseline")) == 1
    slow_jobs = cell_jobs(tmp_path, "slow")
    assert len(slow_jobs) == 2 and slow_jobs[0] == jobid, slow_jobs
    assert (
        json.loads((tmp_path / "results/cells/test/tiny/slow/r0/cell.json").read_text())["status"]
        == "ok"
    )
    assert (tmp_path / "results" / "report.html").exists()
    assert not fault_servers_running(tmp_path)


@pytest.fixture(scope="module")
def timed_out(slurm_cluster, tmp_path_factory):
    """The slow cell would need ~130 s; its job gets SLURM's smallest time limit, one
    minute (`runtime` is in minutes; sbatch rounds up). slurmctld enforces limits on a
    ~30 s cycle: SIGTERM to every process of the job, SIGKILL after KillWait."""
    workdir = tmp_path_factory.mktemp("slurm-time-limit")
    cfg_path = write(workdir, slow_config(gap_ms=400, prompts=40))
    run = run_slurm(
        workdir,
        *with_config(["results/report.html"], cfg_path, "--set-resources", "run_cell:runtime=1"),
        limit_s=480,
        name="time-limit",
    )
    (jobid,) = cell_jobs(workdir, "slow")
    return workdir, run, jobid


def test_time_limit_ends_the_job_and_its_server(timed_out):
    workdir, run, jobid = timed_out
    info = job_info(jobid)
    assert info["TimeLimit"] == "00:01:00", info
    # run_cell stops itself before the limit: the job ends on its own.
    assert info["JobState"] == "COMPLETED", info
    assert seconds(info["RunTime"]) <= 60 + 35 + localslurm.KILL_WAIT_S, info
    assert not fault_servers_running(workdir)
    assert not processes_in(workdir)
    baseline = json.loads((workdir / "results/cells/test/tiny/baseline/r0/cell.json").read_text())
    assert baseline["status"] == "ok"


def test_time_limit_is_recorded_as_a_failed_cell(timed_out):
    workdir, run, jobid = timed_out
    cell = json.loads((workdir / "results/cells/test/tiny/slow/r0/cell.json").read_text())
    assert cell["status"] == "failed"
    assert cell["failure"]["cause"] == "time_limit"
    # A failed cell is a result: the job itself succeeded, and the report lists it.
    assert job_info(jobid)["JobState"] == "COMPLETED"
    assert run.returncode == 0, tail(run)
    assert "time_limit" in (workdir / "results" / "report.html").read_text()


def test_scancel_ends_a_process_that_left_the_jobs_process_tree(slurm_cluster, tmp_path):
    # How the jobstep Snakemake outlived scancel: a process of the job whose parent died
    # first is reparented (ppid 1) and, tracked by parentage, no longer part of the job.
    # Tracked by process group (tests/cluster/localslurm.py), it is ended with the job.
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n( sleep 1234 & )\nsleep 1000\n")
    script.chmod(0o755)
    jobid = subprocess.run(
        ["sbatch", "--parsable", "-D", str(tmp_path), "-o", str(tmp_path / "%j.out"), str(script)],
        capture_output=True,
        text=True,
        check=True,
        timeout=15,
    ).stdout.strip()
    try:
        orphan = wait_for(
            lambda: [p for p in processes_in(tmp_path) if "sleep 1234" in p], 30, "the orphan"
        )
        pid = int(orphan[0].split(":")[0])
        assert Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[1] == "1"  # ppid
        subprocess.run(["scancel", jobid], check=True, timeout=15)
        wait_for(lambda: not processes_in(tmp_path), localslurm.KILL_WAIT_S + 20, "nothing left")
    finally:
        subprocess.run(["scancel", jobid], timeout=15)
    wait_for(lambda: job_info(jobid)["JobState"] == "CANCELLED", 30, "the job cancelled")


# --- a hunt ---------------------------------------------------------------------------


def test_a_hunt_runs_its_composed_variants_as_slurm_jobs(slurm_cluster, tmp_path):
    """The hunt's arms are ordinary run_cell jobs: a composed variant (`+` in its name)
    goes through sbatch, its job log and its cell.json name the job, and the checkpoint's
    next step sees the records the cluster wrote."""
    cfg = config(
        {"baseline": {"flags": {"greedy": True, "gap-ms": 40, "scatter-cv": 0.03, "seed": 3}}},
        levels=(4,),
        correctness={"prompts": 2, "max_tokens": 4},
        hunt={
            "start": "baseline",
            "candidates": {"fast": {"env": {"FAULT_BOOST_A": "3.0"}}},
            "boots": {"min": 2, "max": 2},
            "budget": {"boot_minutes": 0.1},
            "confirm": False,
            "design": "sequential",  # one round of one arm: the fewest jobs
        },
    )
    cfg_path = write(tmp_path, cfg)
    run = run_slurm(tmp_path, *with_config(["results/report.html"], cfg_path), name="hunt")
    assert run.returncode == 0, tail(run)
    hunt = json.loads((tmp_path / "results" / "hunt" / "hunt.json").read_text())
    assert hunt["final"]["variant"] == "baseline+fast", hunt["final"]
    for repeat in (0, 1):
        (jobid,) = cell_jobs(tmp_path, "baseline+fast", repeat)
        assert job_info(jobid).get("JobState") == "COMPLETED"
        cell_json = tmp_path / f"results/cells/test/tiny/baseline+fast/r{repeat}/cell.json"
        cell = json.loads(cell_json.read_text())
        assert cell["status"] == "ok" and cell["scheduler"]["slurm_job_id"] == jobid
    assert not fault_servers_running(tmp_path)
