"""How exactly a rate level keeps its arrival schedule: Poisson schedules at --rates sent to
the scripted SSE server, each request's send stamp and the server's own read time compared
with when it was due.

    python -m benchmarks.client.arrival_accuracy --rates 10,100,1000,2000,5000,10000 --seconds 2

The scripted server (tests/fixtures/sse_server.py: TTFT 5 ms, then 4 tokens 1 ms apart, so
requests are short and never pile up) runs pinned to --server-core; the client to
--client-core (one worker sends a rate level). Per rate: the achieved / scheduled rate (the
sends' (n - 1) / span over the schedule's), the send lag (sent - due) p50 / p99 / max, the
share of late requests (over max(5 ms, 1/4 mean gap)), and the server-read lag (read -
due: send lag plus loopback and the server's own wake-up). Results go to
benchmarks/results/arrival_accuracy.json, or --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.support.record import write_result
from servesweep.bench.arrivals import schedule as arrival_schedule
from servesweep.bench.client import ClientSettings, run_level
from servesweep.level import Level
from servesweep.sweep.benchmark import Arrival
from servesweep.workloads.base import Prompt
from tests.fixtures.sse_server import ServerProcess


def one(srv, rate: float, seconds: float, seed: int, tmp: Path) -> dict:
    n = max(50, int(rate * seconds))
    prompts = [Prompt(f"r{rate} p{i}", 2, 4) for i in range(n + 4)]
    schedule = arrival_schedule(n, rate, Arrival("poisson", 1.0, seed)).tolist()
    srv.set_script({"ttft_ms": 5, "gap_ms": 1})
    summary = run_level(
        ClientSettings(srv.url, request_timeout_s=60, stall_timeout_s=30),
        prompts,
        concurrency=n + 4,
        warmup=4,
        records_path=tmp / "r.jsonl",
        level=Level("rate", rate),
        repeat=0,
        schedule_s=schedule,
    )
    records = [json.loads(x) for x in open(tmp / "r.jsonl")]
    truth = {t["prompt"]: t["recv_ns"] for t in srv.truth()}
    measured = [r for r in records if not r["warmup"]]
    origin = summary["clock_origin_ns"]
    read_lag = np.array(
        [
            (truth[prompts[r["index"]].text] - origin) / 1e6 - r["scheduled_s"] * 1e3
            for r in measured
        ]
    )
    late_share = summary["late_requests"] / len(measured)
    return {
        "rate": rate,
        "requests": n,
        "achieved_rate": summary["achieved_rate"],
        "scheduled_rate": summary["scheduled_rate"],
        "achieved_ratio": summary["achieved_ratio"],
        "send_lag_p50_ms": summary["send_lag_p50_ms"],
        "send_lag_p99_ms": summary["send_lag_p99_ms"],
        "send_lag_max_ms": summary["send_lag_max_ms"],
        "late_share": round(late_share, 4),
        "rate_short": summary["rate_short"],
        "read_lag_p50_ms": round(float(np.percentile(read_lag, 50)), 3),
        "read_lag_p99_ms": round(float(np.percentile(read_lag, 99)), 3),
        "failed": summary["failed"],
        "client_cpu_share": summary["client_cpu_share"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,100,1000,2000,5000,10000")
    ap.add_argument("--seconds", type=float, default=2.0, help="of arrivals per rate")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    usable = os.sched_getaffinity(0)
    server_core = args.server_core if args.server_core in usable else None
    rows = []
    with ServerProcess(cpu=server_core) as srv, tempfile.TemporaryDirectory() as tmp:
        if args.client_core in usable and len(usable) > 1:
            os.sched_setaffinity(0, {args.client_core})
        for rep in range(args.repeats):
            for rate in (float(r) for r in args.rates.split(",")):
                row = one(srv, rate, args.seconds, rep, Path(tmp))
                row["repeat"] = rep
                rows.append(row)
                print(
                    f"{rate:>8g}/s n={row['requests']:>6}: achieved/scheduled "
                    f"{row['achieved_ratio']}, send lag p50 {row['send_lag_p50_ms']} "
                    f"p99 {row['send_lag_p99_ms']} max {row['send_lag_max_ms']} ms, late "
                    f"{row['late_share']:.2%}, server read lag p99 {row['read_lag_p99_ms']} ms",
                    flush=True,
                )
    path = write_result(
        "arrival_accuracy",
        {
            "command": "python " + " ".join(sys.argv),
            "load_average": os.getloadavg(),
            "rows": rows,
        },
        args.out,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
