"""A job ends with the process that started it (servesweep.server.procs.end_with_parent)."""

import os
import signal
import subprocess
import sys
import time

from fixtures.paths import ROOT

from servesweep.server.procs import pid_alive

# A middle process starts the child and prints its pid; the child follows its parent and
# writes "terminated" when its SIGTERM handler runs.
CHILD = """
import signal, sys, time
sys.path.insert(0, {root!r})
from servesweep.server.procs import end_with_parent
def bye(signum, frame):
    open({out!r}, "w").write("terminated")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
end_with_parent(poll_s=0.05)
time.sleep(60)
"""
MIDDLE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_job_whose_parent_is_killed_ends_through_its_own_handler(tmp_path):
    out = tmp_path / "out"
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, CHILD.format(root=str(ROOT), out=str(out))],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(middle.stdout.readline())
    try:
        time.sleep(0.5)
        assert pid_alive(child)
        middle.send_signal(signal.SIGKILL)
        middle.wait()
        deadline = time.monotonic() + 10
        while pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(child)
        assert out.read_text() == "terminated"
    finally:
        if pid_alive(child):
            os.kill(child, signal.SIGKILL)
