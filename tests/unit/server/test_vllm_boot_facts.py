# ruff: noqa: E501  (real log lines, kept whole)
"""The vllm adapter's boot facts, read from vLLM 0.26.0's own log lines (H200 boots of the
synthetic Qwen3-MoE; docs/vllm-h200.md)."""

from servesweep.results.report.views import boot_costs
from servesweep.server.engines.vllm import VLLMEngine

# A cold boot (empty compile cache) and the next boot of the same config, as vLLM 0.26.0
# logged them on the H200 (baseline r0 and r1 of config/examples/h200-vllm.yaml).
COLD = """\
(EngineCore pid=800) INFO 12-02 09:47:17 [gpu_model_runner.py:5347] Model loading took 2.35 GiB memory and 1.022921 seconds
(EngineCore pid=800) INFO 12-02 09:47:21 [backends.py:1155] Dynamo bytecode transform time: 4.41 s
(EngineCore pid=800) INFO 12-02 09:47:31 [backends.py:393] Compiling a graph for compile range (1, 8192) takes 9.50 s
(EngineCore pid=800) INFO 12-02 09:47:33 [monitor.py:53] torch.compile took 15.88 s in total
(EngineCore pid=800) INFO 12-02 09:47:43 [gpu_worker.py:575] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9178 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9222. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(EngineCore pid=800) INFO 12-02 09:47:43 [kv_cache_utils.py:2177] GPU KV cache size: 8,218,048 tokens
(EngineCore pid=800) INFO 12-02 09:47:56 [gpu_model_runner.py:6844] Graph capturing finished in 12 secs, took 0.28 GiB
(EngineCore pid=800) INFO 12-02 09:47:58 [core.py:340] init engine (profile, create kv cache, warmup model) took 41.16 s (compilation: 15.88 s)
"""

WARM = """\
(EngineCore pid=3372) INFO 12-02 09:54:26 [gpu_model_runner.py:5347] Model loading took 2.35 GiB memory and 0.939773 seconds
(EngineCore pid=3372) INFO 12-02 09:54:28 [backends.py:1155] Dynamo bytecode transform time: 1.72 s
(EngineCore pid=3372) INFO 12-02 09:54:29 [backends.py:292] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.972 s
(EngineCore pid=3372) INFO 12-02 09:54:29 [decorators.py:311] Directly load AOT compilation from path /root/.cache/vllm/torch_compile_cache/torch_aot_compile/f71b8ecfc041d3c8189d936f99fe408d8081cf4647450b78ca37b28e52f2484b/rank_0_0/model
(EngineCore pid=3372) INFO 12-02 09:54:29 [monitor.py:53] torch.compile took 2.85 s in total
(EngineCore pid=3372) INFO 12-02 09:54:32 [gpu_worker.py:575] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9178 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9222. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(EngineCore pid=3372) INFO 12-02 09:54:32 [kv_cache_utils.py:2177] GPU KV cache size: 8,220,912 tokens
(EngineCore pid=3372) INFO 12-02 09:54:40 [gpu_model_runner.py:6844] Graph capturing finished in 8 secs, took 0.28 GiB
(EngineCore pid=3372) INFO 12-02 09:54:41 [core.py:340] init engine (profile, create kv cache, warmup model) took 15.52 s (compilation: 2.85 s)
"""

EAGER = """\
(EngineCore pid=3859) INFO 12-02 09:55:47 [gpu_model_runner.py:5347] Model loading took 2.35 GiB memory and 1.194558 seconds
(EngineCore pid=3859) INFO 12-02 09:55:50 [kv_cache_utils.py:2177] GPU KV cache size: 8,241,392 tokens
(EngineCore pid=3859) INFO 12-02 09:55:50 [core.py:347] init engine (profile, create kv cache, warmup model) took 3.18 s
"""


def test_cold_boot_facts():
    facts = VLLMEngine().boot_facts(COLD)
    assert facts == {
        "graph_capture_s": 12.0,
        "graph_capture_gib": 0.28,
        "kv_cache_tokens": 8218048.0,
        "compile_s": 15.88,
        "dynamo_transform_s": 4.41,
        "engine_init_s": 41.16,
        "model_load_s": 1.022921,
        "model_load_gib": 2.35,
        "compile_cache": "miss",
    }


def test_cached_compile_is_a_hit():
    facts = VLLMEngine().boot_facts(WARM)
    assert facts["compile_cache"] == "hit"
    assert facts["compile_s"] == 2.85 and facts["engine_init_s"] == 15.52
    assert facts["graph_capture_s"] == 8.0


def test_older_wording_and_eager_boot():
    # 0.2x releases before 0.26 said "takes", and one said "and initial profiling run".
    older = "torch.compile and initial profiling run took 3.37 s in total"
    assert VLLMEngine().boot_facts(older) == {"compile_s": 3.37, "compile_cache": "miss"}
    facts = VLLMEngine().boot_facts(EAGER)
    assert "compile_cache" not in facts and "compile_s" not in facts
    assert facts["kv_cache_tokens"] == 8241392 and facts["engine_init_s"] == 3.18


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
        "r0 146.0 s (compile 15.9 s, cache miss, init 41.2 s); "
        "r1 97.0 s (compile 2.9 s, cache hit, init 15.5 s)"
    )


def test_the_headline_leaves_out_a_rate_whose_counter_is_missing():
    # A server that counts prefix-cache queries but not hits, or drafts but not accepted
    # tokens: no rate (it raised TypeError before), the rest of the headline stands.
    engine = VLLMEngine()
    metrics = {
        "vllm:prefix_cache_queries_total": 100.0,
        "vllm:spec_decode_num_drafts_total": 10.0,
        "vllm:num_requests_running": 3.0,
    }
    out = engine.headline(metrics, {"version": "0.26.0"})
    assert out == {"running_requests": 3.0, "version": "0.26.0"}
    both = {
        **metrics,
        "vllm:prefix_cache_hits_total": 25.0,
        "vllm:spec_decode_num_accepted_tokens_total": 15.0,
    }
    out = engine.headline(both, {})
    assert out["prefix_cache_hit_rate"] == 0.25 and out["spec_accept_length"] == 2.5
