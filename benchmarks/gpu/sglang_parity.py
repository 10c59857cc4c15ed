"""Do our client and sglang.bench_serving measure the same thing, against one SGLang server?

`run` (on the lent H200: benchmarks/gpu/run.sh sglang OUT setup parity): one SGLang 0.5.17
server (the synthetic Qwen3-MoE of config/examples/h200-sglang.yaml, its `baseline` flags);
at each concurrency level both clients send the same prompts, interleaved ABBA, --repeats
times each:

- theirs: `python -m sglang.benchmark.serving` (bench_serving, the seeds' own client) from
  the same wheel, kept loaded between runs (benchmarks/gpu/sglang_bench_peer.py), on its own
  `random-ids` dataset: `--random-input-len`, `--random-output-len`, `--random-range-ratio 1`,
  `--seed` the level, one warmup request (`--warmup-requests 1`), `--backend sglang-oai`
  (completions; temperature 0 and ignore_eos are its defaults);
- ours: `servesweep.bench.client.run_level`, as the workflow runs a level (the `sglang`
  engine's request extras), on the very prompts bench_serving's dataset code produced for
  those arguments (the peer's `rows`), one warmup request (the first prompt again, as
  bench_serving's warmup sends).

bench_serving asks for no usage chunk (every chunk's `usage` is null on 0.5.17), so its
output tokens are the requested length, which ignore_eos makes true; ours counts the usage
chunk (`stream_options.include_usage`). Before the levels, `flush_check.json` records that
`/flush_cache` works (a repeated prompt's cached tokens, `sglang:cached_tokens_total`, before
and after a flush) and what the stream's last chunks are with include_usage.

    python benchmarks/gpu/sglang_parity.py compare /path/to/parity

The harness, the ABBA loop and the comparison are benchmarks/gpu/engine_parity.py's.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

from engine_parity import ROOT, Parity, Peer, first_wave_sent, main

CONFIG = ROOT / "config" / "examples" / "h200-sglang.yaml"
# (label, our level summary's field, bench_serving's result field or a derived one)
METRICS = [
    ("output tok/s", "output_throughput", "output_throughput"),
    ("median TTFT ms", "median_ttft_ms", "median_ttft_ms"),
    ("p99 TTFT ms", "p99_ttft_ms", "p99_ttft_ms"),
    ("median TPOT ms", "median_tpot_ms", "median_tpot_ms"),
    ("p99 TPOT ms", "p99_tpot_ms", "p99_tpot_ms"),
    ("median ITL ms", "median_itl_ms", "median_itl_ms"),
    ("p99 ITL ms", "p99_itl_ms", "p99_itl_ms"),
    # bench_serving's ITL is the gap between chunks with text: our chunk gap.
    ("median chunk gap ms", "median_chunk_gap_ms", "median_itl_ms"),
    ("p99 chunk gap ms", "p99_chunk_gap_ms", "p99_itl_ms"),
    ("median e2e ms", "median_e2el_ms", "median_e2e_latency_ms"),
    ("request/s", "request_throughput", "request_throughput"),
    # Σ request time / duration on both sides (SGLang's own definition).
    ("mean in flight", "concurrency", "concurrency"),
    ("duration s", "duration_s", "duration"),
    ("output tokens", "total_output_tokens", "total_output_tokens"),
    ("tokens per chunk", "tokens_per_chunk", "tokens_per_chunk"),
    ("client CPU s", "client_cpu_s", "client_cpu_s"),
    # The first wave's sends (ours: `sent_s`; theirs: the peer's `send_s`), from its first.
    ("wave sent: median ms", "wave_sent_median_ms", "wave_sent_median_ms"),
    ("wave sent: last ms", "wave_sent_last_ms", "wave_sent_last_ms"),
]


def baseline_flags() -> dict:
    from servesweep.sweep.config import load_file

    return dict(load_file(CONFIG).variants["baseline"]["flags"])


def start_peer(python: str, log_path: Path) -> Peer:
    return Peer(python, "sglang_bench_peer.py", log_path, "bench_serving")


def peer_argv(args, base_url: str, model: Path, n: int, level: int) -> list[str]:
    argv = ["--backend", "sglang-oai", "--base-url", base_url]
    argv += ["--model", str(model), "--tokenizer", str(model), "--dataset-name", "random-ids"]
    argv += ["--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len)]
    argv += ["--random-range-ratio", "1", "--num-prompts", str(n), "--seed", str(level)]
    argv += ["--max-concurrency", str(level), "--warmup-requests", "1"]
    # Our readiness check has passed; its own would poll /v1/models again.
    argv += ["--ready-check-timeout-sec", "0", "--output-details", "--disable-tqdm"]
    return argv


def level_prompts(args, tokenizer, level: int, peer, model: Path, out: Path):
    """bench_serving's random-ids prompts for this level (its own code, its seed), as our
    Prompts; the prime: our random workload at the level (other prompts)."""
    from servesweep.workloads.base import Prompt, count_tokens
    from servesweep.workloads.random_tokens import random_prompts

    n = max(args.min_prompts, args.prompts_per_level * level)
    rows_path = out / f"rows_L{level}.json"
    argv = peer_argv(args, "http://127.0.0.1:1", model, n, level)  # nothing is sent
    rows = peer.run(argv, rows_path, rows=True)
    prompts = [
        Prompt(r["prompt"], count_tokens(tokenizer, r["prompt"]), r["output_len"]) for r in rows
    ]
    prime = random_prompts(
        tokenizer, max(16, level), args.input_len, args.output_len, 10_000 + level
    )
    return prompts, prime


def run_theirs(peer, args, base_url, model, prompts, level: int, out: Path, run_dir: Path):
    try:
        r = peer.run(peer_argv(args, base_url, model, len(prompts), level), out)
    except RuntimeError as exc:  # ours goes on: its records still count
        print(f"  {exc}", flush=True)
        out.unlink(missing_ok=True)
        return None
    if r["completed"] != len(prompts):
        print(f"  bench_serving at {level}: {len(prompts) - r['completed']} failed", flush=True)
    # The texts it generated are the bulk of its JSON and say nothing here.
    r.pop("generated_texts", None)
    out.write_text(json.dumps(r))
    return r


def theirs_derived(r: dict) -> dict:
    """Tokens per chunk (its first chunk and one per ITL) and its CPU time."""
    ok = [i for i, e in enumerate(r.get("errors") or []) if not e]
    chunks = sum(len(r["itls"][i]) + 1 for i in ok)
    tokens = sum(r["output_lens"][i] for i in ok)
    return {
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "client_cpu_s": r.get("peer_cpu_s"),
        **first_wave_sent(r.get("send_s") or [], int(r.get("max_concurrency") or 1)),
    }


def cached_tokens(base_url: str) -> float:
    from servesweep.server.engines.prometheus import counter_total, parse_prometheus

    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as f:
        page = parse_prometheus(f.read().decode())
    return counter_total(page, "sglang:cached_tokens_total")


def last_chunks(base_url: str, model: str, prompt: str) -> list[str]:
    """The last SSE lines of one streamed completion with include_usage (what 0.5.17 sends:
    the usage chunk with `choices: []`, then [DONE])."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        base_url + "/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as f:
        lines = [x.decode().strip() for x in f if x.strip()]
    return lines[-3:]


def flush_check(engine, settings, out: Path) -> None:
    """The same 256-token prompt three times, the third after /flush_cache: the second must
    find it cached and the third must not. A failure here is printed; the levels go on."""
    try:
        check_flush(engine, settings, out)
    except Exception as exc:  # noqa: BLE001 - evidence, never a reason to skip the parity
        print(f"flush check failed: {type(exc).__name__}: {exc}", flush=True)


def check_flush(engine, settings, out: Path) -> None:
    from servesweep.bench.client import probe_generation
    from servesweep.workloads.random_tokens import random_prompts

    (prompt,) = random_prompts(settings.tokenizer, 1, 256, 4, 777)
    send = lambda: asyncio.run(probe_generation(settings, prompt.text, 4, 60))  # noqa: E731
    grew = []
    engine.flush_cache(settings.base_url)
    for flush_first in (False, False, True):
        if flush_first:
            grew.append({"flushed": engine.flush_cache(settings.base_url)})
        before = cached_tokens(settings.base_url)
        send()
        grew.append({"cached_tokens": cached_tokens(settings.base_url) - before})
    first, second, _, third = grew
    result = {
        "prompt_tokens": prompt.input_tokens,
        "steps": grew,
        "flush_works": first["cached_tokens"] == 0 < second["cached_tokens"]
        and third["cached_tokens"] == 0,
        "stream_tail_with_include_usage": last_chunks(
            settings.base_url, settings.model, prompt.text
        ),
    }
    (out / "flush_check.json").write_text(json.dumps(result, indent=1))
    print(f"flush check: {json.dumps(result)}", flush=True)


PARITY = Parity(
    engine="sglang",
    peer_name="bench_serving",
    config=CONFIG,
    flags={},  # the example's baseline, read when run
    env={},
    metrics=METRICS,
    prompts=level_prompts,
    run_theirs=run_theirs,
    theirs_derived=theirs_derived,
    start_peer=start_peer,
    before_levels=flush_check,
)


if __name__ == "__main__":
    PARITY.flags = baseline_flags()
    main(PARITY, __doc__.splitlines()[0])
