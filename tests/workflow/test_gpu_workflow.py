"""GPU slots through the real workflow, with fake GPUs: Snakemake's `gpu` resource decides
how many cells run side by side, the slots which GPUs each one's server sees."""

import datetime as dt
import json
import os
import re

import pytest
from fixtures.faults import config, fault_servers_running, kill_if_running, write
from fixtures.workflow import run_snakemake

pytestmark = pytest.mark.workflow


def without_cuda_devices() -> dict:
    """This process's environment without CUDA_VISIBLE_DEVICES: the pool must come from
    gpu_slots.host_gpus, not from whatever the test runner inherited."""
    return {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}


def span(cell: dict) -> tuple[float, float]:
    return tuple(
        dt.datetime.fromisoformat(cell[k]).timestamp() for k in ("started_at", "finished_at")
    )


@pytest.mark.parametrize(
    ("gpu_resource", "host_gpus"), [(2, 2), (2, 1)], ids=["side-by-side", "locks-serialize"]
)
def test_one_gpu_cells_run_on_their_own_gpus(tmp_path, gpu_resource, host_gpus):
    # Slow enough (20 requests x 8 tokens x 25 ms, ~4 s a level) to overlap when parallel.
    variants = {
        "baseline": {"gpus": 1, "flags": {"gap-ms": 25}},
        "b": {"gpus": 1, "flags": {"gap-ms": 25}, "env": {"NCCL_DEBUG": "WARN"}},
    }
    slots = {"host_gpus": host_gpus, "lock_dir": str(tmp_path / "slots"), "wait_s": 120}
    cfg = config(variants, levels=(1,), min_prompts=20, gpu_slots=slots)
    env = without_cuda_devices()
    run = run_snakemake(
        tmp_path,
        "results/cells/test/tiny/baseline/r0/cell.json",
        "results/cells/test/tiny/b/r0/cell.json",
        "--cores",
        "2",
        "--resources",
        f"gpu={gpu_resource}",
        "--configfile",
        write(tmp_path, cfg),
        env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not fault_servers_running(tmp_path)
    cells, seen = {}, {}
    for v in variants:
        cell_dir = tmp_path / "results/cells/test/tiny" / v / "r0"
        cells[v] = json.loads((cell_dir / "cell.json").read_text())
        assert cells[v]["status"] == "ok", cells[v]["failure"]
        # What the server process itself saw.
        line = re.search(r"fault server env (\{.*\})", (cell_dir / "server.log").read_text())
        seen[v] = json.loads(line.group(1))
    a, b = cells["baseline"], cells["b"]
    for v, cell in cells.items():
        slots_rec = cell["gpu_slots"]
        assert slots_rec["source"] == "config" and len(slots_rec["held"]) == 1
        assert seen[v]["CUDA_VISIBLE_DEVICES"] == slots_rec["cuda_visible_devices"]
        # NVLink multicast off in every server, recorded outside the spec.
        for key, value in {
            "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1",
        }.items():
            assert seen[v][key] == value and cell["workflow_env"][key] == value
            assert key not in json.dumps(cell["spec"])
        assert cell["comm_env"] == seen[v]
    assert seen["b"]["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG" not in seen["baseline"]
    (a0, a1), (b0, b1) = span(a), span(b)
    overlap = a0 < b1 and b0 < a1
    if host_gpus == 2:
        assert overlap, (span(a), span(b))
        assert {a["gpu_slots"]["cuda_visible_devices"], b["gpu_slots"]["cuda_visible_devices"]} == {
            "0",
            "1",
        }
    else:
        # Snakemake would run both (gpu=2), but the host has one GPU: the second cell
        # waits for it rather than sharing it.
        assert a["gpu_slots"]["held"] == b["gpu_slots"]["held"] == ["0"]
        assert max(a["gpu_slots"]["waited_s"], b["gpu_slots"]["waited_s"]) > 1
        # The second took the GPU only once the first had torn down and let it go (the
        # records' times are to the second).
        first, second = sorted((a, b), key=lambda c: c["gpu_slots"]["waited_s"])
        took = span(second)[0] + second["gpu_slots"]["waited_s"]
        assert took >= span(first)[1] - 1.5, (span(first), span(second), took)


def test_a_cell_needing_more_gpus_than_the_host_has_is_a_failed_result(tmp_path):
    variants = {"baseline": {"flags": {}}, "tp4": {"gpus": 4, "flags": {}}}
    slots = {"host_gpus": 2, "lock_dir": str(tmp_path / "slots")}
    cfg = config(variants, levels=(1,), gpu_slots=slots)
    env = without_cuda_devices()
    run = run_snakemake(
        tmp_path,
        "results/report.html",
        "--cores",
        "1",
        "--configfile",
        write(tmp_path, cfg),
        env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cell = json.loads((tmp_path / "results/cells/test/tiny/tp4/r0/cell.json").read_text())
    assert cell["status"] == "failed" and cell["gpu_slots"] is None
    failure = cell["failure"]
    assert (failure["stage"], failure["cause"]) == ("launch", "gpu_slots")
    assert "needs 4 GPU(s)" in failure["message"] and "gpu_slots.host_gpus" in failure["message"]
    base = json.loads((tmp_path / "results/cells/test/tiny/baseline/r0/cell.json").read_text())
    # The baseline holds no GPU of a host that has some: it sees none.
    assert base["status"] == "ok" and base["gpu_slots"]["cuda_visible_devices"] == ""
    assert "gpu_slots" in (tmp_path / "results" / "report.html").read_text()


def test_each_cell_asks_snakemake_for_its_variants_gpus(tmp_path):
    variants = {
        "baseline": {"flags": {}},
        "tp2": {"gpus": 2, "flags": {"tp": 2}},
        "tp4": {"extends": "tp2", "gpus": 4, "flags": {"tp": 4}},
    }
    cfg = config(variants, levels=(1,))
    dry = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", write(tmp_path, cfg))
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    asked = {}
    for block in re.split(r"\n(?=rule \w+:)", dry.stdout):
        if block.startswith("rule run_cell:"):
            variant = re.search(r"variant=([\w.-]+)", block).group(1)
            gpu = re.search(r"resources: .*?\bgpu=(\d+)", block)
            asked[variant] = int(gpu.group(1)) if gpu else 0
    assert asked == {"baseline": 0, "tp2": 2, "tp4": 4}


def test_a_cell_killed_with_sigkill_leaves_its_gpu_free(tmp_path):
    import signal
    import subprocess

    from fixtures.faults import job_log_pids, wait_for
    from fixtures.workflow import snakemake_cmd

    from servesweep.server.gpu_slots import SlotsUnavailable, hold
    from servesweep.server.procs import group_members

    slots = {"host_gpus": 1, "lock_dir": str(tmp_path / "slots"), "wait_s": 30}
    # 40 requests x 8 tokens x 40 ms: a level is in progress when the job dies.
    cfg = config(
        {"baseline": {"gpus": 1, "flags": {"gap-ms": 40}}},
        levels=(1,),
        min_prompts=40,
        gpu_slots=slots,
    )
    env = without_cuda_devices()
    target = "results/cells/test/tiny/baseline/r0/cell.json"
    cmd = snakemake_cmd(tmp_path, target, "--cores", "1", "--configfile", write(tmp_path, cfg))
    owner = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    )
    job_log = tmp_path / "results/logs/run_cell/test/tiny/baseline/r0.log"
    try:
        job_pid, server_pid = wait_for(lambda: job_log_pids(job_log), 60, "the level to start")
        quick = {**slots, "wait_s": 0.3}
        with pytest.raises(SlotsUnavailable, match="held: 0"):
            with hold(1, quick, environ={}, log=lambda m: None):
                pass
        os.kill(job_pid, signal.SIGKILL)  # no teardown: the watchdog ends the server
        wait_for(lambda: not group_members(server_pid), 30, "the server's group to end")
        owner.wait(timeout=60)
    finally:
        kill_if_running(owner)
    assert not fault_servers_running(tmp_path)
    with hold(1, {**slots, "wait_s": 10}, environ={}, log=lambda m: None) as lease:
        assert lease.held == ["0"]
