"""What the benchmarks share: where results go (`record`), the instant SSE stub
(`stub_server`), the field-dropping proxy (`strip_proxy`) and the SGLang client shim
(`sglang_shim`). The stub, the proxy and the shim also run as scripts by their paths
(`SUPPORT / "stub_server.py"`), the shim under a peer's interpreter without servesweep, so
they import only the standard library (and uvloop where present).

The scripted test server and the verdict simulator are the test suite's own
(`tests.fixtures.sse_server`, `tests.fixtures.timing`, `tests.fixtures.verdict_sim`): the
benchmarks import those same files, so a benchmark and the unit test that guards it run one
implementation."""

import subprocess
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]  # the repo root
RESULTS = ROOT / "benchmarks" / "results"


def stop(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """End a helper process the benchmark started (by its handle): SIGTERM, then SIGKILL
    after `grace_s`."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
