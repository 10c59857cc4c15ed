"""Ends a server's process group when its owner dies without tearing it down.

Started by `ServerProcess` in its own session, so a SIGKILL of the owner (or of the
Snakemake job running it) cannot take the watchdog with it:

    python -m servesweep.watchdog OWNER_PID GROUP_ID LEADER_PID

It exits on its own once the group is empty, or when the owner stops it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from servesweep.server import _pid_alive, _signal_pids, descendants, group_members

POLL_S = 0.2
GRACE_S = 10.0


def main(owner: int, pgid: int, leader: int) -> int:
    known: set[int] = {leader}
    last_scan = 0.0
    while True:
        if time.monotonic() - last_scan > 1.0 and _pid_alive(leader):
            known.update(descendants(leader))  # children that may leave the group
            last_scan = time.monotonic()
        members = set(group_members(pgid)) | {p for p in known if _pid_alive(p)}
        if not members:
            return 0
        if not _pid_alive(owner):
            break
        time.sleep(POLL_S)
    # The owner is gone: the same escalation as a normal teardown.
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        _signal_pids([p for p in known if _pid_alive(p)], sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not group_members(pgid) and not any(_pid_alive(p) for p in known):
                return 0
            time.sleep(POLL_S)
    return 1


if __name__ == "__main__":
    sys.exit(main(*(int(arg) for arg in sys.argv[1:4])))
