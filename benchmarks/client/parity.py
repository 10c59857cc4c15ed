"""Do our client and sglang.bench_serving measure the same thing? Both run the same
workload (random prompts of --input-len tokens, --output-len output tokens, at
--concurrency), interleaved (ABBA), --repeats times each, against

- `scripted`: the tests' scripted SSE server (tests/fixtures/sse_server.py), which answers
  every request on a fixed timeline (TTFT --scripted-ttft-ms, then a token every
  --scripted-gap-ms): the truth is known and the server adds no noise, so any difference is
  in the clients' definitions or overheads;
- `transformers`: the embedded default server (`transformers serve`, continuous batching,
  the synthetic model), whose speed on a shared machine drifts from run to run; the
  interleaving and the per-pair differences (each pair ran back to back) are for that.

Medians over the repeats of output throughput, median TTFT and median TPOT should agree
within 3 %.

    python -m benchmarks.client.parity --server-python .cache/tests/cpu-stack/venv/bin/python \\
        --peer-python /tmp/bench-venv/bin/python

`transformers serve` rejects the `ignore_eos`/`min_tokens` fields bench_serving always sends
(HTTP 422), so both clients go through benchmarks/support/strip_proxy.py, which drops them. The
synthetic model's generation config has no EOS token, so every request yields exactly
--output-len tokens either way. The server and the proxy run in their own process groups on
127.0.0.1 and are ended by their PIDs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.support import SUPPORT, stop
from benchmarks.support.record import write_result
from servesweep.bench.client import ClientSettings, probe_generation, run_level
from servesweep.level import Level
from servesweep.server.process import ServerProcess, free_port
from servesweep.server.readiness import wait_ready
from servesweep.workloads.base import load_tokenizer
from servesweep.workloads.random_tokens import random_prompts

# (label, our summary field, bench_serving result field); the first three are the check.
METRICS = [
    ("output tok/s", "output_throughput", "output_throughput"),
    ("median TTFT ms", "median_ttft_ms", "median_ttft_ms"),
    ("median TPOT ms", "median_tpot_ms", "median_tpot_ms"),
    ("mean TTFT ms", "mean_ttft_ms", "mean_ttft_ms"),
    ("p99 TTFT ms", "p99_ttft_ms", "p99_ttft_ms"),
    ("mean TPOT ms", "mean_tpot_ms", "mean_tpot_ms"),
    ("median ITL ms", "median_itl_ms", "median_itl_ms"),
    ("mean ITL ms", "mean_itl_ms", "mean_itl_ms"),
    ("median e2e ms", "median_e2el_ms", "median_e2e_latency_ms"),
    ("request/s", "request_throughput", "request_throughput"),
    ("concurrency", "concurrency", "concurrency"),
    ("duration s", "duration_s", "duration"),
    ("client CPU s", "client_cpu_s", "client_cpu_s"),
]
CHECKED = 3
TOLERANCE = 0.03
SERVER_TTFT = "server-side TTFT"  # scripted server: its first write - its read, median


class Proxy:
    def __init__(self, upstream_port: int):
        cmd = [sys.executable, str(SUPPORT / "strip_proxy.py"), "--upstream"]
        cmd.append(f"127.0.0.1:{upstream_port}")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.port = int(self.proc.stdout.readline().split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop(self.proc)


def model_dir(given: str | None) -> Path:
    if given:
        return Path(given).resolve()
    from servesweep.resources.models import materialize

    dest = Path(tempfile.gettempdir()) / "servesweep-bench" / "model"
    if not (dest / "files" / "config.json").exists():
        materialize("synthetic", {"synthetic": {}}, dest)
    return (dest / "files").resolve()


def run_ours(url, model, tokenizer, args, seed, tmp: Path) -> dict:
    settings = ClientSettings(url, model=str(model), tokenizer=tokenizer, stall_timeout_s=300)
    prompts = random_prompts(tokenizer, args.num_prompts + 1, args.input_len, args.output_len, seed)
    s = run_level(
        settings,
        prompts,
        args.concurrency,
        1,
        tmp / "ours.jsonl",
        Level("concurrency", args.concurrency),
        0,
    )
    if s["completed"] != args.num_prompts:
        raise RuntimeError(f"ours: {s['failed']} failed: {s['errors']}")
    return s


def run_bench_serving(url, model, args, seed, tmp: Path) -> dict:
    out = tmp / "bench_serving.jsonl"
    out.unlink(missing_ok=True)
    cmd = [args.peer_python, str(SUPPORT / "sglang_shim.py"), "sglang.benchmark.serving"]
    cmd += ["--backend", "sglang-oai", "--base-url", url, "--model", str(model)]
    cmd += ["--tokenizer", str(model), "--dataset-name", "random-ids"]
    cmd += ["--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len)]
    cmd += ["--random-range-ratio", "1", "--num-prompts", str(args.num_prompts)]
    cmd += ["--max-concurrency", str(args.concurrency), "--warmup-requests", "1"]
    # Our readiness check has passed; its own polls /v1/models, which transformers 5.17
    # answers with 500 for a local path.
    cmd += ["--ready-check-timeout-sec", "0"]
    cmd += ["--seed", str(seed), "--output-file", str(out), "--disable-tqdm"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.update(PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    # Its CPU time from the end of its warmup to its report: the measured run (and the
    # metric calculation just after it).
    lines, cpu = [], {}
    for line in proc.stdout:
        lines.append(line)
        if "Starting main benchmark run" in line:
            cpu["start"] = cpu_seconds(proc.pid)
        elif "Serving Benchmark Result" in line:
            cpu["end"] = cpu_seconds(proc.pid)
    proc.wait()
    if proc.returncode or not out.exists():
        tail = "".join(lines[-15:])
        raise RuntimeError(f"bench_serving failed ({proc.returncode}):\n{tail}")
    res = json.loads(out.read_text().strip().splitlines()[-1])
    if res["completed"] != args.num_prompts:
        raise RuntimeError(f"bench_serving: only {res['completed']} completed")
    res["client_cpu_s"] = cpu["end"] - cpu["start"] if len(cpu) == 2 else float("nan")
    return res


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleaved(url, model, tokenizer, args, label, scripted=None) -> dict[str, list[dict]]:
    """ABBA: ours, bench_serving, bench_serving, ours, ... With the scripted server, also
    the TTFT the server itself kept to (its first content write - its read of the request)."""
    results: dict[str, list[dict]] = {"ours": [], "bench_serving": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            order = ["ours", "bench_serving"] if rep % 2 == 0 else ["bench_serving", "ours"]
            for name in order:
                start = time.perf_counter()
                if scripted is not None:
                    scripted.set_script(scripted.script)  # forgets the previous truth
                if name == "ours":
                    r = run_ours(url, model, tokenizer, args, rep, Path(tmp))
                    values = [r[ours] for _, ours, _ in METRICS]
                else:
                    r = run_bench_serving(url, model, args, rep, Path(tmp))
                    values = [r[theirs] for _, _, theirs in METRICS]
                row = dict(zip([m[0] for m in METRICS], values, strict=True))
                if scripted is not None:
                    ttfts = [(t["content_ns"][0] - t["recv_ns"]) / 1e6 for t in scripted.truth()]
                    row[SERVER_TTFT] = statistics.median(ttfts)
                results[name].append(row)
                print(
                    f"  {label} rep {rep} {name:13s} {values[0]:8.1f} tok/s  median TTFT "
                    f"{values[1]:7.1f} ms  median TPOT {values[2]:6.2f} ms  "
                    f"({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    return results


def report(results: dict[str, list[dict]], label: str, args) -> dict:
    """Print the medians side by side; return them (with each run) for the JSON."""
    out: dict = {"runs": results, "medians": {}}
    print()
    print(
        f"{label}: medians of {args.repeats} repeats; concurrency {args.concurrency}, "
        f"{args.num_prompts} prompts, {args.input_len} in / {args.output_len} out tokens"
    )
    print(f"{'metric':16s} {'ours':>10s} {'bench_serving':>14s} {'diff':>8s} {'pair diff':>10s}")
    names = [m[0] for m in METRICS] + ([SERVER_TTFT] if SERVER_TTFT in results["ours"][0] else [])
    for i, name in enumerate(names):
        a = statistics.median(r[name] for r in results["ours"])
        b = statistics.median(r[name] for r in results["bench_serving"])
        diff = (a - b) / b if b else float("nan")
        # Each repeat's two runs ran back to back: their difference is freer of drift.
        pairs = [
            (x[name] - y[name]) / y[name] if y[name] else float("nan")
            for x, y in zip(results["ours"], results["bench_serving"], strict=True)
        ]
        pair = statistics.median(pairs)
        mark = "  <- over 3 %" if i < CHECKED and abs(diff) > TOLERANCE else ""
        print(f"{name:16s} {a:10.2f} {b:14.2f} {100 * diff:+7.2f}% {100 * pair:+9.2f}%{mark}")
        out["medians"][name] = {"ours": a, "bench_serving": b, "diff": diff, "pair_diff": pair}
    return out


def scripted(model, tokenizer, args) -> dict:
    from tests.fixtures.sse_server import ServerProcess as ScriptedServer

    script = {"ttft_ms": args.scripted_ttft_ms, "gap_ms": args.scripted_gap_ms}
    with ScriptedServer(script) as srv:
        print(f"scripted server {srv.url}: {script}", flush=True)
        results = interleaved(srv.url, model, tokenizer, args, "scripted", srv)
    out = report(results, "scripted", args)
    n = args.output_len
    per_request = (args.scripted_ttft_ms + (n - 1) * args.scripted_gap_ms) / 1e3
    print(
        f"truth: TTFT {args.scripted_ttft_ms:g} ms, TPOT {args.scripted_gap_ms:g} ms, "
        f"at most {args.concurrency * n / per_request:.1f} output tok/s (requests back to back)"
    )
    return {**out, "script": script}


def transformers(model, tokenizer, args) -> dict:
    serve = Path(args.server_python).parent / "transformers"
    port = free_port()
    command = [str(serve), "serve", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += shlex.split(args.server_args)
    with tempfile.TemporaryDirectory() as tmp:
        print("$ " + " ".join(command), flush=True)
        server = ServerProcess(command, {}, Path(tmp) / "server.log", "127.0.0.1", port)
        proxy = None
        try:
            direct = ClientSettings(server.base_url, model=str(model))
            boot = wait_ready(
                server,
                "/health",
                None,  # transformers 5.17 answers /v1/models with 500 for a local path
                str(model),
                args.boot_timeout_s,
                generate=lambda left: asyncio.run(probe_generation(direct, "Hello", 4, left)),
                log=lambda msg: None,
            )
            print(f"server ready in {boot:.1f} s (pid {server.pid})", flush=True)
            proxy = Proxy(port)
            results = interleaved(proxy.url, model, tokenizer, args, "transformers")
        finally:
            if proxy is not None:
                proxy.stop()
            teardown = server.stop(grace_s=15)
            print(f"server stopped: {'clean' if teardown.clean else 'NOT clean'}")
    return {**report(results, "transformers serve", args), "command": command, "boot_s": boot}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-python", help="the cpu stack's interpreter (transformers)")
    parser.add_argument("--peer-python", required=True, help="interpreter with sglang")
    parser.add_argument("--servers", default="scripted,transformers")
    parser.add_argument("--model-dir", help="default: a synthetic model built here")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--num-prompts", type=int, default=96)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--scripted-ttft-ms", type=float, default=100.0)
    parser.add_argument("--scripted-gap-ms", type=float, default=20.0)
    parser.add_argument(
        "--server-args",
        default="--device cpu --continuous-batching --cb-num-blocks 512 --cb-block-size 32 "
        "--cb-max-batch-tokens 2048",
        help="transformers serve's flags after --port (on a GPU: --device cuda ...)",
    )
    parser.add_argument("--boot-timeout-s", type=float, default=180.0)
    parser.add_argument("--out", type=Path, help="default benchmarks/results/parity.json")
    args = parser.parse_args()

    model = model_dir(args.model_dir)
    tokenizer = load_tokenizer(model)
    servers = args.servers.split(",")
    if "transformers" in servers and not args.server_python:
        raise SystemExit("--server-python is needed for the transformers server")
    results = {}
    if "scripted" in servers:
        results["scripted"] = scripted(model, tokenizer, args)
    if "transformers" in servers:
        results["transformers"] = transformers(model, tokenizer, args)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    path = write_result("parity", {"settings": settings, "servers": results}, args.out)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
