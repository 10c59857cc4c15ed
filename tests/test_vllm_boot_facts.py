# ruff: noqa: E501  (real log lines, kept whole)
"""The vllm adapter's boot facts, read from vLLM 0.26.0's own log lines (an H200 boot of
the synthetic Qwen3-MoE; /work/shared/vllm-h200/README.md and docs/vllm-h200.md)."""

from servesweep.engines.vllm import VLLMEngine
from servesweep.results.views import boot_costs

# A cold boot (compile cache empty), as vLLM 0.26.0 logged it.
COLD = """\
(EngineCore pid=1) INFO [gpu_model_runner.py] Model loading took 1.61 GiB memory and 1.001256 seconds
(EngineCore pid=1) INFO [backends.py] Dynamo bytecode transform time: 6.12 s
(EngineCore pid=1) INFO [backends.py] Compiling a graph for compile range (1, 8192) takes 15.02 s
(EngineCore pid=1) INFO [monitor.py] torch.compile took 24.64 s in total
(EngineCore pid=1) INFO [kv_cache_utils.py] GPU KV cache size: 8,268,192 tokens
(EngineCore pid=1) INFO [gpu_model_runner.py] Graph capturing finished in 13 secs, took 0.28 GiB
(EngineCore pid=1) INFO [core.py] init engine (profile, create kv cache, warmup model) took 57.67 s
"""

WARM = """\
(EngineCore pid=1) INFO [backends.py] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 1.768 s
(EngineCore pid=1) INFO [monitor.py] torch.compile took 4.0 s in total
"""


def test_cold_boot_facts():
    facts = VLLMEngine().boot_facts(COLD)
    assert facts == {
        "graph_capture_s": 13.0,
        "graph_capture_gib": 0.28,
        "kv_cache_tokens": 8268192.0,
        "compile_s": 24.64,
        "dynamo_transform_s": 6.12,
        "engine_init_s": 57.67,
        "model_load_s": 1.001256,
        "model_load_gib": 1.61,
        "compile_cache": "miss",
    }


def test_cached_compile_is_a_hit():
    facts = VLLMEngine().boot_facts(WARM)
    assert facts["compile_cache"] == "hit"
    assert facts["compile_s"] == 4.0


def test_eager_boot_has_no_compile_facts():
    eager = (
        "GPU KV cache size: 8,268,192 tokens\nModel loading took 1.61 GiB memory and 1.0 seconds"
    )
    facts = VLLMEngine().boot_facts(eager)
    assert "compile_cache" not in facts and "compile_s" not in facts
    assert facts["kv_cache_tokens"] == 8268192


def test_report_lists_each_boot_cold_and_cached():
    engine = VLLMEngine()
    cells = [
        {
            "stack": "s",
            "model": "m",
            "variant": "baseline",
            "repeat": 1,
            "status": "ok",
            "boot_s": 97.0,
            "boot_facts": engine.boot_facts(WARM),
        },
        {
            "stack": "s",
            "model": "m",
            "variant": "baseline",
            "repeat": 0,
            "status": "ok",
            "boot_s": 146.0,
            "boot_facts": engine.boot_facts(COLD),
        },
    ]
    (row,) = boot_costs(cells, ["baseline"])
    assert row["per_boot"] == (
        "r0 146.0 s (compile 24.6 s, cache miss, init 57.7 s); r1 97.0 s (compile 4.0 s, cache hit)"
    )
