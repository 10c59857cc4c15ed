"""Do our client and `vllm bench serve` measure the same thing, against one real vLLM server?

`run` (on the lent H200: benchmarks/gpu/run.sh vllm OUT setup parity): one vLLM server (the
synthetic Qwen3-MoE of config/examples/h200-vllm.yaml, the `baseline` variant's flags); at each
concurrency level both clients send the same prompts (our `random` workload: --input-len
random tokens, exact; --output-len output tokens, ignore_eos, temperature 0), interleaved
ABBA, --repeats times each:

- ours: `servesweep.bench.client.run_level`, as the workflow runs a level (the `vllm`
  engine's request extras, one warmup request);
- theirs: `vllm bench serve` from the same vLLM wheel (kept loaded between runs by
  benchmarks/gpu/vllm_bench_peer.py) with `--dataset-name custom` over the same prompts in the
  same order (`--disable-shuffle --skip-chat-template --custom-output-len`), one warmup
  (it repeats the first prompt, so ours does too), `--ignore-eos --temperature 0`.

Before each run the prefix cache is flushed (both clients send the same prompts); before a
level's first measured run our client primes it once (unrecorded), so kernels compiled on
first use at a new batch size are not charged to whichever client comes first. While each
run goes, the server's gauges are sampled (servesweep.server.engines.gauges: peak KV-cache usage,
running and waiting requests). `--probe-levels` then replays the sweep's own prompts
(h200-vllm.yaml's shared_prefix workload) through benchmarks/gpu/vllm_stream_probe.py.

`compare DIR` reads the runs' JSONs back, prints the table (medians over repeats, the
median of the back-to-back pairs' differences) and writes the comparison JSON (default
benchmarks/results/vllm_parity.json):

    python benchmarks/gpu/vllm_parity.py compare /path/to/runs

The harness, the ABBA loop and the comparison are benchmarks/gpu/engine_parity.py's.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from engine_parity import ROOT, Parity, Peer, main

from servesweep.bench.metrics import mean_inflight, steady_window

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


def start_peer(python: str, log_path: Path):
    try:
        return Peer(python, "vllm_bench_peer.py", log_path, "vllm bench serve")
    except RuntimeError as exc:
        print(f"{exc}: vllm bench serve as a command instead", flush=True)
        return CliPeer(str(Path(python).with_name("vllm")), log_path)


def level_prompts(args, tokenizer, level: int, peer, model, out: Path):
    """Our `random` workload (exact lengths, seeded by the level) and the prime's prompts."""
    from servesweep.workloads.random_tokens import random_prompts

    n = max(args.min_prompts, args.prompts_per_level * level)
    prompts = random_prompts(tokenizer, n, args.input_len, args.output_len, level)
    prime = random_prompts(
        tokenizer, max(16, level), args.input_len, args.output_len, 10_000 + level
    )
    return prompts, prime


def run_level_theirs(peer, args, base_url, model, prompts, level, out: Path, run_dir: Path):
    return run_theirs(peer, base_url, model, prompts, level, out, run_dir / "prompts.jsonl")


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


def probe_sweep_prompts(settings, tokenizer, args, out: Path) -> None:
    """The sweep's own prompts at each probe level: through our client as the workflow
    sends them (its request records kept), then chunk by chunk (vllm_stream_probe)."""
    from vllm_stream_probe import explain, print_explained, probe

    from servesweep.bench.client import run_level
    from servesweep.level import Level
    from servesweep.run.levels import level_prompts
    from servesweep.server.engines import get_engine
    from servesweep.sizing import warmup_requests
    from servesweep.sweep.benchmark import BenchmarkSettings
    from servesweep.sweep.config import load_file

    sweep = load_file(CONFIG)
    spec = sweep.spec("vllm-0.26", "moe-1b", "baseline")
    bench = BenchmarkSettings.of(spec["benchmark"])
    engine = get_engine("vllm")
    base_url = settings.base_url
    with open(out / "probe.jsonl", "w") as f:
        for level in args.probe_levels:
            lv = Level("concurrency", level)
            prompts = level_prompts(bench, tokenizer, lv, 0)
            warmup = warmup_requests(bench, lv)
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


PARITY = Parity(
    engine="vllm",
    peer_name="vllm bench serve",
    config=CONFIG,
    flags={"max-model-len": 2048},
    env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
    metrics=METRICS,
    prompts=level_prompts,
    run_theirs=run_level_theirs,
    theirs_derived=theirs_derived,
    start_peer=start_peer,
    after_levels=lambda settings, tokenizer, args, out: (
        probe_sweep_prompts(settings, tokenizer, args, out) if args.probe_levels else None
    ),
)


if __name__ == "__main__":
    main(
        PARITY,
        __doc__.splitlines()[0],
        lambda run: run.add_argument(
            "--probe-levels", type=lambda t: [int(x) for x in t.split(",") if x], default=[]
        ),
    )
