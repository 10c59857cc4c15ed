"""benchmarks/gpu/sglang_parity.py compare on runs with known values: medians over the ABBA
repeats, their difference and the pairs', what bench_serving's detail yields (tokens per
chunk), and how each client's first wave reached the server (ours: the request records'
`sent_s`; theirs: the peer's `send_s`)."""

import json
import subprocess
import sys

from fixtures.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu" / "sglang_parity.py"
LEVEL = 4  # a wave is 4 requests; each run sends 8 (two waves)


def ours(run_dir, rep: int, tput: float, sent: list[float]) -> None:
    name = f"L{LEVEL}_r{rep}_ours"
    (run_dir / "runs" / f"{name}.json").write_text(
        json.dumps({"output_throughput": tput, "median_ttft_ms": 10.0, "usage_mismatch": 0})
    )
    gauges(run_dir, name, running=4.0, kv_tokens=64.0)
    warmup = {"ok": True, "warmup": True, "sent_s": 0.0, "output_tokens": 4}
    records = [warmup | {"chunk_times_ms": [1, 2, 3, 4]}]
    for t in sent:
        records.append(
            {"ok": True, "warmup": False, "sent_s": t, "output_tokens": 4, "chunk_times_ms": [1, 2]}
        )
    lines = "\n".join(json.dumps(r) for r in records) + "\n"
    (run_dir / "requests" / f"{name}.requests.jsonl").write_text(lines)


def theirs(run_dir, rep: int, tput: float, send: list[float]) -> None:
    result = {
        "output_throughput": tput,
        "median_ttft_ms": 12.0,
        "max_concurrency": LEVEL,
        "errors": [""] * len(send),
        "output_lens": [4] * len(send),
        "itls": [[0.001] * 3] * len(send),  # 4 chunks of one token each
        "peer_cpu_s": 0.5,
        "send_s": send,
    }
    (run_dir / "runs" / f"L{LEVEL}_r{rep}_theirs.json").write_text(json.dumps(result))
    gauges(run_dir, f"L{LEVEL}_r{rep}_theirs", running=3.0 + min(rep, 1), kv_tokens=40.0 + 20 * rep)


def gauges(run_dir, name: str, running: float, kv_tokens: float) -> None:
    peaks = {"kv_cache_usage": 0.01, "kv_used_tokens": kv_tokens, "running_requests": running}
    peaks["waiting_requests"] = 0.0
    (run_dir / "runs" / f"{name}.gauges.json").write_text(json.dumps({"peaks": peaks}))


def test_compare_reads_both_clients_runs_and_their_first_waves(tmp_path):
    run_dir = tmp_path / "parity"
    (run_dir / "runs").mkdir(parents=True)
    (run_dir / "requests").mkdir()
    # Ours sends a wave within 3 ms, the next wave 1 s later; theirs ramps over 300 ms.
    burst = [0.5, 0.501, 0.502, 0.503, 1.5, 1.501, 1.502, 1.503]
    ramp = [0.0, 0.1, 0.2, 0.3, 1.0, 1.1, 1.2, 1.3]
    ours(run_dir, 0, 100.0, burst)
    theirs(run_dir, 0, 90.0, ramp)
    theirs(run_dir, 1, 100.0, ramp)
    ours(run_dir, 1, 110.0, burst)
    theirs(run_dir, 2, 80.0, ramp)  # no ours beside it: not paired, not counted
    out = tmp_path / "parity.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "compare", str(run_dir), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    level = json.loads(out.read_text())["levels"][str(LEVEL)]
    assert level["repeats"] == 2
    rows = level["metrics"]
    tput = rows["output tok/s"]
    assert (tput["ours"], tput["theirs"]) == (105.0, 95.0)
    assert abs(tput["diff"] - 10 / 95) < 1e-9
    assert abs(tput["pair_diff"] - (10 / 90 + 10 / 100) / 2) < 1e-9  # median of two pairs
    assert rows["median TTFT ms"]["ours"] == 10.0 and rows["median TTFT ms"]["theirs"] == 12.0
    # Ours: 4 tokens in 2 chunks a request (the warm-up not counted); theirs: 1 a chunk.
    assert rows["tokens per chunk"]["ours"] == 2.0 and rows["tokens per chunk"]["theirs"] == 1.0
    # The first wave only (the level's first 4 sends), from its first send.
    last = rows["wave sent: last ms"]
    assert abs(last["ours"] - 3.0) < 1e-6 and abs(last["theirs"] - 300.0) < 1e-6
    median = rows["wave sent: median ms"]
    assert abs(median["ours"] - 1.5) < 1e-6 and abs(median["theirs"] - 150.0) < 1e-6
    assert "over 2 %" in done.stdout
    # The server's own peaks, per client and run: ours kept 4 running, theirs 3 then 4.
    assert "  running_requests   [4.0, 4.0] | [3.0, 4.0]" in done.stdout
    assert "  kv_used_tokens     [64.0, 64.0] | [40.0, 60.0]" in done.stdout
