"""Do our client and `vllm bench serve` measure the same thing, against one real vLLM server?

`run` (on the lent H200, benchmarks/vllm_parity.sh): one vLLM server (the synthetic
Qwen3-MoE of config/examples/h200-vllm.yaml, the `baseline` variant's flags); at each
concurrency level both clients send the same prompts (our `random` workload: --input-len
random tokens, exact; --output-len output tokens, ignore_eos, temperature 0), interleaved
ABBA, --repeats times each:

- ours: `servesweep.bench.client.run_level`, as the workflow runs a level (the `vllm`
  engine's request extras, one warmup request);
- theirs: `vllm bench serve` from the same vLLM wheel (kept loaded between runs by
  benchmarks/vllm_bench_peer.py) with `--dataset-name custom` over the same prompts in the
  same order (`--disable-shuffle --skip-chat-template --custom-output-len`), one warmup
  (it repeats the first prompt, so ours does too), `--ignore-eos --temperature 0`.

Before each run the prefix cache is flushed (both clients send the same prompts); before a
level's first measured run our client primes it once (unrecorded), so kernels compiled on
first use at a new batch size are not charged to whichever client comes first. While each
run goes, the server's gauges are sampled (servesweep.server.engines.gauges: peak KV-cache usage,
running and waiting requests). `--probe-levels` then replays the sweep's own prompts
(h200-vllm.yaml's shared_prefix workload) through benchmarks/vllm_stream_probe.py.

`compare DIR` reads the runs' JSONs back, prints the table (medians over repeats, the
median of the back-to-back pairs' differences) and writes the comparison JSON (default
benchmarks/results/vllm_parity.json):

    python benchmarks/vllm_parity.py compare /path/to/runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from record import write_result  # noqa: E402

from servesweep.bench.metrics import mean_inflight, steady_window  # noqa: E402

HERE = Path(__file__).resolve().parent
CONFIG = ROOT / "config" / "examples" / "h200-vllm.yaml"
# (label, our level summary's field, vllm bench serve's result field or a derived one)
METRICS = [
    ("output tok/s", "output_throughput", "output_throughput"),
    ("median TTFT ms", "median_ttft_ms", "median_ttft_ms"),
    ("p99 TTFT ms", "p99_ttft_ms", "p99_ttft_ms"),
    ("median TPOT ms", "median_tpot_ms", "median_tpot_ms"),
    ("p99 TPOT ms", "p99_tpot_ms", "p99_tpot_ms"),
    ("median ITL ms", "median_itl_ms", "median_itl_ms"),
    ("p99 ITL ms", "p99_itl_ms", "p99_itl_ms"),
    ("median chunk gap ms", "median_chunk_gap_ms", "median_itl_ms"),
    ("p99 chunk gap ms", "p99_chunk_gap_ms", "p99_itl_ms"),
    ("median e2e ms", "median_e2el_ms", "median_e2el_ms"),
    ("request/s", "request_throughput", "request_throughput"),
    ("achieved concurrency", "achieved_concurrency", "achieved_concurrency"),
    ("mean in flight", "concurrency", "concurrency"),
    ("duration s", "duration_s", "duration"),
    ("tokens per chunk", "tokens_per_chunk", "tokens_per_chunk"),
    ("client CPU s", "client_cpu_s", "client_cpu_s"),
]
TOLERANCE = 0.02


# ---- the run (on the GPU machine) ------------------------------------------------------------


def build_model(dest: Path) -> Path:
    """The example sweep's synthetic model, built under dest (reused when there)."""
    from servesweep.resources.models import materialize
    from servesweep.sweep.config import load_file

    if not (dest / "files" / "config.json").exists():
        materialize("moe-1b", load_file(CONFIG).models["moe-1b"], dest)
    return (dest / "files").resolve()


class Peer:
    """benchmarks/vllm_bench_peer.py under the stack's interpreter: one run per line."""

    def __init__(self, python: str, log_path: Path):
        self.log = open(log_path, "a")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [python, str(HERE / "vllm_bench_peer.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._until("PEER-READY")

    def _until(self, marker: str) -> str:
        for line in self.proc.stdout:
            self.log.write(line)
            if line.startswith(marker):
                self.log.flush()
                return line[len(marker) :].strip()
        raise RuntimeError(f"vllm bench peer ended (exit {self.proc.wait()}); see {self.log.name}")

    def run(self, argv: list[str], out: Path) -> dict:
        self.log.write(f"$ vllm bench serve {' '.join(argv)}\n")
        self.proc.stdin.write(json.dumps({"argv": argv, "out": str(out)}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self._until("PEER-DONE "))
        if not reply["ok"]:
            raise RuntimeError(f"vllm bench serve failed: {reply['error']}")
        return json.loads(out.read_text())

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class CliPeer:
    """The `vllm bench serve` command itself, one process a run (where the peer failed)."""

    def __init__(self, vllm: str, log_path: Path):
        self.vllm, self.log_path = vllm, log_path

    def run(self, argv: list[str], out: Path) -> dict:
        cmd = [self.vllm, "bench", "serve", *argv, "--save-result", "--result-filename", str(out)]
        with open(self.log_path, "a") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc or not out.exists():
            raise RuntimeError(f"vllm bench serve exited {rc}; see {self.log_path}")
        return json.loads(out.read_text())

    def stop(self) -> None:
        pass


def run_ours(settings, prompts, level: int, path: Path, records: Path) -> dict:
    from servesweep.bench.client import run_level
    from servesweep.level import Level

    # One warmup: the first measured prompt once more, as vllm bench serve warms up.
    sent = [prompts[0], *prompts]
    s = run_level(settings, sent, level, 1, records, Level("concurrency", level), 0)
    if s["completed"] != len(prompts):
        print(f"  ours at {level}: {s['failed']} failed: {s['errors']}", flush=True)
    path.write_text(json.dumps(s))
    return s


def run_theirs(peer, base_url, model, prompts, level: int, out: Path, data: Path) -> dict | None:
    data.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in prompts))
    argv = ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions"]
    argv += ["--model", str(model), "--tokenizer", str(model)]
    argv += ["--dataset-name", "custom", "--dataset-path", str(data)]
    argv += ["--num-prompts", str(len(prompts)), "--disable-shuffle", "--skip-chat-template"]
    argv += ["--custom-output-len", str(prompts[0].output_tokens)]
    argv += ["--max-concurrency", str(level), "--num-warmups", "1"]
    argv += ["--ignore-eos", "--temperature", "0", "--save-detailed", "--disable-tqdm"]
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
    try:
        r = peer.run(argv, out)
    except RuntimeError as exc:  # ours goes on: its records and the probe still count
        print(f"  {exc}", flush=True)
        out.unlink(missing_ok=True)
        return None
    if r["completed"] != len(prompts):
        print(f"  vllm bench serve at {level}: {r['failed']} failed", flush=True)
    return r


def measure(args) -> None:
    from servesweep.bench.client import ClientSettings, probe_generation
    from servesweep.server.engines import get_engine
    from servesweep.server.engines.gauges import GaugeSampler
    from servesweep.server.process import ServerProcess, free_port
    from servesweep.server.readiness import wait_ready
    from servesweep.workloads.base import load_tokenizer
    from servesweep.workloads.random_tokens import random_prompts

    out = args.out_dir
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "requests").mkdir(exist_ok=True)
    model = build_model(args.model_dest)
    tokenizer = load_tokenizer(model)
    engine = get_engine("vllm")
    port = free_port()
    command = engine.command(args.stack_python, str(model), "127.0.0.1", port, args.flags)
    env = engine.env({"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    print("$ " + " ".join(command), flush=True)
    t0 = time.monotonic()
    server = ServerProcess(command, env, out / "server.log", "127.0.0.1", port)
    peer = None
    settings = ClientSettings(
        server.base_url,
        model=engine.served_model_name(str(model)),
        extra_body=engine.request_extras(),
        tokenizer=tokenizer,
        stall_timeout_s=300,
    )
    try:
        try:
            peer = Peer(args.stack_python, out / "peer.log")  # imports vLLM while it boots
        except RuntimeError as exc:
            print(f"{exc}: vllm bench serve as a command instead", flush=True)
            peer = CliPeer(str(Path(args.stack_python).with_name("vllm")), out / "peer.log")
        boot = wait_ready(
            server,
            engine.health_path,
            engine.models_path,
            engine.served_model_name(str(model)),
            args.boot_timeout_s,
            generate=lambda left: asyncio.run(probe_generation(settings, "Hello", 4, left)),
            log=lambda msg: None,
        )
        print(f"server ready in {boot:.1f} s (pid {server.pid})", flush=True)
        info = {"command": command, "boot_s": boot, "since_launch_s": time.monotonic() - t0}
        (out / "server.json").write_text(json.dumps(info))
        metrics_url = server.base_url + engine.metrics_path
        for level in args.levels:
            n = max(args.min_prompts, args.prompts_per_level * level)
            prompts = random_prompts(tokenizer, n, args.input_len, args.output_len, level)
            prime = random_prompts(
                tokenizer, max(16, level), args.input_len, args.output_len, 10_000 + level
            )
            engine.flush_cache(server.base_url)
            start = time.monotonic()
            run_ours(settings, prime, level, out / "prime.json", out / "prime.jsonl")
            print(f"L{level}: primed ({time.monotonic() - start:.0f} s)", flush=True)
            for rep in range(args.repeats):
                order = ["ours", "theirs"] if rep % 2 == 0 else ["theirs", "ours"]
                for who in order:
                    name = f"L{level}_r{rep}_{who}"
                    engine.flush_cache(server.base_url)
                    start = time.monotonic()
                    with GaugeSampler(metrics_url, engine.peak_gauges) as gauges:
                        if who == "ours":
                            records = out / "requests" / f"{name}.requests.jsonl"
                            path = out / "runs" / f"{name}.json"
                            r = run_ours(settings, prompts, level, path, records)
                        else:
                            r = run_theirs(
                                peer,
                                server.base_url,
                                model,
                                prompts,
                                level,
                                out / "runs" / f"{name}.json",
                                out / "prompts.jsonl",
                            )
                        if r is None:
                            continue
                    (out / "runs" / f"{name}.gauges.json").write_text(json.dumps(gauges.result()))
                    print(
                        f"  {name:16s} {r['output_throughput']:9.1f} tok/s  median TTFT "
                        f"{r['median_ttft_ms']:8.2f} ms  median TPOT {r['median_tpot_ms']:6.2f} ms"
                        f"  KV peak {gauges.peaks.get('kv_cache_usage', float('nan')):.3f}"
                        f"  ({time.monotonic() - start:.0f} s)",
                        flush=True,
                    )
        if args.probe_levels:
            try:
                probe_sweep_prompts(settings, tokenizer, args, out)
            except Exception:  # noqa: BLE001 - the parity runs above still count
                traceback.print_exc()
    finally:
        if peer is not None:
            peer.stop()
        teardown = server.stop(grace_s=30)
        print(f"server stopped: {'clean' if teardown.clean else 'NOT clean'}", flush=True)


def probe_sweep_prompts(settings, tokenizer, args, out: Path) -> None:
    """The sweep's own prompts at each probe level: through our client as the workflow
    sends them (its request records kept), then chunk by chunk (vllm_stream_probe)."""
    from vllm_stream_probe import explain, print_explained, probe

    from servesweep.bench.client import run_level
    from servesweep.level import Level, warmup_requests
    from servesweep.run.levels import level_prompts
    from servesweep.server.engines import get_engine
    from servesweep.sweep.config import load_file

    sweep = load_file(CONFIG)
    spec = sweep.spec("vllm-0.26", "moe-1b", "baseline")
    engine = get_engine("vllm")
    base_url = settings.base_url
    with open(out / "probe.jsonl", "w") as f:
        for level in args.probe_levels:
            lv = Level("concurrency", level)
            prompts = level_prompts(spec, tokenizer, lv, 0)
            warmup = warmup_requests(spec["benchmark"], lv)
            engine.flush_cache(base_url)
            records = out / "requests" / f"sweep_L{level}.requests.jsonl"
            s = run_level(settings, prompts, level, warmup, records, lv, 0)
            (out / f"sweep_L{level}.json").write_text(json.dumps(s))
            print(
                f"sweep prompts L{level}, our client: {s['completed']} completed, "
                f"usage_mismatch {s['usage_mismatch']}",
                flush=True,
            )
            engine.flush_cache(base_url)
            start = time.monotonic()
            requests = asyncio.run(probe(base_url, settings.model, prompts, level))
            f.write(json.dumps({"level": level, "requests": requests}) + "\n")
            print(f"probe L{level}: {len(requests)} requests ({time.monotonic() - start:.0f} s)")
            print_explained(str(level), explain(requests, tokenizer))


# ---- the comparison (anywhere) ---------------------------------------------------------------


def theirs_derived(r: dict) -> dict:
    """What `vllm bench serve` does not print but its per-request detail gives: the mean in
    flight over our steady window (achieved concurrency) and over the whole run, and tokens
    per chunk. A request's end is its last chunk (start + TTFT + its ITLs, which is how it
    measures latency)."""
    ok = [i for i, e in enumerate(r["errors"]) if not e]
    t0 = min(r["start_times"][i] for i in ok)
    intervals = [
        (r["start_times"][i] - t0, r["start_times"][i] - t0 + r["ttfts"][i] + sum(r["itls"][i]))
        for i in ok
    ]
    window = steady_window(intervals, min(r["max_concurrency"], len(intervals)))
    chunks = sum(len(r["itls"][i]) + 1 for i in ok)
    span = max(e for _, e in intervals)
    return {
        "achieved_concurrency": mean_inflight(intervals, *window) if window else None,
        "concurrency": sum(e - s for s, e in intervals) / span,
        "tokens_per_chunk": sum(r["output_lens"][i] for i in ok) / chunks,
        "client_cpu_s": r.get("peer_cpu_s"),
    }


def ours_derived(records_path: Path) -> dict:
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    ok = [r for r in records if r["ok"] and not r["warmup"]]
    chunks = sum(len(r["chunk_times_ms"]) for r in ok)
    return {"tokens_per_chunk": sum(r["output_tokens"] for r in ok) / chunks}


def compare(run_dir: Path) -> dict:
    """Per level: each metric's median over repeats for both clients, their difference and
    the median of the back-to-back pairs' differences; the gauges' peaks."""
    levels: dict[int, dict] = {}
    for path in sorted((run_dir / "runs").glob("L*_r*_*.json")):
        if path.name.endswith(".gauges.json"):
            continue
        level, rep, who = path.stem[1:].split("_")
        r = json.loads(path.read_text())
        if who == "theirs":
            r.update(theirs_derived(r))
        else:
            records = run_dir / "requests" / f"{path.stem}.requests.jsonl"
            if records.exists():
                r.update(ours_derived(records))
        gauges = json.loads(path.with_suffix(".gauges.json").read_text())
        entry = levels.setdefault(int(level), {"ours": {}, "theirs": {}})
        entry[who][int(rep[1:])] = {"result": r, "gauges": gauges}
    out = {}
    for level, runs in sorted(levels.items()):
        reps = sorted(set(runs["ours"]) & set(runs["theirs"]))
        if not reps:
            continue
        rows = {}
        for label, ours_key, theirs_key in METRICS:
            a = [runs["ours"][i]["result"].get(ours_key) for i in reps]
            b = [runs["theirs"][i]["result"].get(theirs_key) for i in reps]
            if any(v is None for v in a + b):
                rows[label] = {"ours": None, "theirs": None, "diff": None, "pair_diff": None}
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            pairs = [(x - y) / y for x, y in zip(a, b, strict=True) if y]
            rows[label] = {
                "ours": ma,
                "theirs": mb,
                "diff": (ma - mb) / mb if mb else None,
                "pair_diff": statistics.median(pairs) if pairs else None,
                "runs_ours": a,
                "runs_theirs": b,
            }
        peaks = {who: [runs[who][i]["gauges"]["peaks"] for i in reps] for who in ("ours", "theirs")}
        mismatch = [runs["ours"][i]["result"].get("usage_mismatch") for i in reps]
        out[str(level)] = {
            "repeats": len(reps),
            "metrics": rows,
            "gauge_peaks": peaks,
            "ours_usage_mismatch": mismatch,
        }
    return out


def print_table(result: dict) -> None:
    for level, entry in result.items():
        print(f"\nconcurrency {level}: medians of {entry['repeats']} repeats (ABBA)")
        print(f"{'metric':22s} {'ours':>10s} {'vllm bench':>11s} {'diff':>8s} {'pairs':>8s}")
        for label, row in entry["metrics"].items():
            if row["ours"] is None:
                print(f"{label:22s} {'-':>10s} {'-':>11s}")
                continue
            diff, pair = row["diff"], row["pair_diff"]
            flag = "  <- over 2 %" if diff is not None and abs(diff) > TOLERANCE else ""
            shown = "" if diff is None else f"{100 * diff:+7.1f}%"
            pshown = "" if pair is None else f"{100 * pair:+7.1f}%"
            values = f"{row['ours']:10.2f} {row['theirs']:11.2f}"
            print(f"{label:22s} {values} {shown:>8s} {pshown:>8s}{flag}")
        peaks = entry["gauge_peaks"]
        kv = [p.get("kv_cache_usage") for who in ("ours", "theirs") for p in peaks[who]]
        print(f"peak KV-cache usage (vllm:kv_cache_usage_perc) over the runs: {kv}")
        print(f"our usage_mismatch per run: {entry['ours_usage_mismatch']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help="measure (needs vLLM and a GPU)")
    run.add_argument("--stack-python", default="/tmp/stack-vllm/bin/python3")
    run.add_argument("--model-dest", type=Path, default=Path("/tmp/parity-model"))
    run.add_argument("--out-dir", type=Path, required=True)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    run.add_argument("--levels", type=ints, default=[1, 10, 256, 1024])
    run.add_argument("--repeats", type=int, default=2)
    run.add_argument("--input-len", type=int, default=128)
    run.add_argument("--output-len", type=int, default=128)
    run.add_argument("--prompts-per-level", type=int, default=2)
    run.add_argument("--min-prompts", type=int, default=32)
    run.add_argument("--boot-timeout-s", type=float, default=420)
    run.add_argument("--flags", type=json.loads, default={"max-model-len": 2048})
    run.add_argument("--probe-levels", type=ints, default=[])
    cmp = sub.add_parser("compare", help="the table and JSON from a run's directory")
    cmp.add_argument("run_dir", type=Path)
    for p in (run, cmp):
        p.add_argument("--out", type=Path, help="default benchmarks/results/vllm_parity.json")
    args = parser.parse_args()
    run_dir = args.out_dir if args.what == "run" else args.run_dir
    if args.what == "run":
        measure(args)
    result = compare(run_dir)
    print_table(result)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    server = run_dir / "server.json"
    extra = {"server": json.loads(server.read_text())} if server.exists() else {}
    path = write_result("vllm_parity", {"settings": settings, **extra, "levels": result}, args.out)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
