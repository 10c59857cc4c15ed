"""How exactly our client times streams at many streams: its TTFT, ITL, TPOT and E2EL
against the scripted server's own write times (the truth), at --concurrency streams.

    python -m benchmarks.client.timing_accuracy --concurrency 1024 --repeats 3

The scripted test server (tests/fixtures/sse_server.py) runs pinned to --server-core and
records, on CLOCK_MONOTONIC (one clock for every process), when it read each request and
wrote each chunk; the client's workers run on the other cores (--client-cores), so the two
need not queue behind each other. Every request streams --tokens tokens --gap-ms apart
after a TTFT of 5-47 ms (spread so streams do not restart in waves); a warmup of one
request per stream opens the connections first. Errors are measured minus true, per
request (TTFT, E2EL, TPOT) and per gap between chunks (ITL), as in tests/unit/bench/test_client.py;
printed per repeat and as medians over repeats, with how late the machine woke a 1 ms
sleeper on the server's and a client's core meanwhile (its own noise floor). Results go
to benchmarks/results/timing_accuracy.json, or --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks.support.record import write_result
from servesweep.bench.client import ClientSettings, run_level
from servesweep.level import Level
from servesweep.workloads.base import Prompt
from tests.fixtures.sse_server import ServerProcess
from tests.fixtures.timing import NoiseProbe, timing_errors

METRICS = ("itl", "ttft", "tpot", "e2el")


def cores(text: str | None, default: list[int]) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8]."""
    if not text:
        return default
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def one_repeat(server, args, client_cores: list[int], repeat: int) -> dict:
    script = {"ttft_ms": [5.0 + 3.0 * k for k in range(15)], "gap_ms": args.gap_ms}
    server.set_script(script)
    n = args.concurrency * args.requests_per_stream
    prompts = [Prompt(f"r{repeat}p{i} a b c", 4, args.tokens) for i in range(args.concurrency + n)]
    settings = ClientSettings(server.url, workers=args.workers, stall_timeout_s=60)
    before = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        with NoiseProbe([args.server_core, client_cores[0]]) as noise:
            os.sched_setaffinity(0, set(client_cores))  # the client's workers inherit it
            try:
                summary = run_level(
                    settings,
                    prompts,
                    args.concurrency,
                    args.concurrency,
                    path,
                    Level("concurrency", args.concurrency),
                    repeat,
                )
            finally:
                os.sched_setaffinity(0, before)
        records = [json.loads(line) for line in path.read_text().splitlines()]
    truth = {t["prompt"]: t for t in server.truth()}
    err = timing_errors(summary, records, truth, prompts)
    return {
        "completed": summary["completed"],
        "status": summary["status"],
        "workers": summary.get("client_workers"),
        "achieved_concurrency": summary["achieved_concurrency"],
        "client_cpu_share": summary.get("client_cpu_share"),
        "noise_p99_ms": noise.p99_ms,
        "errors_ms": {k: {f: float(v) for f, v in e.items()} for k, e in err.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--gap-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=3)
    usable = sorted(os.sched_getaffinity(0))
    parser.add_argument("--server-core", type=int, default=usable[-1])
    parser.add_argument("--client-cores", help="e.g. 0-7 (default: every other usable core)")
    parser.add_argument("--workers", type=int, help="client workers (default: the client's own)")
    parser.add_argument("--out", type=Path, help="default benchmarks/results/timing_accuracy.json")
    args = parser.parse_args()
    client_cores = cores(args.client_cores, [c for c in usable if c != args.server_core] or usable)
    print(
        f"{args.concurrency} streams x {args.requests_per_stream} requests of {args.tokens} "
        f"tokens {args.gap_ms:g} ms apart; server on core {args.server_core}, client on "
        f"cores {client_cores}",
        flush=True,
    )
    runs = []
    with ServerProcess(cpu=args.server_core) as server:
        for repeat in range(args.repeats):
            run = one_repeat(server, args, client_cores, repeat)
            runs.append(run)
            line = "  ".join(
                f"{m} {run['errors_ms'][m]['p50']:.3f}/{run['errors_ms'][m]['p90']:.3f}/"
                f"{run['errors_ms'][m]['p99']:.3f}"
                for m in METRICS
            )
            print(
                f"  repeat {repeat}: {run['status']} {run['completed']} requests, "
                f"{run['workers']} workers, held {run['achieved_concurrency']:.1f}, "
                f"noise p99 {run['noise_p99_ms']:.3f} ms; |error| p50/p90/p99 ms: {line}",
                flush=True,
            )
    medians = {
        m: {
            q: statistics.median(r["errors_ms"][m][q] for r in runs)
            for q in ("p50", "p90", "p99", "median_signed")
        }
        for m in METRICS
    }
    noise = statistics.median(r["noise_p99_ms"] for r in runs)
    print(f"medians over {len(runs)} repeats (machine noise p99 {noise:.3f} ms):")
    for m, q in medians.items():
        print(
            f"  {m:5s} |error| p50 {q['p50']:.3f}  p90 {q['p90']:.3f}  p99 {q['p99']:.3f} ms"
            f"  (signed median {q['median_signed']:+.3f})"
        )
    path = write_result(
        "timing_accuracy",
        {
            "settings": {**vars(args), "out": None, "client_cores": client_cores},
            "medians_ms": medians,
            "noise_p99_ms": noise,
            "runs": runs,
        },
        args.out,
    )
    print(f"itl_p99_ms={medians['itl']['p99']:.3f}  written to {path}")


if __name__ == "__main__":
    main()
