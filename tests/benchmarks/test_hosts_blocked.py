"""benchmarks/gpu/hosts_blocked.py on two leases with a known machine effect: the block
removes it (the variant's effect recovered, its interval covering the truth), where pooling
the leases' boots would not; one machine is refused with one line."""

import json
import math
import subprocess
import sys

from fixtures.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu" / "hosts_blocked.py"
CONFIG = ROOT / "config" / "examples" / "h200-engines.yaml"
NOISE = [1.03, 0.98, 1.0, 0.99, 1.02, 0.97, 1.01]  # each boot's own factor, about 2 %


def lease(run_dir, machine: str, host: float, boots: dict[str, int], gain: float) -> None:
    """Boots of baseline and vllm on one machine: 1000 tok/s x the host x (1 + gain for
    vllm) x a boot's noise, at levels 1 and 10 (10 x that)."""
    i = 0
    for variant, n in boots.items():
        for repeat in range(n):
            value = 1000 * host * (1 + gain if variant == "vllm" else 1) * NOISE[i % len(NOISE)]
            i += 1
            cell = {
                "variant": variant,
                "repeat": repeat,
                "status": "ok",
                "machine": {"key": machine},
                "levels": [
                    {"level": 1, "status": "ok", "output_throughput": value},
                    {"level": 10, "status": "ok", "output_throughput": 10 * value},
                ],
            }
            d = run_dir / "results" / "cells" / "s" / "m" / variant / f"r{repeat}"
            d.mkdir(parents=True)
            (d / "cell.json").write_text(json.dumps(cell))


def run(*dirs, out=None):
    argv = [sys.executable, str(SCRIPT), str(CONFIG), *map(str, dirs)]
    argv += ["--out", str(out)] if out else []
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_the_machine_as_a_block_recovers_the_variants_effect(tmp_path):
    # Host B is 30 % slower, and ran more baseline boots than vllm ones: pooled, the
    # leases would mix the host into the variant's effect.
    lease(tmp_path / "a", "hostA", 1.0, {"baseline": 2, "vllm": 3}, 0.10)
    lease(tmp_path / "b", "hostB", 0.7, {"baseline": 4, "vllm": 1}, 0.10)
    out = tmp_path / "blocked.json"
    done = run(tmp_path / "a", tmp_path / "b", out=out)
    assert done.returncode == 0, done.stderr
    levels = json.loads(out.read_text())["levels"]
    assert [r["level"] for r in levels] == [1, 10]
    for r in levels:
        assert r["delta_lo"] < 10.0 < r["delta_hi"], r
        assert abs(r["delta_pct"] - 10.0) < 3.0, r
        assert r["df"] == 10 - 3  # 10 boots, less the variant, the machine and the mean
        assert r["verdict"] == "higher output_throughput"
        assert r["boots"] == {
            "hostA": {"baseline": 2, "vllm": 3},
            "hostB": {"baseline": 4, "vllm": 1},
        }
    # The leases pooled as one machine's boots: the host's 30 % pulls the variant's effect.
    logs = {v: [] for v in ("baseline", "vllm")}
    for d in ("a", "b"):
        for p in (tmp_path / d).glob("results/cells/*/*/*/r*/cell.json"):
            c = json.loads(p.read_text())
            logs[c["variant"]].append(math.log(c["levels"][0]["output_throughput"]))
    mean = {v: sum(x) / len(x) for v, x in logs.items()}
    assert math.expm1(mean["vllm"] - mean["baseline"]) * 100 > 20  # not 10: confounded


def test_one_machine_is_the_judges_to_read(tmp_path):
    lease(tmp_path / "a", "hostA", 1.0, {"baseline": 3, "vllm": 3}, 0.10)
    done = run(tmp_path / "a")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no level with boots of baseline and vllm on each of two" in lines[0]
