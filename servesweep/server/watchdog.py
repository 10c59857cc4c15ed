"""Ends a server's process group when its owner dies without tearing it down.

Started by `ServerProcess` in its own session, so a SIGKILL of the owner (or of the
Snakemake job running it) cannot take the watchdog with it:

    python -m servesweep.server.watchdog OWNER_PID GROUP_ID LEADER_PID

It exits on its own once the group is empty, or when the owner stops it. Standard library
only (`servesweep.server.procs`).
"""

from __future__ import annotations

import sys
import time

from servesweep.server.procs import descendants, end_processes, pid_alive, remaining

POLL_S = 0.2
GRACE_S = 10.0
KILL_WAIT_S = 5.0


def main(owner: int, pgid: int, leader: int) -> int:
    known: set[int] = {leader}
    last_scan = 0.0
    while True:
        if time.monotonic() - last_scan > 1.0 and pid_alive(leader):
            known.update(descendants(leader))  # children that may leave the group
            last_scan = time.monotonic()
        if not remaining(pgid, known):
            return 0
        if not pid_alive(owner):
            break
        time.sleep(POLL_S)
    # The owner is gone: the same escalation as a normal teardown.
    leftover, _ = end_processes(pgid, lambda: known, GRACE_S, KILL_WAIT_S)
    return 1 if leftover else 0


if __name__ == "__main__":
    sys.exit(main(*(int(arg) for arg in sys.argv[1:4])))
