"""`python -m sglang.benchmark.serving` (bench_serving, the seeds' client), kept loaded between
runs: benchmarks/gpu/sglang_parity.py starts this once under the stack's interpreter (the one
with SGLang) and sends it one run per line.

Each line on stdin is a JSON object {"argv": [...], "out": PATH, "rows": bool}. `argv` are
bench_serving's own arguments, parsed and run by its own command-line entry
(`sglang.benchmark.serving.cli_main`, what `python -m sglang.benchmark.serving` runs); its
result line (with `--output-details`: every request's TTFT, ITLs, lengths, errors) is read
from its `--output-file` and written to `out` as JSON, with `peer_cpu_s`: this process's
CPU time over the run (the tokenizer and the dataset included), and `send_s`: when each
measured request's clock started (its `start_time`, taken after its own aiohttp session is
made, before the POST), in seconds from the first, in the order they started: how the
client's wave reaches the server. With "rows": true nothing
is sent: the prompts its dataset code would send for those arguments (its own seeding and
sampling, `benchmark` stopped before the first request) go to `out` instead, as
[{"prompt", "prompt_len", "output_len"}], so our client can send the very same ones.
After each line one line `PEER-DONE {"ok": ..., "error": ...}` goes to stdout.

Importing SGLang takes seconds; doing it once saves that on every run. With
SERVESWEEP_SGLANG_SHIM=1 SGLang is loaded through benchmarks/support/sglang_shim.py (a peer venv
without torch, as when this harness is checked against the scripted server off the GPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

if os.environ.get("SERVESWEEP_SGLANG_SHIM") == "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import sglang_shim

    sglang_shim.install()

import sglang.benchmark.serving as serving  # noqa: E402


def rows_of(argv: list[str]) -> list[dict]:
    """The dataset rows bench_serving would send for argv: its whole run up to `benchmark`."""
    captured: list = []
    real = serving.benchmark

    async def stop_before_sending(**kwargs):
        captured.extend(kwargs["input_requests"])
        return {}

    serving.benchmark = stop_before_sending
    try:
        sys.argv = ["bench_serving", *argv]
        serving.cli_main()
    finally:
        serving.benchmark = real
    return [
        {"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len}
        for r in captured
    ]


@contextlib.contextmanager
def timed(argv: list[str]):
    """bench_serving's request function for argv's backend, wrapped while the block runs so
    that every request's start_time is recorded; yields the list it fills (warm-up first)."""
    backend = argv[argv.index("--backend") + 1]
    starts: list[float] = []
    real = serving.ASYNC_REQUEST_FUNCS[backend]

    async def recording(*args, **kwargs):
        output = await real(*args, **kwargs)
        starts.append(output.start_time)
        return output

    serving.ASYNC_REQUEST_FUNCS[backend] = recording
    try:
        yield starts
    finally:
        serving.ASYNC_REQUEST_FUNCS[backend] = real


def send_offsets(starts: list[float], warmups: int) -> list[float]:
    """The measured requests' start times (the warm-up's dropped: they run first, to the
    end, before any measured one starts) from the first, sorted."""
    measured = sorted(starts)[warmups:]
    return [round(t - measured[0], 6) for t in measured] if measured else []


def serve_runs() -> None:
    print("PEER-READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        reply: dict = {"ok": False, "error": None}
        try:
            argv = list(job["argv"])
            if job.get("rows"):
                with open(job["out"], "w") as f:
                    json.dump(rows_of(argv), f)
            else:
                result_file = job["out"] + ".jsonl"
                if os.path.exists(result_file):
                    os.unlink(result_file)
                cpu = time.process_time()
                sys.argv = ["bench_serving", *argv, "--output-file", result_file]
                with timed(argv) as starts:
                    serving.cli_main()
                with open(result_file) as f:
                    result = json.loads(f.read().strip().splitlines()[-1])
                result["peer_cpu_s"] = time.process_time() - cpu
                flag = "--warmup-requests"
                warmups = int(argv[argv.index(flag) + 1]) if flag in argv else 1
                result["send_s"] = send_offsets(starts, warmups)
                with open(job["out"], "w") as f:
                    json.dump(result, f)
            reply["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - argparse and sys.exit raise SystemExit
            traceback.print_exc()
            reply["error"] = f"{type(exc).__name__}: {exc}"[:500]
        print("PEER-DONE " + json.dumps(reply), flush=True)


if __name__ == "__main__":
    serve_runs()
