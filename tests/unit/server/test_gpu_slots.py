"""GPU slots with a fake slot count: real processes take GPUs concurrently; the locks keep
them disjoint, and a holder killed with SIGKILL frees its GPUs (servesweep.server.gpu_slots)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.paths import ROOT

from servesweep.server.gpu_slots import SlotsUnavailable, hold, host_gpus
from servesweep.sweep.config import ConfigError, load

# A holder: takes N of the fake GPUs, prints what it holds with its time span, then holds
# them for HOLD_S seconds (or until killed).
HOLDER = """
import json, sys, time
from servesweep.server.gpu_slots import hold
count, lock_dir, hold_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
settings = {"host_gpus": 4, "lock_dir": lock_dir, "wait_s": 60}
quiet = {"environ": {}, "detect": lambda: None, "log": lambda m: None}
with hold(count, settings, owner="test", **quiet) as lease:
    start = time.time()
    print(json.dumps({"held": lease.held, "env": lease.env(), "start": start}), flush=True)
    time.sleep(hold_s)
    print(json.dumps({"end": time.time()}), flush=True)
"""


def holder(count: int, lock_dir: Path, hold_s: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(count), str(lock_dir), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def settings(tmp_path, host_gpus=4, wait_s=60.0) -> dict:
    return {"host_gpus": host_gpus, "lock_dir": str(tmp_path / "slots"), "wait_s": wait_s}


@pytest.mark.slow
def test_concurrent_holders_never_share_a_gpu(tmp_path):
    lock_dir = tmp_path / "slots"
    counts = [1, 2, 1, 2, 1, 1]  # 8 GPUs asked of 4: some must wait for others
    procs = [holder(n, lock_dir, 1.0) for n in counts]
    spans = []
    for proc, n in zip(procs, counts, strict=True):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        first, last = (json.loads(line) for line in out.splitlines())
        assert len(first["held"]) == n and len(set(first["held"])) == n
        assert first["env"] == {"CUDA_VISIBLE_DEVICES": ",".join(first["held"])}
        spans.append((first["start"], last["end"], set(first["held"])))
    # Any two holders that overlapped in time held disjoint GPUs.
    overlapping = 0
    for i, (s1, e1, g1) in enumerate(spans):
        for s2, e2, g2 in spans[i + 1 :]:
            if s1 < e2 and s2 < e1:
                overlapping += 1
                assert not g1 & g2, spans
    assert overlapping  # the test did run holders side by side
    assert set().union(*(g for _, _, g in spans)) <= {"0", "1", "2", "3"}


def test_a_holder_killed_with_sigkill_frees_its_gpus(tmp_path):
    lock_dir = tmp_path / "slots"
    first = holder(3, lock_dir, 600)
    held = json.loads(first.stdout.readline())["held"]
    assert held == ["0", "1", "2"]
    # The fourth GPU is free; three more are not until the holder dies.
    with pytest.raises(SlotsUnavailable, match="held: 0 \\(pid .* test\\)"):
        with hold(2, settings(tmp_path, wait_s=0.5), environ={}, log=lambda m: None):
            pass
    start = time.monotonic()
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    second = holder(4, lock_dir, 0)
    assert json.loads(second.stdout.readline())["held"] == ["0", "1", "2", "3"]
    second.wait(timeout=30)
    assert time.monotonic() - start < 10


def test_a_waiting_cell_gets_its_gpus_when_they_are_freed(tmp_path):
    first = holder(4, tmp_path / "slots", 1.5)
    first.stdout.readline()
    messages = []
    with hold(2, settings(tmp_path), environ={}, log=messages.append) as lease:
        assert lease.held == ["0", "1"] and lease.waited_s > 0.5
    first.wait(timeout=30)
    assert messages and "waiting for 2 free GPU(s)" in messages[0]


def test_a_server_holds_its_gpus_until_it_is_gone(tmp_path):
    # The descriptors pass to the server: its GPUs are not free while it lives.
    with hold(1, settings(tmp_path, host_gpus=1), environ={}) as lease:
        server = subprocess.Popen(["sleep", "600"], pass_fds=lease.fds)
    try:
        with pytest.raises(SlotsUnavailable):
            with hold(1, settings(tmp_path, host_gpus=1, wait_s=0.3), environ={}):
                pass
    finally:
        server.kill()
        server.wait()
    with hold(1, settings(tmp_path, host_gpus=1, wait_s=5), environ={}) as lease:
        assert lease.held == ["0"]


def test_too_many_gpus_fails_at_once_naming_the_key(tmp_path):
    start = time.monotonic()
    with pytest.raises(SlotsUnavailable, match="needs 3 GPU.*pool has 2.*gpu_slots.host_gpus"):
        with hold(3, settings(tmp_path, host_gpus=2), environ={}):
            pass
    assert time.monotonic() - start < 1


def test_the_pool_comes_from_slurm_then_the_environment_then_config_then_detection():
    cfg = {"host_gpus": 4}
    assert host_gpus(cfg, {"CUDA_VISIBLE_DEVICES": "2,5", "SLURM_JOB_ID": "7"}) == (
        ["2", "5"],
        "slurm",
        False,
    )
    assert host_gpus(cfg, {"CUDA_VISIBLE_DEVICES": "2,5"}) == (["2", "5"], "inherited", True)
    assert host_gpus(cfg, {}).pool == ["0", "1", "2", "3"]
    assert host_gpus({"host_gpus": ["GPU-a", 3]}, {}).pool == ["GPU-a", "3"]
    assert host_gpus({"host_gpus": None}, {}, detect=lambda: 2) == (["0", "1"], "detected", True)
    assert host_gpus({"host_gpus": None}, {}, detect=lambda: None) == ([], "none", False)


def test_cpu_hosts_and_gpu_less_cells(tmp_path):
    # No GPU anywhere: nothing is set, nothing is locked.
    none = {"host_gpus": None, "lock_dir": str(tmp_path / "x"), "wait_s": 1}
    with hold(0, none, environ={}, detect=lambda: None) as lease:
        assert lease.env() == {} and lease.as_record()["source"] == "none"
    assert not (tmp_path / "x").exists()
    # A host with GPUs: a cell that holds none sees none.
    with hold(0, settings(tmp_path), environ={}) as lease:
        assert lease.env() == {"CUDA_VISIBLE_DEVICES": ""}
    # Under SLURM the job's GPUs are its own: no lock files.
    slurm = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": "9"}
    with hold(2, none, environ=slurm) as lease:
        assert lease.env() == {"CUDA_VISIBLE_DEVICES": "0,1"} and lease.fds == ()
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "value", [-1, "four", [], [0, 0], {"a": 1}], ids=["negative", "text", "empty", "dup", "map"]
)
def test_a_bad_host_gpus_is_one_line_naming_the_key(value):
    from fixtures.configs import base_config

    cfg = base_config()
    cfg["gpu_slots"] = {"host_gpus": value}
    with pytest.raises(ConfigError) as err:
        load(cfg)
    assert "gpu_slots.host_gpus" in str(err.value) and "\n" not in str(err.value)


def test_multicast_stays_off_unless_the_variant_says_otherwise():
    from servesweep.server.env import comm_env, server_env, workflow_env

    gpus = {"CUDA_VISIBLE_DEVICES": "1"}
    assert server_env({}, gpus) == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
        "CUDA_VISIBLE_DEVICES": "1",
    }
    # The variant's own value wins over the default; the held GPUs win over the variant's.
    variant = {"NCCL_NVLS_ENABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1,2"}
    env = server_env(variant, gpus)
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "NCCL_NVLS_ENABLE" not in workflow_env(variant, gpus)
    assert comm_env({"NCCL_IB_HCA": "mlx5", "PATH": "/bin", "TORCH_SYMM_X": "1"}) == {
        "NCCL_IB_HCA": "mlx5",
        "TORCH_SYMM_X": "1",
    }


def test_gpu_slots_is_in_no_spec():
    from fixtures.configs import base_config

    from servesweep.sweep.config import spec_json

    plain = load(base_config())
    cfg = base_config()
    cfg["gpu_slots"] = {"host_gpus": [0, 3], "lock_dir": "/elsewhere", "wait_s": 5}
    slotted = load(cfg)
    for cell in plain.cells:
        assert spec_json(plain.spec(*cell)) == spec_json(slotted.spec(*cell))
        assert "gpu_slots" not in spec_json(plain.spec(*cell))


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"flags": {"tp": 4}}, "variants.tp4.gpus: the cell holds 0 GPU(s) but its flags (tp 4)"),
        (
            {"gpus": 2, "flags": {"tensor-parallel-size": 2, "pipeline-parallel-size": 2}},
            "(tensor-parallel-size 2 x pipeline-parallel-size 2) spread the server over 4",
        ),
    ],
)
def test_a_cell_holding_fewer_gpus_than_its_parallelism_is_refused(variant, message):
    from fixtures.configs import base_config

    cfg = base_config()
    cfg["variants"]["tp4"] = {"extends": "baseline", **variant}
    with pytest.raises(ConfigError) as err:
        load(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)
    cfg["variants"]["tp4"]["gpus"] = 4
    assert load(cfg).gpus("tp4") == 4
