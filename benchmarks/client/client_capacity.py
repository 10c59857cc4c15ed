"""How many streamed tokens per second each benchmark client can take in, on one core.

An instant SSE stub (benchmarks/support/stub_server.py: every response written at once) runs pinned
to one core; each client runs pinned to another, in turn, on the same workload (32-token
random-id prompts, 256 output tokens each) at concurrency 1, 256 and 1024, repeats
interleaved. Against a server that costs nothing, a client's throughput is its own limit.

    python -m benchmarks.client.client_capacity --peer-python /tmp/bench-venv/bin/python

Clients: ours (servesweep.bench.client, three ways: streams kept raw for parsing after the level,
as a level runs while its memory budget lasts; `ours-packed`, kept compressed, as past that
budget; `ours-inline`, parsed as each request ends, as past the second budget too),
`sglang.benchmark.serving` (bench_serving) and SGLang's Rust client
(`sglang.benchmark.rust_client`), both from `--peer-python`, an interpreter with
`pip install --no-deps sglang` and their light imports (benchmarks/README.md); peers that are
not installed there are skipped, saying so.

Printed per client and level (medians over the repeats): output tokens/s over the whole run
(total output tokens / duration, the vLLM/SGLang `output_throughput`), mean in flight (Σ
request time / duration, SGLang's `concurrency`, for every client; for ours also the steady
window's mean, `achieved_concurrency`), and the stub's CPU share of its core during the run
with the rate it could serve at 100 % (tok/s over that share): well under 1 and well above
every client, so the stub is not the limit. Then the ratios ours/theirs; the last line is
`ratio=<ours/bench_serving at 1024>`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.support import SUPPORT, stop
from benchmarks.support.record import write_result
from servesweep.bench import client as ours
from servesweep.level import Level
from servesweep.workloads.base import load_tokenizer
from servesweep.workloads.random_tokens import random_prompts

INPUT_TOKENS, OUTPUT_TOKENS = 32, 256


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stub:
    """The stub in its own process group, pinned to one core; ended by its PID."""

    def __init__(self, core: int):
        cmd = [sys.executable, str(SUPPORT / "stub_server.py"), "--port", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
        os.sched_setaffinity(self.proc.pid, {core})
        self.port = int(self.proc.stdout.readline().split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        stop(self.proc)


def model_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    from servesweep.resources.models import materialize

    dest = Path(tempfile.gettempdir()) / "servesweep-bench" / "model"
    if not (dest / "files" / "tokenizer.json").exists():
        materialize("synthetic", {"synthetic": {}}, dest)
    return dest / "files"


def peer_available(python: str | None, module: str) -> str | None:
    """None when the peer runs, else why not."""
    if not python:
        return "no --peer-python given"
    if not Path(python).exists():
        return f"{python} does not exist"
    probe = f"import importlib.util as u; raise SystemExit(u.find_spec('{module}') is None)"
    shim = SUPPORT / "sglang_shim.py"
    # find_spec of a submodule imports its parents, so go through the shim.
    code = f"import runpy; runpy.run_path({str(shim)!r}, run_name='sglang_shim')['install'](); "
    code += probe
    r = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if r.returncode:
        return f"{module} is not importable by {python} (via {shim.name})"
    return None


# Our client's ways of keeping streams for after the level (docs/metrics.md): raw bytes
# (as a level runs while its 1 GiB budget lasts), compressed (past it), parsed at once (past
# the second budget too).
OURS = {"ours": (1 << 30, 1 << 30), "ours-packed": (0, 1 << 30), "ours-inline": (0, 0)}


def run_ours(url, prompts, level, core, mode: str) -> dict:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})  # the workers inherit it
    budgets = ours.DEFER_BUDGET_BYTES, ours.PACKED_BUDGET_BYTES
    ours.DEFER_BUDGET_BYTES, ours.PACKED_BUDGET_BYTES = OURS[mode]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = ours.ClientSettings(url, model="stub", stall_timeout_s=60)
            start = time.perf_counter()
            s = ours.run_level(
                settings, prompts, level, 1, Path(tmp) / "r.jsonl", Level("concurrency", level), 0
            )
            wall = time.perf_counter() - start
    finally:
        ours.DEFER_BUDGET_BYTES, ours.PACKED_BUDGET_BYTES = budgets
        os.sched_setaffinity(0, before)
    return {
        "ok": s["completed"] == len(prompts) - 1,
        "tok_s": s["output_throughput"],
        "concurrency": s["concurrency"],
        "achieved": s["achieved_concurrency"],
        "cpu_share": s["client_cpu_share"],
        "wall_s": wall,
        "duration_s": s["duration_s"],
    }


def run_peer(python, module, url, model, n, level, core, out_dir: Path) -> dict:
    out = out_dir / f"{module.rsplit('.', 1)[-1]}-{level}.jsonl"
    out.unlink(missing_ok=True)
    cmd = ["taskset", "-c", str(core), python, str(SUPPORT / "sglang_shim.py"), module]
    cmd += ["--backend", "sglang-oai", "--base-url", url, "--model", "stub"]
    cmd += ["--tokenizer", str(model), "--dataset-name", "random-ids"]
    cmd += ["--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS)]
    cmd += ["--random-range-ratio", "1", "--num-prompts", str(n)]
    cmd += ["--max-concurrency", str(level), "--warmup-requests", "1", "--seed", "1"]
    cmd += ["--output-file", str(out), "--disable-tqdm"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONWARNINGS"] = "ignore"
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if r.returncode or not out.exists():
        tail = (r.stdout + r.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"{module} failed ({r.returncode}):\n" + "\n".join(tail))
    res = json.loads(out.read_text().strip().splitlines()[-1])
    return {
        "ok": res["completed"] == n,
        "tok_s": res["output_throughput"],
        "concurrency": res["concurrency"],
        "achieved": None,
        "cpu_share": None,
        "wall_s": wall,
        "duration_s": res["duration"],
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", help="interpreter with sglang installed (--no-deps)")
    parser.add_argument("--levels", default="1,256,1024")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--prompts-per-stream", type=int, default=16, help="requests per level = this x level"
    )
    parser.add_argument("--min-prompts", type=int, default=1000)
    parser.add_argument("--stub-core", type=int, default=1)
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument("--model-dir", help="tokenizer dir (default: a synthetic model)")
    parser.add_argument("--clients", default="ours,ours-packed,ours-inline,bench_serving,rust")
    parser.add_argument("--out", type=Path, help="default benchmarks/results/client_capacity.json")
    args = parser.parse_args()

    levels = [int(x) for x in args.levels.split(",")]
    model = model_dir(args.model_dir)
    tokenizer = load_tokenizer(model)
    peers = {
        "bench_serving": "sglang.benchmark.serving",
        "rust": "sglang.benchmark.rust_client",
    }
    clients = args.clients.split(",")
    for name, module in peers.items():
        if name in clients:
            why = peer_available(args.peer_python, module)
            if why:
                print(f"skipping {name}: {why}")
                clients.remove(name)
    print(
        f"stub on core {args.stub_core}, clients on core {args.client_core}; "
        f"{INPUT_TOKENS}-token prompts, {OUTPUT_TOKENS} output tokens; clients: {clients}"
    )

    results: dict = {}
    stub = Stub(args.stub_core)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.repeats):
                for level in levels:
                    n = max(args.min_prompts, args.prompts_per_stream * level)
                    prompts = random_prompts(
                        tokenizer, n + 1, INPUT_TOKENS, OUTPUT_TOKENS, seed=rep
                    )
                    for name in clients:
                        cpu0 = stub.cpu()
                        if name in OURS:
                            r = run_ours(stub.url, prompts, level, args.client_core, name)
                        else:
                            r = run_peer(
                                args.peer_python,
                                peers[name],
                                stub.url,
                                model,
                                n,
                                level,
                                args.client_core,
                                Path(tmp),
                            )
                        # The stub's CPU time over the client's measured duration: its
                        # share of its core while serving (a little warmup included).
                        r["stub_cpu"] = (stub.cpu() - cpu0) / r["duration_s"]
                        results.setdefault((name, level), []).append(r)
                        print(
                            f"  rep {rep} level {level:5d} {name:14s} {fmt(r['tok_s']):>10s} tok/s"
                            f"  concurrency {fmt(r['concurrency'], 1):>7s}"
                            f"  achieved {fmt(r['achieved'], 1):>7s}"
                            f"  stub cpu {r['stub_cpu']:.2f}"
                            f"  {'' if r['ok'] else 'INCOMPLETE'}",
                            flush=True,
                        )
    finally:
        stub.stop()

    print()
    print(f"medians of {args.repeats} repeats; one core per client")
    header = (
        f"{'client':14s} {'level':>6s} {'output tok/s':>13s} {'concurrency':>12s} "
        f"{'achieved':>9s} {'% of level':>10s} {'stub cpu':>9s} {'stub could serve':>17s}"
    )
    print(header)
    med = {}
    for (name, level), rs in results.items():
        m = {k: median([r[k] for r in rs]) for k in ("tok_s", "concurrency", "achieved")}
        m["stub_cpu"] = max(r["stub_cpu"] for r in rs)
        med[(name, level)] = m
        held = m["achieved"] if m["achieved"] is not None else m["concurrency"]
        print(
            f"{name:14s} {level:6d} {fmt(m['tok_s']):>13s} {fmt(m['concurrency'], 1):>12s} "
            f"{fmt(m['achieved'], 1):>9s} {fmt(100 * held / level, 1):>10s} "
            f"{m['stub_cpu']:9.2f} {fmt(m['tok_s'] / max(m['stub_cpu'], 1e-3)):>17s}"
        )
    print()
    for mine in OURS:
        for theirs in ("bench_serving", "rust"):
            parts = []
            for level in levels:
                a, b = med.get((mine, level)), med.get((theirs, level))
                if a and b and a["tok_s"] and b["tok_s"]:
                    parts.append(f"{level}: {a['tok_s'] / b['tok_s']:.2f}x")
            if parts:
                print(f"{mine}/{theirs}: " + ", ".join(parts))
    a, b = med.get(("ours", 1024)), med.get(("bench_serving", 1024))
    ratio = a["tok_s"] / b["tok_s"] if a and b and b["tok_s"] else float("nan")
    print(f"ratio={ratio:.2f}")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    rows = [{"client": n, "level": lv, **m} for (n, lv), m in med.items()]
    runs = [{"client": n, "level": lv, "runs": rs} for (n, lv), rs in results.items()]
    data = {"settings": settings, "medians": rows, "ours_over_bench_serving_1024": ratio}
    path = write_result("client_capacity", {**data, "runs": runs}, args.out)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
