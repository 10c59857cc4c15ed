"""A launched server: its own process group, its log, its watchdog, and its teardown.

Contract (docs/design.md §4): the server runs in a new session; a watchdog
process ends the group if the owner dies without tearing down (SIGKILL); teardown is SIGTERM
to the group, a grace period, SIGKILL, then a check that nothing of the group is left, the
port is free and (on NVIDIA hosts) its GPU contexts are gone. Processes are only ever ended
by the PIDs we started or found under them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple, cast

from servesweep.records import TeardownRecord
from servesweep.server.procs import descendants, end_processes
from servesweep.server.telemetry import wait_gpus_released

PR_SET_PDEATHSIG = 1
PORT_RELEASE_S = 5.0  # a port can stay taken a moment after its process is gone
GPU_RELEASE_S = 30.0  # ...and a GPU context too


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


class Teardown(NamedTuple):
    """How a server's teardown went (the cell record's `teardown`)."""

    clean: bool
    seconds: float
    escalated: bool  # SIGKILL was needed
    leftover_pids: list[int]
    port_free: bool
    gpus_released: bool | None  # None: no NVML on this host

    def as_dict(self) -> TeardownRecord:
        return cast(TeardownRecord, {**self._asdict(), "seconds": round(self.seconds, 3)})


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
        pass_fds: tuple[int, ...] = (),
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
            # The GPU slots' locks (servesweep.server.gpu_slots): held while the server lives.
            pass_fds=pass_fds,
        )
        self.pgid = self.proc.pid  # the leader of a new session leads its group
        self._known = {self.proc.pid}
        watchdog = [sys.executable, "-m", "servesweep.server.watchdog", str(os.getpid())]
        self.watchdog = subprocess.Popen(
            [*watchdog, str(self.pgid), str(self.proc.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": package_root_on_path()},
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

    def stop(self, grace_s: float = 15.0, kill_wait_s: float = 10.0) -> Teardown:
        """SIGTERM the group, wait `grace_s`, SIGKILL what is left, verify."""
        start = time.monotonic()
        # Remember descendants while the leader lives: once it dies they are re-parented
        # and can only be found through the group or this list.
        if self.alive():
            self._known.update(descendants(self.proc.pid))
        # Polling reaps the leader, so it does not linger as a zombie.
        leftover, escalated = end_processes(
            self.pgid, lambda: self._known, grace_s, kill_wait_s, on_poll=self.proc.poll
        )
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        port_free = _wait_port_free(self.host, self.port, PORT_RELEASE_S)
        gpus_released = wait_gpus_released(self._known, timeout_s=GPU_RELEASE_S)
        self._stop_watchdog()
        self._log.close()
        return Teardown(
            clean=not leftover and port_free and gpus_released is not False,
            seconds=time.monotonic() - start,
            escalated=escalated,
            leftover_pids=leftover,
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


def package_root_on_path() -> str:
    """PYTHONPATH for a child that runs one of our modules with `-m`."""
    root = str(Path(__file__).resolve().parents[2])
    existing = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{existing}" if existing else root


def _wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not port_is_free(host, port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
