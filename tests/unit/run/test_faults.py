"""Failures as data: every planted fault runs the real lifecycle (launch, readiness,
levels, teardown) against a real server process on loopback, and must end as a
recorded result with nothing left running."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.paths import ROOT

from servesweep.run.cell import run_cell
from servesweep.server.process import port_is_free
from servesweep.server.procs import group_members
from servesweep.sweep.config import load

FAULT_SERVER = ROOT / "tests" / "fixtures" / "fault_server.py"
COMMAND = f"{{python}} {FAULT_SERVER} --host {{host}} --port {{port}}"
STACK = {"stack": "test", "kind": "existing", "python": sys.executable}


def fault_config(flags: dict, levels=(1, 4, 16), options=None, **benchmark) -> dict:
    return {
        "stacks": {"test": {"kind": "existing", "python": sys.executable}},
        "models": {"tiny": {"path": "unused"}},
        "engine": "command",
        "server": {"boot_timeout_s": 15, "teardown_grace_s": 3},
        "variants": {"baseline": {"command": COMMAND, "flags": flags, **(options or {})}},
        "benchmark": {
            "levels": list(levels),
            "warmup": 0,
            "num_prompts": {"per_level": 1, "min": 8},
            "workload": {"kind": "random", "input_tokens": 8, "output_tokens": 8, "seed": 1},
            "request_timeout_s": 20,
            "stall_timeout_s": 3,
            **benchmark,
        },
    }


def run(tmp_path, tiny_model, flags, boot_retries=0, server=None, options=None, **benchmark):
    config = fault_config(flags, options=options, **benchmark)
    config["server"].update(server or {})
    spec = load(config).spec("test", "tiny", "baseline")
    lines: list[str] = []
    cell = run_cell(
        spec,
        STACK,
        tiny_model,
        tmp_path / "cell",
        tmp_path / "cell" / "server.log",
        log=lines.append,
        boot_retries=boot_retries,
    )
    cell["job_log"] = lines
    return cell


def assert_nothing_left(cell: dict) -> None:
    pid = cell["server_pid"]
    if pid is not None:
        assert not group_members(pid), f"group {pid} still has {group_members(pid)}"
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert cell["teardown"] is None or cell["teardown"]["clean"], cell["teardown"]
    assert port_is_free(cell["host"], cell["port"])


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def statuses(cell: dict) -> list[tuple[int, str]]:
    return [(lv["level"], lv["status"]) for lv in cell["levels"]]


@pytest.mark.slow
def test_healthy_server_is_ok(tmp_path, tiny_model):
    cell = run(tmp_path, tiny_model, {})
    assert cell["status"] == "ok", cell["failure"]
    assert statuses(cell) == [(1, "ok"), (4, "ok"), (16, "ok")]
    assert all(lv["completed"] == lv["num_prompts"] for lv in cell["levels"])
    assert (tmp_path / "cell" / "cell.json").exists()
    assert_nothing_left(cell)


@pytest.mark.parametrize("signature", ["oom", "nccl", "assertion", "cuda_error"])
def test_crash_during_boot_is_recorded_with_its_cause(tmp_path, tiny_model, signature):
    cell = run(tmp_path, tiny_model, {"fault": "crash_boot", "signature": signature})
    failure = cell["failure"]
    assert cell["status"] == "failed"
    assert (failure["stage"], failure["cause"]) == ("boot", signature)
    assert any("fault server pid" in line for line in failure["log_tail"])
    assert statuses(cell) == [(1, "not_run"), (4, "not_run"), (16, "not_run")]
    assert_nothing_left(cell)


@pytest.mark.slow
def test_never_ready_hits_the_boot_timeout(tmp_path, tiny_model):
    start = time.monotonic()
    cell = run(tmp_path, tiny_model, {"fault": "hang_boot"}, server={"boot_timeout_s": 2})
    assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("boot", "boot_timeout")
    assert "not ready after 2 s" in cell["failure"]["message"]
    assert time.monotonic() - start < 15
    assert_nothing_left(cell)


@pytest.mark.slow
def test_slow_boot_within_the_timeout_is_fine(tmp_path, tiny_model):
    cell = run(tmp_path, tiny_model, {"fault": "slow_boot", "boot-s": 2}, levels=(1,))
    assert cell["status"] == "ok", cell["failure"]
    assert cell["boot_s"] >= 2
    assert_nothing_left(cell)


@pytest.mark.slow
def test_boot_retry_recovers_a_flaky_boot(tmp_path, tiny_model):
    marker = tmp_path / "crashed-once"
    flags = {"fault": "crash_once", "marker": str(marker), "signature": "nccl"}
    cell = run(tmp_path, tiny_model, flags, boot_retries=1, levels=(1,))
    assert marker.exists()
    assert cell["status"] == "ok", cell["failure"]
    assert [a["cause"] for a in cell["boot_attempts"]] == ["nccl"]
    assert_nothing_left(cell)


@pytest.mark.slow
def test_boot_retries_are_bounded(tmp_path, tiny_model):
    cell = run(tmp_path, tiny_model, {"fault": "crash_boot"}, boot_retries=2, levels=(1,))
    assert cell["status"] == "failed"
    assert [a["cause"] for a in cell["boot_attempts"]] == ["oom"] * 3
    assert_nothing_left(cell)


def test_rejected_flag_fails_at_once_and_is_not_relaunched(tmp_path, tiny_model):
    # The fault server parses its flags with argparse, as vLLM does: an unknown flag ends
    # it with "fault_server.py: error: unrecognized arguments: ..." and exit status 2.
    cell = run(tmp_path, tiny_model, {"no-such-flag": True}, boot_retries=1, levels=(1,))
    failure = cell["failure"]
    assert (failure["stage"], failure["cause"]) == ("boot", "rejected_args")
    assert failure["message"] == (
        "server refused its command line (exit 2): "
        "fault_server.py: error: unrecognized arguments: --no-such-flag"
    )
    assert failure["log_tail"][-1] == failure["message"].split(": ", 1)[1]
    assert [a["cause"] for a in cell["boot_attempts"]] == ["rejected_args"]  # no relaunch
    assert_nothing_left(cell)


@pytest.mark.slow
def test_gauges_peak_while_a_level_runs(tmp_path, tiny_model):
    # The fault server's /metrics counts the completions it is serving: 4 at level 4 while
    # the level runs, 0 before and after it (what the snapshots around the level see).
    options = {
        "metrics_path": "/metrics",
        "peak_gauges": {"in_flight": "fault_requests_in_flight", "absent": "no_such_metric"},
    }
    flags = {"gap-ms": 50, "tokens": 12}
    cell = run(tmp_path, tiny_model, flags, options=options, levels=(4,))
    assert cell["status"] == "ok", cell["failure"]
    (level,) = cell["levels"]
    peaks = level["server_peaks"]
    assert peaks["peaks"] == {"in_flight": 4.0}
    assert peaks["samples"] >= 2 and peaks["interval_s"] == 0.5 and "errors" not in peaks
    before = level["server_before"]["metrics"]
    after = level["server_after"]["metrics"]
    assert before['fault_requests_in_flight{server="fault"}'] == 0
    assert after['fault_requests_in_flight{server="fault"}'] == 0
    assert level["server_counters"]["fault_requests_total"] == level["num_prompts"]
    assert_nothing_left(cell)


def test_death_at_high_concurrency_keeps_earlier_levels(tmp_path, tiny_model):
    cell = run(tmp_path, tiny_model, {"fault": "die_at", "at": 10, "signature": "nccl"})
    assert cell["status"] == "failed"
    assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("level", "nccl")
    assert cell["failure"]["level"] == 16
    # The record names the exception, not only the exit status.
    assert cell["failure"]["message"] == (
        "server exited with code 1 during level 16: torch.distributed.DistBackendError: NCCL "
        "error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled "
        "cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3"
    )
    assert statuses(cell) == [(1, "ok"), (4, "ok"), (16, "failed")]
    levels = tmp_path / "cell" / "levels"
    for kept in ("L1_i0", "L4_i0"):
        assert (levels / f"{kept}.json").exists()
        assert len((levels / f"{kept}.requests.jsonl").read_text().splitlines()) == 8
    assert "ncclUnhandledCudaError" in "\n".join(cell["failure"]["log_tail"])
    assert_nothing_left(cell)


@pytest.mark.slow
def test_hang_mid_stream_is_caught_by_progress_not_health(tmp_path, tiny_model):
    start = time.monotonic()
    cell = run(tmp_path, tiny_model, {"fault": "hang_at", "at": 10})
    assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("level", "hung")
    assert statuses(cell) == [(1, "ok"), (4, "ok"), (16, "failed")]
    assert time.monotonic() - start < 30  # stall_timeout_s is 3
    assert_nothing_left(cell)


@pytest.mark.slow
def test_malformed_stream(tmp_path, tiny_model):
    # Well-formed for the readiness and liveness probes, garbage afterwards.
    cell = run(tmp_path, tiny_model, {"fault": "malformed", "after": 2}, levels=(1,))
    level = cell["levels"][0]
    assert cell["status"] == "failed" and level["status"] == "failed"
    assert level["errors"].get("bad_stream") == level["num_prompts"]
    assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("level", "http_errors")
    assert_nothing_left(cell)


@pytest.mark.parametrize(
    "fault, seen",
    [
        ("malformed", "bad_stream: not JSON: b'{this is not json'"),
        ("http_422", "HTTP 422"),
        ("empty", "empty"),
    ],
)
def test_a_wrong_readiness_answer_fails_fast_without_a_relaunch(tmp_path, tiny_model, fault, seen):
    # Up, but answering the readiness generation wrongly: waiting (boot_timeout_s is 60)
    # or relaunching (retries.boot 1) would not fix it.
    start = time.monotonic()
    cell = run(
        tmp_path,
        tiny_model,
        {"fault": fault, "after": 0, "fraction": 1.0},
        boot_retries=1,
        levels=(1,),
        server={"boot_timeout_s": 60},
    )
    elapsed = time.monotonic() - start
    failure = cell["failure"]
    assert (failure["stage"], failure["cause"]) == ("boot", "bad_answer"), failure
    assert seen in failure["message"], failure["message"]
    assert len(cell["boot_attempts"]) == 1
    assert elapsed < 10, elapsed
    assert_nothing_left(cell)


@pytest.mark.slow
def test_a_hanging_readiness_generation_ends_within_the_boot_timeout(tmp_path, tiny_model):
    # Health answers, the generation never does: the boot still ends at boot_timeout_s
    # (request_timeout_s, 20 s here, does not stretch it).
    from servesweep.server.readiness import BOOT_TIMEOUT_MARGIN_S

    boot_timeout = 3
    start = time.monotonic()
    cell = run(
        tmp_path,
        tiny_model,
        {"fault": "hang_at", "at": 1},
        levels=(1,),
        server={"boot_timeout_s": boot_timeout},
    )
    failure = cell["failure"]
    assert (failure["stage"], failure["cause"]) == ("boot", "boot_timeout"), failure
    assert "generation" in failure["message"]
    # The whole cell: launch, the bounded boot, teardown (3 s grace for the hung server).
    assert time.monotonic() - start < boot_timeout + BOOT_TIMEOUT_MARGIN_S + 3 + 2
    boot_ends = [ln for ln in cell["job_log"] if "FAILED at boot" in ln]
    assert boot_ends, cell["job_log"]
    assert_nothing_left(cell)


@pytest.mark.slow
@pytest.mark.parametrize("fault, kind", [("http_500", "http_500"), ("http_429", "http_429")])
def test_some_http_errors_are_counted_not_fatal(tmp_path, tiny_model, fault, kind):
    cell = run(
        tmp_path,
        tiny_model,
        {"fault": fault, "fraction": 0.25, "seed": 3, "after": 2},
        levels=(1,),
        num_prompts={"per_level": 1, "min": 40},
    )
    level = cell["levels"][0]
    assert cell["status"] == "ok" and level["status"] == "ok"
    assert 0 < level["errors"][kind] < 20
    assert level["completed"] + level["failed"] == 40
    assert_nothing_left(cell)


@pytest.mark.slow
def test_mostly_http_errors_fail_the_level(tmp_path, tiny_model):
    cell = run(
        tmp_path, tiny_model, {"fault": "http_500", "fraction": 0.9, "after": 2}, levels=(1, 4)
    )
    assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("level", "http_errors")
    assert statuses(cell) == [(1, "failed"), (4, "not_run")]
    assert_nothing_left(cell)


def test_port_taken_by_another_process_is_refused_and_left_alone(tmp_path, tiny_model):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,sys,time; s=socket.socket(); "
            "s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(holder.stdout.readline())
        cell = run(tmp_path, tiny_model, {}, server={"port": port}, levels=(1,))
        assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("launch", "port_in_use")
        assert cell["server_pid"] is None
        assert holder.poll() is None  # someone else's process: never touched
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_sigterm_ignored_escalates_to_sigkill(tmp_path, tiny_model):
    cell = run(tmp_path, tiny_model, {"ignore-term": True}, levels=(1,))
    assert cell["status"] == "ok", cell["failure"]
    assert cell["teardown"]["escalated"] and cell["teardown"]["clean"]
    assert_nothing_left(cell)


@pytest.mark.slow
def test_forked_workers_that_leave_the_group_are_ended(tmp_path, tiny_model):
    flags = {"fork": 2, "setsid": True, "ignore-term": True}
    cell = run(tmp_path, tiny_model, flags, levels=(1,))
    assert cell["status"] == "ok", cell["failure"]
    assert cell["teardown"]["clean"] and cell["teardown"]["escalated"]
    assert_nothing_left(cell)


def test_signature_printed_then_exit_mid_level(tmp_path, tiny_model):
    flags = {"fault": "exit_signature", "after": 12, "signature": "assertion"}
    cell = run(tmp_path, tiny_model, flags)
    assert (cell["failure"]["stage"], cell["failure"]["cause"]) == ("level", "assertion")
    assert statuses(cell)[0] == (1, "ok")
    assert_nothing_left(cell)


def test_port_is_taken_while_holder_runs():
    # Guard for the port test above: our free-port check sees a listening socket.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not port_is_free("127.0.0.1", sock.getsockname()[1])


@pytest.mark.slow
def test_a_job_time_limit_ends_the_cell_as_a_failed_result_in_time(tmp_path, tiny_model):
    # A slow server (40 requests x 8 tokens x 50 ms: ~16 s a level) and a job that will be
    # killed 35 s from now: with the 30 s margin the cell must stop itself within ~5 s.
    from servesweep.run.scheduler import TIME_LIMIT_MARGIN_S

    config = fault_config({"gap-ms": 50}, levels=(1, 4), num_prompts={"per_level": 1, "min": 40})
    spec = load(config).spec("test", "tiny", "baseline")
    lines: list[str] = []
    start = time.monotonic()
    cell = run_cell(
        spec,
        STACK,
        tiny_model,
        tmp_path / "cell",
        tmp_path / "cell" / "server.log",
        log=lines.append,
        deadline=time.time() + TIME_LIMIT_MARGIN_S + 5,
    )
    elapsed = time.monotonic() - start
    failure = cell["failure"]
    assert (failure["stage"], failure["cause"]) == ("level", "time_limit"), failure
    assert cell["levels"][0]["cause"] == "time_limit"
    assert elapsed < 5 + 10, elapsed  # aborted at the cutoff, torn down, recorded
    assert (tmp_path / "cell" / "cell.json").exists()
    assert_nothing_left(cell)


def test_scheduler_info_names_the_slurm_job(monkeypatch):
    from servesweep.run.scheduler import job_deadline, scheduler_info

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert scheduler_info() is None
    assert job_deadline(None) is None
    assert job_deadline(2, started=1000.0) == 1000.0 + 120
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_END_TIME", "1900")  # newer SLURM sets it
    info = scheduler_info()
    assert info["slurm_job_id"] == "4242" and info["hostname"]
    assert job_deadline(60, started=1000.0) == 1900.0  # the earlier of the two


def test_boot_facts_say_what_the_compile_caches_held(tmp_path, tiny_model, monkeypatch):
    # An engine's cache directories as the launch found them, and after the boot: one holds
    # a kernel, one is empty (a cache a later boot would fill), so the boot was `partial`.
    from servesweep.server.engines.command import CommandEngine

    warm, empty = tmp_path / "warm", tmp_path / "empty"
    warm.mkdir()
    (warm / "kernel.bin").write_bytes(b"k" * 64)
    seen = []

    def cache_dirs(self, env):
        seen.append(env["PATH"])  # named from the server's own environment
        return {"warm": warm, "empty": empty}

    monkeypatch.setattr(CommandEngine, "cache_dirs", cache_dirs)
    cell = run(tmp_path, tiny_model, {}, levels=(1,))
    assert cell["status"] == "ok", cell["failure"]
    facts = cell["boot_facts"]
    assert facts["caches"] == "partial"
    assert facts["cache_dirs"]["warm"] == {
        "path": str(warm),
        "files": 1,
        "bytes": 64,
        "files_after_boot": 1,
        "bytes_after_boot": 64,
    }
    assert facts["cache_dirs"]["empty"]["files"] == 0
    assert len(seen) == 2  # read before the launch and after the boot
    assert_nothing_left(cell)
