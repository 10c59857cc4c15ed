"""Readiness: is a launched server up and answering correctly?

Ready = the process is alive, its health endpoint answers 200, the model is listed (where
the engine lists models) and one real short generation streams text. Polling goes on only
while the server is not up yet; a server that exits, or is up and answers wrongly, fails at
once; the whole wait ends within its timeout.
"""

from __future__ import annotations

import json
import subprocess
import time

from servesweep.server.failures import (
    classify_exit,
    classify_log,
    exit_message,
    read_log,
    rejected_args,
)
from servesweep.server.http import http_get
from servesweep.server.process import ServerProcess


class BootFailure(Exception):
    """The server did not become ready; `cause` is a failure class."""

    def __init__(self, cause: str, message: str):
        super().__init__(message)
        self.cause = cause
        self.message = message


def model_ids(body: bytes) -> list[str] | None:
    """The ids an OpenAI /v1/models answer lists (None when it is not such an answer)."""
    try:
        return [m.get("id") for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        return None


def model_listed(body: bytes, model_name: str | None) -> bool:
    """Whether an OpenAI /v1/models answer lists the model (any model when name is None)."""
    ids = model_ids(body)
    if not ids:
        return False
    return model_name is None or model_name in ids


# What a readiness check saw: the server is not up yet (keep polling), it is up and
# answered wrongly (fail at once: waiting will not fix it), or it is ready.
NOT_UP, WRONG, READY = "not_up", "wrong", "ready"

# HTTP statuses of a server that is up but still loading or busy.
BUSY_STATUSES = (408, 425, 429)
# Client-side request errors of a server that is not (fully) up: nothing listening, the
# connection dropped, or no answer in the time left.
NOT_UP_ERRORS = ("connect", "disconnect", "retry", "timeout")

# How far past `boot_timeout_s` a boot may end: the last check's own bookkeeping.
BOOT_TIMEOUT_MARGIN_S = 1.0


def judge_status(status: int) -> str:
    """NOT_UP, WRONG or READY for an HTTP status of a readiness endpoint."""
    if status == 200:
        return READY
    if status == 0 or status >= 500 or status in BUSY_STATUSES:
        return NOT_UP
    return WRONG


def judge_generation(error: str | None, detail: str | None, tokens: int) -> tuple[str, str]:
    """(verdict, what was seen) for the readiness generation. `error` is the client's
    request error (`connect`, `http_422`, `bad_stream`, …) or None; `tokens` what it
    generated."""
    if error is None:
        if tokens > 0:
            return READY, ""
        return WRONG, "an empty completion (0 tokens)"
    excerpt = f": {detail[:200]}" if detail else ""
    if error.startswith("http_") and error[5:].isdigit():
        verdict = judge_status(int(error[5:]))
        return (NOT_UP if verdict == READY else verdict), f"HTTP {error[5:]}{excerpt}"
    if error in NOT_UP_ERRORS:
        return NOT_UP, f"{error}{excerpt}"
    if error == "empty":
        return WRONG, "empty: a stream that finished without any text"
    return WRONG, f"{error}{excerpt}"  # bad_stream, stream_error, empty, client_error


def wait_ready(
    server: ServerProcess,
    health_path: str,
    models_path: str | None,
    model_name: str | None,
    timeout_s: float,
    generate,
    log=print,
) -> float:
    """Poll until alive + health + model listed + one real generation; return seconds.

    `generate(timeout_s)` runs one short generation within `timeout_s` and returns
    (error, detail, tokens) as `judge_generation` takes them. Polling goes on only while
    the server is not up yet; a server that exits fails at once, one that answers wrongly
    fails at once with cause `bad_answer`, and the whole wait, generation included, ends
    within `timeout_s` (+ BOOT_TIMEOUT_MARGIN_S) with cause `boot_timeout`.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    delay = 0.2
    last = "no answer yet"

    def left() -> float:
        return max(0.05, deadline - time.monotonic())

    def wrong(what: str) -> BootFailure:
        return BootFailure("bad_answer", f"server is up but answered wrongly: {what}")

    while True:
        if not server.alive():
            code, log_text = server.returncode, read_log(server.log_path)
            refused = rejected_args(code, log_text)
            if refused:
                raise BootFailure(
                    "rejected_args", f"server refused its command line (exit {code}): {refused}"
                )
            cause = classify_exit(code, log_text, default="died")
            raise BootFailure(cause, exit_message(code, log_text, f"during boot ({last})"))
        if time.monotonic() >= deadline:
            raise BootFailure(
                "boot_timeout", f"not ready after {timeout_s:g} s (last check: {last})"
            )
        status, body = http_get(server.base_url + health_path, timeout_s=min(5.0, left()))
        verdict = judge_status(status)
        last = f"{health_path} HTTP {status}" if status else f"no answer on {health_path}"
        if verdict == WRONG:
            raise wrong(f"{health_path} HTTP {status}: {body[:200]!r}")
        if verdict == READY and models_path:
            status, body = http_get(server.base_url + models_path, timeout_s=min(5.0, left()))
            verdict = judge_status(status)
            last = f"{models_path} HTTP {status}" if status else f"no answer on {models_path}"
            if verdict == WRONG:
                raise wrong(
                    f"{models_path} HTTP {status}: {body[:200]!r} (an engine without it "
                    "takes `models_path: null`)"
                )
            if verdict == READY and not model_listed(body, model_name):
                raise wrong(
                    f"{models_path} lists {model_ids(body)!r}, not {model_name!r} "
                    "(set the variant's `model_name`)"
                )
        if verdict == READY:
            verdict, seen = judge_generation(*generate(left()))
            last = f"generation: {seen}" if seen else "generation ok"
            if verdict == READY:
                return time.monotonic() - start
            if verdict == WRONG:
                raise wrong(f"the readiness generation got {seen}")
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 2.0)


def diagnose(server: ServerProcess, observed: str, exit_wait_s: float = 2.0) -> tuple[str, bool]:
    """(cause, died) for a fault the client observed. A server that is dying gets a moment
    to exit, so a crash is not mistaken for a hang; a live server's log may still name the
    cause (an NCCL error, say) better than the symptom does."""
    try:
        server.proc.wait(timeout=exit_wait_s)
    except subprocess.TimeoutExpired:
        return classify_log(read_log(server.log_path)) or observed, False
    return classify_exit(server.returncode, read_log(server.log_path)), True


def exited(server: ServerProcess, when: str = "") -> str:
    """What a dead server's record says: its exit status and its log's last exception."""
    return exit_message(server.returncode, read_log(server.log_path), when)


def check_alive(
    server: ServerProcess, health_path: str, generate, probe_s: float
) -> tuple[str, str] | None:
    """Liveness before a level: alive, health answers, and a 2-token generation finishes
    within `probe_s` (/health alone misses a hung-but-healthy server). `generate(timeout_s)`
    returns (error, detail, tokens). Returns (cause, message) when the server is not fit to
    measure, else None."""
    if not server.alive():
        return diagnose(server, "died")[0], exited(server)
    status, _ = http_get(server.base_url + health_path, timeout_s=10)
    if status != 200:
        cause, died = diagnose(server, "hung")
        if died:
            return cause, exited(server)
        return cause, f"health check answered {status or 'nothing'}"
    error, detail, tokens = generate(probe_s)
    if error is None and tokens > 0:
        return None
    timed_out = error == "timeout"
    cause, died = diagnose(server, "hung" if timed_out else "http_errors")
    if died:
        return cause, exited(server)
    seen = "timed out" if timed_out else f"{error}{f': {detail[:200]}' if detail else ''}"
    return cause, f"liveness probe: {seen}"
