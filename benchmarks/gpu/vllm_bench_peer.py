"""`vllm bench serve`, kept loaded between runs: benchmarks/gpu/vllm_parity.py starts this once
under the stack's interpreter (the one with vLLM) and sends it one run per line.

Each line on stdin is a JSON object {"argv": [...], "out": PATH}: `argv` are `vllm bench
serve`'s own arguments, parsed by its own parser (`vllm.benchmarks.serve.add_cli_args`) and
run by its own `main`, exactly what the `vllm bench serve` command does
(vllm/entrypoints/cli/benchmark/serve.py); the result dict `main` returns is written to
`out` as JSON, with `peer_cpu_s`: this process's CPU time over the run (tokenizer and
dataset loading included). After each run one line `PEER-DONE {"ok": ..., "error": ...}`
goes to stdout, so the caller knows where a run's output ends.

Importing vLLM takes seconds; doing it once saves that on every run.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def serve_runs() -> None:
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    print("PEER-READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        reply: dict = {"ok": False, "error": None}
        try:
            args = parser.parse_args(job["argv"])
            cpu = time.process_time()
            result = main(args)
            result["peer_cpu_s"] = time.process_time() - cpu
            with open(job["out"], "w") as f:
                json.dump(result, f)
            reply["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - argparse exits with SystemExit
            traceback.print_exc()
            reply["error"] = f"{type(exc).__name__}: {exc}"[:500]
        print("PEER-DONE " + json.dumps(reply), flush=True)


if __name__ == "__main__":
    serve_runs()
