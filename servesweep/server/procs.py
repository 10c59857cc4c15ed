"""Processes we started, found and ended by their PIDs (standard library only).

Read from /proc: the process table, a process group's members, a process's descendants
(also the ones that left its group with setsid). `end_processes` is the one SIGTERM → grace
→ SIGKILL escalation, used by a server's teardown and by the watchdog that stands in for an
owner that died. Nothing here ever looks a process up by its name.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

POLL_S = 0.05


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


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def remaining(pgid: int, known: Iterable[int]) -> list[int]:
    """Members of the group and known processes that are still alive."""
    return sorted(set(group_members(pgid)) | {p for p in known if pid_alive(p)})


def end_processes(
    pgid: int,
    known: Callable[[], Iterable[int]],
    grace_s: float,
    kill_wait_s: float,
    on_poll: Callable[[], object] | None = None,
) -> tuple[list[int], bool]:
    """SIGTERM the group and every known process, wait up to `grace_s`, SIGKILL what is
    left, wait up to `kill_wait_s`. `known()` gives the PIDs remembered outside the group
    (asked again at each poll); `on_poll` runs at each poll (e.g. to reap a child).
    Returns (PIDs still alive at the end, whether SIGKILL was needed)."""

    def left() -> list[int]:
        if on_poll:
            on_poll()
        return remaining(pgid, known())

    alive = left()
    escalated = False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        if not alive:
            break
        escalated = sig == signal.SIGKILL
        signal_group(pgid, sig)
        signal_pids(alive, sig)
        deadline = time.monotonic() + wait_s
        while alive and time.monotonic() < deadline:
            time.sleep(POLL_S)
            alive = left()
    return alive, escalated


def end_with_parent(sig: int = signal.SIGTERM, poll_s: float = 0.5) -> threading.Thread:
    """Send ourselves `sig` once the process that started us is gone (we are reparented),
    so a job whose Snakemake was SIGKILLed unwinds through its own teardown instead of
    finishing a boot nobody waits for (or idling, a SLURM job step's orphan). A poll, not
    PR_SET_PDEATHSIG, which fires when the parent *thread* ends, and Snakemake starts
    jobs from worker threads."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=watch, name="end-with-parent", daemon=True)
    thread.start()
    return thread
