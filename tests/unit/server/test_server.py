"""The server lifecycle against small real processes on loopback (no engine needed)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from servesweep.server.failures import (
    BOOT_RETRY_CAUSES,
    LAST_ERROR_CHARS,
    classify_exit,
    classify_log,
    exit_message,
    last_error,
    log_tail,
)
from servesweep.server.process import ServerProcess, free_port, port_is_free
from servesweep.server.procs import group_members
from servesweep.server.readiness import BootFailure, wait_ready

# A minimal HTTP server: /health and /v1/models; options plant faults.
SERVER = textwrap.dedent(
    """
    import http.server, json, os, signal, sys, time
    port = int(sys.argv[1]); mode = sys.argv[2]
    if "argparse" in mode:  # parse the flags after the mode, as servers do
        import argparse
        print("INFO importing everything first (vLLM logs ImportError warnings here)", flush=True)
        # SGLang 0.5.17's parser is "sglang serve" (server_args.prepare_server_args).
        prog = "sglang serve" if "sglang" in mode else "api_server.py"
        parser = argparse.ArgumentParser(prog=prog)
        parser.add_argument("--max-model-len", type=int)
        parser.parse_args(sys.argv[3:])
    if "ignore-term" in mode:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "fork" in mode:
        for _ in range(2):
            if os.fork() == 0:
                if "ignore-term" in mode:
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                if "setsid" in mode:
                    os.setsid()
                while True:
                    time.sleep(1)
    if "selfkill" in mode:  # SGLang's end on SM90: a traceback, then SIGKILL of its tree
        print(os.environ["SELF_KILL_LOG"], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if "crash" in mode:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body)))
            self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    if "slow" in mode:
        time.sleep(1.0)
    print("listening", flush=True)
    if "hang" in mode:
        time.sleep(3600)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def launch(tmp_path, mode, *flags, env=None):
    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    server = ServerProcess(
        [sys.executable, str(script), str(port), mode, *flags],
        env or {},
        tmp_path / "server.log",
        "127.0.0.1",
        port,
    )
    return server


def assert_gone(server, pids):
    assert not group_members(server.pgid)
    for pid in pids:
        assert (
            not os.path.exists(f"/proc/{pid}")
            or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
        )
    assert port_is_free("127.0.0.1", server.port)


def GOOD(left):  # a readiness generation that streamed 4 tokens
    return (None, None, 4)


def test_ready_then_clean_teardown(tmp_path):
    server = launch(tmp_path, "ok")
    calls = []
    try:
        boot = wait_ready(
            server,
            "/health",
            "/v1/models",
            "m",
            20,
            generate=lambda left: calls.append(left) or (None, None, 4),
        )
        assert boot > 0 and len(calls) == 1 and 0 < calls[0] <= 20
    finally:
        result = server.stop(grace_s=5)
    assert result.clean and not result.escalated
    assert_gone(server, [server.pid])


@pytest.mark.slow
def test_ignored_sigterm_and_forked_children_are_killed(tmp_path):
    server = launch(tmp_path, "ok-fork-ignore-term-setsid")
    try:
        wait_ready(server, "/health", "/v1/models", "m", 20, generate=GOOD)
        time.sleep(0.3)
        from servesweep.server.procs import descendants

        children = descendants(server.pid)
        assert len(children) == 2
    finally:
        result = server.stop(grace_s=1)
    assert result.escalated and result.clean, result
    assert_gone(server, [server.pid, *children])


def test_crash_during_boot_is_classified(tmp_path):
    server = launch(tmp_path, "crash")
    try:
        with pytest.raises(BootFailure) as err:
            wait_ready(server, "/health", "/v1/models", "m", 20, generate=GOOD)
    finally:
        server.stop(grace_s=1)
    assert err.value.cause == "oom"
    assert err.value.message.startswith("server exited with code 1 during boot (")
    assert err.value.message.endswith(
        "): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert any("CUDA out of memory" in line for line in log_tail(server.log_path))


def test_rejected_flag_is_its_own_cause(tmp_path):
    # A real argparse refusal: usage on stderr, "PROG: error: ...", exit status 2 (what
    # vLLM 0.26.0 did on the H200 for --no-such-flag). Not `died`: a relaunch cannot cure it.
    server = launch(tmp_path, "argparse", "--max-model-len", "2048", "--no-such-flag")
    try:
        with pytest.raises(BootFailure) as err:
            wait_ready(server, "/health", "/v1/models", "m", 20, generate=GOOD)
    finally:
        server.stop(grace_s=1)
    assert server.returncode == 2
    assert err.value.cause == "rejected_args"
    assert err.value.message == (
        "server refused its command line (exit 2): "
        "api_server.py: error: unrecognized arguments: --no-such-flag"
    )
    assert "rejected_args" not in BOOT_RETRY_CAUSES
    tail = log_tail(server.log_path)
    assert tail[-1] == "api_server.py: error: unrecognized arguments: --no-such-flag"
    assert any(line.startswith("usage: api_server.py") for line in tail)
    # The same flags accepted: the server comes up.
    good = launch(tmp_path, "argparse-ok", "--max-model-len", "2048")
    try:
        wait_ready(good, "/health", "/v1/models", "m", 20, generate=GOOD)
    finally:
        good.stop(grace_s=1)


def test_sglang_rejected_flag_is_its_own_cause(tmp_path):
    # SGLang 0.5.17 refuses a flag as "sglang serve: error: ..." (a prog of two words).
    server = launch(tmp_path, "argparse-sglang", "--no-such-flag")
    try:
        with pytest.raises(BootFailure) as err:
            wait_ready(server, "/health", "/v1/models", "m", 20, generate=GOOD)
    finally:
        server.stop(grace_s=1)
    assert (server.returncode, err.value.cause) == (2, "rejected_args")
    assert err.value.message.endswith("sglang serve: error: unrecognized arguments: --no-such-flag")


# SGLang 0.5.17 refusing --enable-single-batch-overlap on the H200 (its server.log's end):
# the scheduler raised, the main process killed its own tree with SIGKILL.
SGLANG_SELF_KILL = (
    "    raise ValueError(\n"
    "ValueError: SBO (single batch overlap) is not supported on SM90 GPUs with latest "
    "sgl-deep-gemm wheel. Please try removing --enable-single-batch-overlap argument.\n\n"
    "[2026-12-03 14:50:06] Received sigquit from a child process. It usually means the child "
    "failed.\n"
    "[2026-12-03 14:50:06] kill_process_tree called: parent_pid=3424, include_parent=True, "
    "pid=3424\n"
)


def test_a_server_that_killed_itself_is_not_the_oom_killer():
    assert classify_exit(-9, SGLANG_SELF_KILL) == "died"
    assert classify_exit(-9, "INFO serving\n") == "oom"  # a bare SIGKILL still is


SBO_ERROR = (
    "ValueError: SBO (single batch overlap) is not supported on SM90 GPUs with latest "
    "sgl-deep-gemm wheel. Please try removing --enable-single-batch-overlap argument."
)


def test_a_boot_that_killed_itself_names_its_exception(tmp_path):
    # The H100 on 2026-12-07: the record said only "exited with code -9 during boot"; the
    # ValueError sat at the end of a 50-line tail whose first line is 9 kB of server_args.
    log = "[21:28:16] server_args=ServerArgs(" + "x=1, " * 2000 + ")\n" + SGLANG_SELF_KILL
    server = launch(tmp_path, "selfkill", env={"SELF_KILL_LOG": log})
    try:
        with pytest.raises(BootFailure) as err:
            wait_ready(server, "/health", "/v1/models", "m", 20, generate=GOOD)
    finally:
        server.stop(grace_s=1)
    assert (server.returncode, err.value.cause) == (-9, "died")
    assert err.value.message.startswith("server exited with code -9 during boot (")
    assert err.value.message.endswith("): " + SBO_ERROR)


def test_last_error_is_the_last_exception_line_only():
    assert last_error(SGLANG_SELF_KILL) == SBO_ERROR
    assert last_error("INFO ready\nWARNING: slow\nError rate 0\n") is None
    assert last_error("RuntimeError: first\nINFO\nKeyError: 'late'\n") == "KeyError: 'late'"
    assert last_error("  File x\nsystemd Error: lower\nNo error: here\n") is None
    long = last_error("OSError: " + "y" * 1000)
    assert long is not None and len(long) == LAST_ERROR_CHARS and long.endswith("...")
    assert (
        exit_message(1, "INFO\n", "during level 10") == "server exited with code 1 during level 10"
    )


def test_argparse_error_needs_exit_status_2():
    text = "INFO loading\nImportError: optional module\napi_server.py: error: bad value\n"
    assert classify_exit(2, text) == "rejected_args"
    assert classify_exit(1, text) == "import_error"  # not argparse's exit: the log decides
    assert classify_exit(2, "Traceback ...\nRuntimeError: boom\n") == "died"


def test_never_ready_times_out(tmp_path):
    server = launch(tmp_path, "hang")
    start = time.monotonic()
    try:
        with pytest.raises(BootFailure) as err:
            wait_ready(server, "/health", "/v1/models", "m", 1.5, generate=GOOD)
    finally:
        result = server.stop(grace_s=2)
    assert err.value.cause == "boot_timeout"
    assert time.monotonic() - start < 8
    assert result.clean


def test_model_must_be_listed(tmp_path):
    server = launch(tmp_path, "ok")
    try:
        with pytest.raises(BootFailure) as err:
            wait_ready(server, "/health", "/v1/models", "other", 1.5, generate=GOOD)
    finally:
        server.stop(grace_s=2)
    assert err.value.cause == "bad_answer"
    assert "lists ['m'], not 'other'" in err.value.message


def test_watchdog_ends_the_group_when_the_owner_is_killed(tmp_path):
    # The owner is a separate Python process that launches a server and is SIGKILLed.
    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    owner_code = textwrap.dedent(
        f"""
        import sys, time
        from servesweep.server.process import ServerProcess
        s = ServerProcess([sys.executable, {str(script)!r}, "{port}", "ok-fork"], {{}},
                          {str(tmp_path / "s.log")!r}, "127.0.0.1", {port})
        print(s.pgid, flush=True)
        time.sleep(3600)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True, env=env
    )
    pgid = int(owner.stdout.readline())
    deadline = time.monotonic() + 10
    while len(group_members(pgid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(group_members(pgid)) == 3  # leader + 2 forked children
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 15
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_members(pgid)


@pytest.mark.parametrize(
    "line, cause",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "oom"),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, unhandled cuda error",
            "nccl",
        ),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
        ("AssertionError: Prefill batch size mismatch", "assertion"),
        ("ModuleNotFoundError: No module named 'sgl_kernel'", "import_error"),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
            "address already in use",
            "port_in_use",
        ),
        ("INFO:     Uvicorn running on http://127.0.0.1:8000", None),
    ],
)
def test_log_classification(line, cause):
    assert classify_log(f"some startup line\n{line}\n") == cause


def test_assertion_with_oom_is_oom():
    text = "AssertionError\n...\ntorch.OutOfMemoryError: CUDA out of memory."
    assert classify_log(text) == "oom"


def test_sigkill_without_signature_is_host_oom():
    assert classify_exit(-9, "nothing useful") == "oom"
    assert classify_exit(1, "nothing useful") == "died"


@pytest.mark.parametrize(
    "error, detail, tokens, verdict",
    [
        (None, None, 4, "ready"),
        (None, None, 0, "wrong"),  # up, but generated nothing
        ("connect", "Connection refused", 0, "not_up"),
        ("disconnect", None, 0, "not_up"),
        ("timeout", None, 0, "not_up"),
        ("http_503", "loading", 0, "not_up"),
        ("http_500", "", 0, "not_up"),
        ("http_429", "", 0, "not_up"),
        ("http_422", '{"detail": "extra_forbidden"}', 0, "wrong"),
        ("http_404", "Not Found", 0, "wrong"),
        ("bad_stream", "not JSON: b'{x'", 0, "wrong"),
        ("stream_error", "boom", 0, "wrong"),
        ("empty", None, 0, "wrong"),
    ],
)
def test_readiness_generation_verdicts(error, detail, tokens, verdict):
    from servesweep.server.readiness import judge_generation

    got, seen = judge_generation(error, detail, tokens)
    assert got == verdict
    if detail:
        assert detail[:20] in seen  # the excerpt travels into the failure message


@pytest.mark.parametrize(
    "status, verdict",
    [(200, "ready"), (0, "not_up"), (503, "not_up"), (429, "not_up"), (404, "wrong")],
)
def test_readiness_status_verdicts(status, verdict):
    from servesweep.server.readiness import judge_status

    assert judge_status(status) == verdict
