"""The server lifecycle: launch in its own process group, wait until ready, tear down.

Contract (DESIGN.md §4): the server runs in a new session; a watchdog process ends the
group if the owner dies without tearing down (SIGKILL); teardown is SIGTERM to the group,
a grace period, SIGKILL, then a check that nothing of the group is left and the port is
free. Processes are only ever ended by the PIDs we started or found under them.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from servesweep.telemetry import wait_gpus_released

PR_SET_PDEATHSIG = 1


class BootFailure(Exception):
    """The server did not become ready; `cause` is a failure class."""

    def __init__(self, cause: str, message: str):
        super().__init__(message)
        self.cause = cause
        self.message = message


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _set_parent_death_signal() -> None:
    # Runs in the child between fork and exec: if the owner dies, the leader gets
    # SIGTERM. The watchdog covers the leader's own children.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def live_processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgrp) of every live (non-zombie) process, read from /proc."""
    table = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended while we looked
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z":
            table.append((int(entry), int(fields[1]), int(fields[2])))
    return table


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid`."""
    return [pid for pid, _, pgrp in live_processes() if pgrp == pgid]


def descendants(pid: int) -> list[int]:
    """All live descendants of `pid` (they may have left its process group)."""
    children: dict[int, list[int]] = {}
    for child, parent, _ in live_processes():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_pids(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class Teardown:
    clean: bool
    seconds: float
    escalated: bool  # SIGKILL was needed
    leftover_pids: list[int] = field(default_factory=list)
    port_free: bool = True
    gpus_released: bool | None = None  # None: no NVML on this host

    def as_dict(self) -> dict:
        return {
            "clean": self.clean,
            "seconds": round(self.seconds, 3),
            "escalated": self.escalated,
            "leftover_pids": self.leftover_pids,
            "port_free": self.port_free,
            "gpus_released": self.gpus_released,
        }


class ServerProcess:
    """One launched server: its process group, log and watchdog."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        log_path: Path,
        host: str,
        port: int,
        cwd: Path | None = None,
    ):
        self.command = command
        self.host = host
        self.port = port
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_set_parent_death_signal,
        )
        self.pgid = self.proc.pid  # the leader of a new session leads its group
        self._known = {self.proc.pid}
        self.watchdog = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servesweep.watchdog",
                str(os.getpid()),
                str(self.pgid),
                str(self.proc.pid),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": _package_root_on_path()},
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def _remember_children(self) -> None:
        # Remember descendants while the leader lives: once it dies they are
        # re-parented and can only be found through the group or this list.
        if self.alive():
            self._known.update(descendants(self.proc.pid))

    def _remaining(self) -> list[int]:
        alive = set(group_members(self.pgid))
        for pid in self._known:
            if pid != self.proc.pid and _pid_alive(pid):
                alive.add(pid)
        if self.proc.poll() is None:
            alive.add(self.proc.pid)
        return sorted(alive)

    def stop(self, grace_s: float = 15.0, kill_wait_s: float = 10.0) -> Teardown:
        """SIGTERM the group, wait `grace_s`, SIGKILL what is left, verify."""
        start = time.monotonic()
        self._remember_children()
        escalated = False
        remaining = self._remaining()
        if remaining:
            _signal_group(self.pgid, signal.SIGTERM)
            _signal_pids(remaining, signal.SIGTERM)
            remaining = _wait_empty(self, grace_s)
        if remaining:
            escalated = True
            _signal_group(self.pgid, signal.SIGKILL)
            _signal_pids(remaining, signal.SIGKILL)
            remaining = _wait_empty(self, kill_wait_s)
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        # The port may take a moment to be released after the process is gone, and on
        # NVIDIA hosts the GPU contexts too (None where there is no NVML).
        port_free = _wait_port_free(self.host, self.port, 5.0)
        gpus_released = wait_gpus_released(self._known | {self.proc.pid}, timeout_s=30.0)
        self._stop_watchdog()
        self._log.close()
        return Teardown(
            clean=not remaining and port_free and gpus_released is not False,
            seconds=time.monotonic() - start,
            escalated=escalated,
            leftover_pids=remaining,
            port_free=port_free,
            gpus_released=gpus_released,
        )

    def _stop_watchdog(self) -> None:
        if self.watchdog.poll() is None:
            self.watchdog.terminate()
            try:
                self.watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
                self.watchdog.wait()


def _package_root_on_path() -> str:
    root = str(Path(__file__).resolve().parents[1])
    existing = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{existing}" if existing else root


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _signal_group(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_empty(server: ServerProcess, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        server.proc.poll()  # reap the leader so it does not linger as a zombie
        remaining = server._remaining()
        if not remaining or time.monotonic() >= deadline:
            return remaining
        time.sleep(0.05)


def _wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not port_is_free(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET returning (status, body); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


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
    from servesweep.failures import classify_exit, read_log

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
            code = server.returncode
            cause = classify_exit(code, read_log(server.log_path), default="died")
            raise BootFailure(cause, f"server exited with code {code} during boot ({last})")
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
