# ruff: noqa: E501  (real log lines, kept whole)
"""The sglang adapter against SGLang 0.5.17's own words: its boot log lines, its /metrics
names and what a level's counters give (verbatim from the H200 run, docs/sglang-h200.md)."""

from servesweep.results.report.views import boot_costs
from servesweep.server.engines import get_engine
from servesweep.server.engines.prometheus import counter_delta, parse_prometheus

# One cold boot's lines as 0.5.17 logged them (the scheduler's prefix, then the message).
COLD = """\
[2026-12-03 10:02:11] server_args=ServerArgs(model_path='/tmp/m/files', ...)
[2026-12-03 10:02:58 TP0] Load weight end. elapsed=0.64 s, type=Qwen3MoeForCausalLM, avail mem=137.51 GB, mem usage=1.61 GB.
[2026-12-03 10:02:58 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 7642378, K size: 58.31 GB, V size: 58.31 GB
[2026-12-03 10:04:11 TP0] Capture target prefill CUDA graph end. elapsed=72.90 s, mem usage=0.39 GB, avail mem=19.84 GB.
[2026-12-03 10:04:19 TP0] Capture target decode CUDA graph end. elapsed=7.71 s, mem usage=0.09 GB, avail mem=19.75 GB.
[2026-12-03 10:04:19 TP0] max_total_num_tokens=7642378, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=8192, available_gpu_mem=19.75 GB
[2026-12-03 10:04:24] Engine startup timings (s): load_weight=0.64, kv_cache_allocation=0.04, scheduler_e2e=85.50, cuda_graph={prefill=72.90, decode=7.71, target_verify=0.00, …}, tokenizer_e2e=111.15
"""


def test_cold_boot_facts_from_0517_lines():
    facts = get_engine("sglang").boot_facts(COLD)
    assert facts == {
        "kv_cache_tokens": 7642378.0,
        "kv_cache_dtype": "torch.bfloat16",
        "kv_cache_gib": 116.62,
        "max_total_num_tokens": 7642378.0,
        "max_running_requests": 4096.0,
        "chunked_prefill_size": 8192.0,
        "context_len": 8192.0,
        "model_load_s": 0.64,
        "model_load_gib": 1.61,
        "graph_capture_prefill_s": 72.9,
        "graph_capture_decode_s": 7.71,
        # the startup line's every CUDA-graph phase, summed (the "…" is the README's cut)
        "graph_capture_s": 80.61,
        "kv_cache_alloc_s": 0.04,
        "engine_init_s": 85.5,
        "startup_s": 111.15,
    }


def test_older_lines_and_no_startup_summary():
    # Before 0.5.17: "#tokens" without a dtype; no startup-timings line, so the capture is
    # the slowest capture line (every TP rank logs its own).
    old = (
        "KV Cache is allocated. #tokens: 1234, K size: 1.00 GB, V size: 1.00 GB\n"
        "Capture cuda graph end. Time elapsed: 16.40 s. mem usage=0.5 GB\n"
        "Capture target decode CUDA graph end. elapsed=9.50 s, mem usage=0.09 GB\n"
    )
    facts = get_engine("sglang").boot_facts(old)
    assert facts["kv_cache_tokens"] == 1234 and "kv_cache_dtype" not in facts
    assert facts["graph_capture_s"] == 16.4 and facts["graph_capture_decode_s"] == 9.5
    assert get_engine("sglang").boot_facts("nothing known here") == {}


def test_ngram_boot_says_its_running_request_cap():
    # With --speculative-algorithm NGRAM 0.5.17 reset max_running_requests to 48.
    line = "max_total_num_tokens=7600000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=8192, available_gpu_mem=19.1 GB"
    assert get_engine("sglang").boot_facts(line)["max_running_requests"] == 48


def test_report_shows_each_boot_with_its_cache_state():
    engine = get_engine("sglang")
    cold = {**engine.boot_facts(COLD), "compile_cache": "cold"}
    warm = {"graph_capture_s": 9.1, "engine_init_s": 20.3, "compile_cache": "warm"}
    cells = [
        {"stack": "s", "model": "m", "variant": "baseline", "repeat": r, "status": "ok"}
        | {"boot_s": b, "boot_facts": f}
        for r, b, f in ((0, 144.2, cold), (1, 55.5, warm))
    ]
    (row,) = boot_costs(cells, ["baseline"])
    assert (
        row["per_boot"]
        == "r0 144.2 s (cache cold, init 85.5 s); r1 55.5 s (cache warm, init 20.3 s)"
    )
    assert row["kv_tokens"] == "7,642,378"


# Two /metrics pages around a level, with 0.5.17's names and labels (trimmed to them).
BEFORE = """\
sglang:prompt_tokens_total{is_streaming="true",model_name="/m"} 1000.0
sglang:generation_tokens_total{is_streaming="true",model_name="/m"} 4000.0
sglang:num_requests_total{is_streaming="true",model_name="/m"} 10.0
sglang:cached_tokens_total{cache_source="device",model_name="/m"} 100.0
sglang:spec_verify_calls_total{model_name="/m"} 1000.0
sglang:token_usage{model_name="/m"} 0.0
sglang:cache_hit_rate{model_name="/m"} 0.0
"""
AFTER = """\
sglang:prompt_tokens_total{is_streaming="true",model_name="/m"} 3048.0
sglang:generation_tokens_total{is_streaming="true",model_name="/m"} 6064.0
sglang:num_requests_total{is_streaming="true",model_name="/m"} 26.0
sglang:cached_tokens_total{cache_source="device",model_name="/m"} 1124.0
sglang:spec_verify_calls_total{model_name="/m"} 1608.0
sglang:token_usage{model_name="/m"} 0.0
sglang:cache_hit_rate{model_name="/m"} 0.0
"""


def test_level_figures_are_the_levels_own():
    counters = counter_delta(parse_prometheus(BEFORE), parse_prometheus(AFTER))
    figures = get_engine("sglang").level_figures(counters)
    # 1,024 of 2,048 prompt tokens from the cache; (2,064 - 16 first tokens) / 608 calls.
    assert figures == {"prefix_cache_hit_rate": 0.5, "spec_accept_length": 3.368}
    # The gauge after the level says 0 (idle): the counters are what tell.
    assert get_engine("sglang").headline(parse_prometheus(AFTER), {})["prefix_cache_hit_rate"] == 0
    # No prompts, no verify calls: nothing to say.
    assert get_engine("sglang").level_figures({}) == {}


def test_peak_gauges_are_sglangs_names():
    assert get_engine("sglang").peak_gauges == {
        "kv_cache_usage": "sglang:token_usage",
        "kv_used_tokens": "sglang:kv_used_tokens",
        "running_requests": "sglang:num_running_reqs",
        "waiting_requests": "sglang:num_queue_reqs",
    }


def test_vllm_level_figures_from_its_counters():
    counters = {
        'vllm:prefix_cache_queries_total{engine="0"}': 400.0,
        'vllm:prefix_cache_hits_total{engine="0"}': 100.0,
        'vllm:spec_decode_num_drafts_total{engine="0"}': 50.0,
        'vllm:spec_decode_num_draft_tokens_total{engine="0"}': 200.0,
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"}': 150.0,
    }
    assert get_engine("vllm").level_figures(counters) == {
        "prefix_cache_hit_rate": 0.25,
        "spec_accept_length": 4.0,
        "spec_accept_rate": 0.75,
    }


def test_a_first_levels_hits_count_though_the_series_was_not_there_before():
    # On the H200 the cached-tokens series first appeared during level 1 (no hit since the
    # boot): before the fix the level's 585 cached tokens were dropped and its rate read 0.
    before = parse_prometheus(
        'sglang:prompt_tokens_total{engine_type="unified",is_streaming="true"} 11.0\n'
    )
    after = parse_prometheus(
        'sglang:prompt_tokens_total{engine_type="unified",is_streaming="true"} 2207.0\n'
        'sglang:cached_tokens_total{cache_source="device",engine_type="unified"} 585.0\n'
    )
    figures = get_engine("sglang").level_figures(counter_delta(before, after))
    assert figures == {"prefix_cache_hit_rate": round(585 / 2196, 4)}
