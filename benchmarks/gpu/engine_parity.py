"""What the engine parities share (benchmarks/gpu/vllm_parity.py, sglang_parity.py): one real
server, our client and the engine's own benchmark client at each concurrency level, the
same prompts, interleaved ABBA (ours, theirs, theirs, ours, ...), and the comparison.

`Parity` is what an engine's script fills in: its engine and flags, the prompts a level
sends, how its peer runs one level, what the peer's result lacks (derived from its
per-request detail), the metric names on both sides. `measure` runs it on the GPU machine;
`compare` reads the runs' JSONs back anywhere and `print_table` prints them.

Before each run the prefix cache is flushed (both clients send the same prompts); before a
level's first measured run our client primes it once at the level (unrecorded), so kernels
compiled on first use at a new batch size are not charged to whichever client comes first.
While each run goes, the server's gauges are sampled (peak KV-cache usage, running and
waiting requests). Each run's JSON is written as soon as it ends, so a run cut short still
compares what it has (`compare` pairs only repeats both clients finished).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.support.record import write_result  # noqa: E402

HERE = Path(__file__).resolve().parent
TOLERANCE = 0.02


@dataclass
class Parity:
    """One engine's parity: what differs between vLLM's and SGLang's."""

    engine: str  # the servesweep engine adapter
    peer_name: str  # how the table names the other client
    config: Path  # the example sweep whose synthetic model the server loads
    flags: dict  # the server's variant flags
    env: dict  # its variant env
    # (label, our level summary's field, the peer result's field or a derived one)
    metrics: list[tuple[str, str, str]]
    # (args, tokenizer, level, peer, model, run_dir) -> (the level's prompts, the prime's)
    prompts: Callable
    # (peer, args, base_url, model, prompts, level, out_json, run_dir) -> result or None
    run_theirs: Callable
    # a peer result -> what its summary lacks, from its per-request detail
    theirs_derived: Callable[[dict], dict]
    # the peer process: (stack_python, log_path) -> an object with run(...) and stop()
    start_peer: Callable
    # after the server is ready, before the levels: (engine, client settings, run_dir)
    before_levels: Callable | None = None
    # after the levels: (client settings, tokenizer, args, run_dir)
    after_levels: Callable | None = None
    extra: dict = field(default_factory=dict)


class Peer:
    """A benchmark peer kept loaded under the stack's interpreter (HERE/<script>), one run
    per stdin line {"argv": [...], "out": PATH, ...}; it prints PEER-READY once, then
    PEER-DONE {"ok": ..., "error": ...} after each run (vllm_bench_peer.py,
    sglang_bench_peer.py)."""

    def __init__(self, python: str, script: str, log_path: Path, label: str):
        self.label = label
        self.log = open(log_path, "a")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [python, str(HERE / script)],
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
        raise RuntimeError(
            f"{self.label} peer ended (exit {self.proc.wait()}); see {self.log.name}"
        )

    def run(self, argv: list[str], out: Path, **job) -> dict:
        self.log.write(f"$ {self.label} {' '.join(argv)}\n")
        self.proc.stdin.write(json.dumps({"argv": argv, "out": str(out), **job}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self._until("PEER-DONE "))
        if not reply["ok"]:
            raise RuntimeError(f"{self.label} failed: {reply['error']}")
        return json.loads(out.read_text())

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def build_model(config: Path, dest: Path) -> Path:
    """The example sweep's synthetic model, built under dest (reused when there)."""
    from servesweep.resources.models import materialize
    from servesweep.sweep.config import load_file

    if not (dest / "files" / "config.json").exists():
        materialize("moe-1b", load_file(config).models["moe-1b"], dest)
    return (dest / "files").resolve()


def run_ours(settings, prompts, level: int, path: Path, records: Path) -> dict:
    from servesweep.bench.client import run_level
    from servesweep.level import Level

    # One warmup: the first measured prompt once more, as both peers warm up.
    sent = [prompts[0], *prompts]
    s = run_level(settings, sent, level, 1, records, Level("concurrency", level), 0)
    if s["completed"] != len(prompts):
        print(f"  ours at {level}: {s['failed']} failed: {s['errors']}", flush=True)
    path.write_text(json.dumps(s))
    return s


def gpu_after() -> str:
    """nvidia-smi's compute processes and memory in use (the teardown left none)."""
    query = [
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
    ]
    try:
        out = [subprocess.run(q, capture_output=True, text=True, timeout=20).stdout for q in query]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi: {exc}"
    return f"memory used: {out[0].strip()}; compute processes: {out[1].strip() or 'none'}"


def measure(parity: Parity, args) -> None:
    from servesweep.bench.client import ClientSettings, probe_generation
    from servesweep.server.engines import get_engine
    from servesweep.server.engines.gauges import GaugeSampler
    from servesweep.server.process import ServerProcess, free_port
    from servesweep.server.readiness import wait_ready
    from servesweep.workloads.base import load_tokenizer

    out = args.out_dir
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "requests").mkdir(exist_ok=True)
    model = build_model(parity.config, args.model_dest)
    tokenizer = load_tokenizer(model)
    engine = get_engine(parity.engine)
    port = free_port()
    command = engine.command(args.stack_python, str(model), "127.0.0.1", port, parity.flags)
    env = engine.env(parity.env)
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
        peer = parity.start_peer(args.stack_python, out / "peer.log")  # loads while it boots
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
        if parity.before_levels:
            parity.before_levels(engine, settings, out)
        metrics_url = server.base_url + engine.metrics_path
        for level in args.levels:
            prompts, prime = parity.prompts(args, tokenizer, level, peer, model, out)
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
                    path = out / "runs" / f"{name}.json"
                    with GaugeSampler(metrics_url, engine.peak_gauges) as gauges:
                        if who == "ours":
                            records = out / "requests" / f"{name}.requests.jsonl"
                            r = run_ours(settings, prompts, level, path, records)
                        else:
                            r = parity.run_theirs(
                                peer, args, server.base_url, model, prompts, level, path, out
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
        if parity.after_levels:
            parity.after_levels(settings, tokenizer, args, out)
    finally:
        if peer is not None:
            peer.stop()
        teardown = server.stop(grace_s=30)
        print(
            f"server stopped: {'clean' if teardown.clean else 'NOT clean'} in "
            f"{teardown.seconds:.1f} s; {gpu_after()}",
            flush=True,
        )


# ---- the comparison (anywhere) ---------------------------------------------------------------


def compare(parity: Parity, run_dir: Path) -> dict:
    """Per level: each metric's median over repeats for both clients, their difference and
    the median of the back-to-back pairs' differences; the gauges' peaks."""
    levels: dict[int, dict] = {}
    for path in sorted((run_dir / "runs").glob("L*_r*_*.json")):
        if path.name.endswith(".gauges.json"):
            continue
        level, rep, who = path.stem[1:].split("_")
        r = json.loads(path.read_text())
        if who == "theirs":
            r.update(parity.theirs_derived(r))
        else:
            records = run_dir / "requests" / f"{path.stem}.requests.jsonl"
            if records.exists():
                r.update(ours_derived(records, int(level)))
        gauges_path = path.with_suffix(".gauges.json")
        gauges = json.loads(gauges_path.read_text()) if gauges_path.exists() else {"peaks": {}}
        entry = levels.setdefault(int(level), {"ours": {}, "theirs": {}})
        entry[who][int(rep[1:])] = {"result": r, "gauges": gauges}
    out = {}
    for level, runs in sorted(levels.items()):
        reps = sorted(set(runs["ours"]) & set(runs["theirs"]))
        if not reps:
            continue
        rows = {}
        for label, ours_key, theirs_key in parity.metrics:
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


def ours_derived(records_path: Path, level: int) -> dict:
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    ok = [r for r in records if r["ok"] and not r["warmup"]]
    chunks = sum(len(r["chunk_times_ms"]) for r in ok)
    sent = [r["sent_s"] for r in records if not r["warmup"] and r.get("sent_s") is not None]
    return {
        "tokens_per_chunk": sum(r["output_tokens"] for r in ok) / chunks if chunks else None,
        **first_wave_sent(sent, level),
    }


def first_wave_sent(sent: list[float], level: int) -> dict:
    """How a client's first wave (its first `level` requests) reached the server: ms from
    the first one's send to the wave's median and last one's (None where not recorded)."""
    wave = sorted(sent)[:level]
    if not wave:
        return {"wave_sent_median_ms": None, "wave_sent_last_ms": None}
    return {
        "wave_sent_median_ms": 1000 * (statistics.median(wave) - wave[0]),
        "wave_sent_last_ms": 1000 * (wave[-1] - wave[0]),
    }


GAUGE_PEAKS = ("kv_cache_usage", "kv_used_tokens", "running_requests", "waiting_requests")


def print_table(parity: Parity, result: dict) -> None:
    for level, entry in result.items():
        print(f"\nconcurrency {level}: medians of {entry['repeats']} repeats (ABBA)")
        print(
            f"{'metric':22s} {'ours':>10s} {parity.peer_name[:11]:>11s} {'diff':>8s} {'pairs':>8s}"
        )
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
        # What the server saw of each client, run by run: a client that cannot keep its
        # streams busy shows lower peaks than its nominal concurrency (2026-12-08: one of
        # bench_serving's runs at 256 never had more than 181 requests running).
        peaks = entry["gauge_peaks"]
        print("server gauges' peaks per run (ours | theirs):")
        for gauge in GAUGE_PEAKS:
            mine, other = ([p.get(gauge) for p in peaks[who]] for who in ("ours", "theirs"))
            print(f"  {gauge:18s} {mine} | {other}")
        print(f"our usage_mismatch per run: {entry['ours_usage_mismatch']}")


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(parity: Parity, description: str, add_args: Callable | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=description)
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("run", help=f"measure (needs {parity.engine} and a GPU)")
    run.add_argument("--stack-python", default=f"/tmp/stack-{parity.engine}/bin/python3")
    run.add_argument("--model-dest", type=Path, default=Path("/tmp/parity-model"))
    run.add_argument("--out-dir", type=Path, required=True)
    run.add_argument("--levels", type=ints, default=[1, 10, 256, 1024])
    run.add_argument("--repeats", type=int, default=2)
    run.add_argument("--input-len", type=int, default=128)
    run.add_argument("--output-len", type=int, default=128)
    run.add_argument("--prompts-per-level", type=int, default=2)
    run.add_argument("--min-prompts", type=int, default=32)
    run.add_argument("--boot-timeout-s", type=float, default=420)
    run.add_argument("--flags", type=json.loads, default=None, help="the server's flags (JSON)")
    if add_args:
        add_args(run)
    cmp = sub.add_parser("compare", help="the table and JSON from a run's directory")
    cmp.add_argument("run_dir", type=Path)
    for p in (run, cmp):
        p.add_argument(
            "--out", type=Path, help=f"default benchmarks/results/{parity.engine}_parity.json"
        )
    args = parser.parse_args()
    run_dir = args.out_dir if args.what == "run" else args.run_dir
    if args.what == "run":
        if args.flags is not None:
            parity.flags = args.flags
        measure(parity, args)
    result = compare(parity, run_dir)
    print_table(parity, result)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    extra = {}
    for name in ("server.json", "flush_check.json"):
        if (run_dir / name).exists():
            extra[name.split(".")[0]] = json.loads((run_dir / name).read_text())
    name = f"{parity.engine}_parity"
    path = write_result(name, {"settings": settings, **extra, "levels": result}, args.out)
    print(f"written to {path}")
