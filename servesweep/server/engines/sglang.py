"""`sglang`: SGLang's OpenAI-compatible server (`python -m sglang.launch_server`).

    variants:
      baseline:
        flags: {tp: 8, trust-remote-code: true, enable-metrics: true}
      mscclpp:
        extends: baseline
        flags: {enable-mscclpp: true}
        env: {SGLANG_MSCCLPP_MAX_BYTES: 4MB}

Checked against SGLang 0.5.9 (`sglang/srt/entrypoints/http_server.py`, `server_args.py`)
and run on an H200 with 0.5.17 (docs/sglang-h200.md):
- `--model-path` (alias `--model`), `--host`, `--port` are set here; every other flag comes
  from the variant, in order. `--tp 8` works because argparse accepts the unique prefix
  of `--tp-size`. A flag it does not know: exit 2 after `sglang serve: error: ...`, once
  its imports are done (cause `rejected_args`).
- `/health` and `/health_generate` both run a one-token generation when the server is
  idle, so readiness already proves the model generates.
- `/flush_cache` (GET or POST) empties the radix cache; it answers 400 while requests
  are still running, so it is retried briefly.
- `/server_info` (0.5.9 and later; `/get_server_info` is the older, deprecated name)
  returns the resolved server args and per-DP internal state such as
  `avg_spec_accept_length`.
- `/metrics` exists only with `--enable-metrics`. The adapter does not add it on its own,
  so a variant's command is exactly what its flags say; the examples set it in
  `baseline`, so every variant carries it and the comparison stays fair.
- Teardown: SIGTERM to the group; the scheduler exits at once, the main process logs
  `Triggering SIGQUIT`, sleeps 5 s and ends itself (0.5.17: 5.6-6.2 s in all).
- Compile caches that outlive a boot: tvm-ffi's (~/.cache/tvm-ffi), FlashInfer's
  (~/.cache/flashinfer), Triton's (~/.triton/cache) and torch.compile's
  (/tmp/torchinductor_<user>); each boot records what they held before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from servesweep.server.engines.base import Engine
from servesweep.server.engines.caches import flashinfer_cache, home, inductor_cache, triton_cache
from servesweep.server.engines.prometheus import counter_total, metric_mean, metric_sum

# Sums of a counter over its label sets, from a level's `server_counters`.
CACHED = "sglang:cached_tokens_total"
PROMPT = "sglang:prompt_tokens_total"
GENERATED = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
VERIFY = "sglang:spec_verify_calls_total"


class SGLangEngine(Engine):
    name = "sglang"
    compiles_on_first_use = True  # JIT kernels, cached on disk for later boots
    probed_packages = {
        "sglang": ("sglang",),
        "sgl_kernel": ("sgl-kernel", "sglang-kernel"),
        "flashinfer": ("flashinfer-python", "flashinfer"),
        "triton": ("triton",),
    }
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"  # answers 404 without --enable-metrics (recorded as such)
    server_info_paths = ("/server_info", "/get_server_info")
    # Set by servesweep from the model, the server section and the port it picks.
    reserved_flags = ("model-path", "model", "host", "port")
    # Read while a level runs (servesweep.server.engines.gauges); the snapshots around it see 0.
    peak_gauges = {
        # A fraction of the KV pool, rounded to 0.01 by SGLang (0.5.17); the tokens exactly.
        "kv_cache_usage": "sglang:token_usage",
        "kv_used_tokens": "sglang:kv_used_tokens",
        "running_requests": "sglang:num_running_reqs",
        "waiting_requests": "sglang:num_queue_reqs",
    }
    # SGLang 0.5.x log lines (tests/unit/server/engines/test_sglang.py holds 0.5.17's). Every
    # TP rank logs its own: the slowest capture, the first rank's pool.
    boot_log_facts = (
        # 0.5.17: "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 7642378, K size:
        # 58.31 GB, V size: 58.31 GB"; before: "KV Cache is allocated. #tokens: N".
        ("kv_cache_tokens", r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (\d+)", "first"),
        ("max_total_num_tokens", r"max_total_num_tokens=(\d+)", "first"),
        ("max_running_requests", r"max_total_num_tokens=.*?max_running_requests=(\d+)", "first"),
        ("chunked_prefill_size", r"max_total_num_tokens=.*?chunked_prefill_size=(-?\d+)", "first"),
        ("context_len", r"max_total_num_tokens=.*?context_len=(\d+)", "first"),
        ("model_load_s", r"Load weight end\. elapsed=([\d.]+) s", "max"),
        ("model_load_gib", r"Load weight end\..*?mem usage=([\d.]+) GB", "max"),
        (
            "graph_capture_prefill_s",
            r"Capture target prefill CUDA graph end\. elapsed=([\d.]+) s",
            "max",
        ),
        (
            "graph_capture_decode_s",
            r"Capture (?:target )?decode CUDA graph end\. elapsed=([\d.]+) s",
            "max",
        ),
    )
    # 0.5.17's summary line: "Engine startup timings (s): load_weight=0.64,
    # kv_cache_allocation=0.04, scheduler_e2e=85.50, cuda_graph={prefill=72.90,
    # decode=7.71, ...}, tokenizer_e2e=111.15" (our names for its fields).
    STARTUP = {
        "kv_cache_allocation": "kv_cache_alloc_s",
        "scheduler_e2e": "engine_init_s",
        "tokenizer_e2e": "startup_s",
    }

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        return self.module_command(
            python, "sglang.launch_server", "--model-path", model_path, host, port, flags
        )

    def boot_facts(self, log_text: str) -> dict:
        """The numbers above; `kv_cache_dtype`; from the startup-timings line
        `kv_cache_alloc_s`, `engine_init_s` (the scheduler's start to ready), `startup_s`
        and `graph_capture_s` (every CUDA-graph phase it lists, summed); without that line
        (before 0.5.17), `graph_capture_s` is the slowest capture line."""
        out = super().boot_facts(log_text)
        dtype = re.search(r"KV Cache is allocated\. dtype: (\S+),", log_text)
        if dtype:
            out["kv_cache_dtype"] = dtype.group(1)
        kv = re.search(
            r"KV Cache is allocated\..*?K size: ([\d.]+) GB, V size: ([\d.]+) GB", log_text
        )
        if kv:
            out["kv_cache_gib"] = round(float(kv.group(1)) + float(kv.group(2)), 2)
        timings = re.search(r"Engine startup timings \(s\): (.*)", log_text)
        if timings:
            line = timings.group(1)
            for theirs, ours in self.STARTUP.items():
                m = re.search(rf"\b{theirs}=([\d.]+)", line)
                if m:
                    out[ours] = float(m.group(1))
            graphs = re.search(r"cuda_graph=\{([^}]*)\}", line)
            if graphs:
                phases = re.findall(r"(\w+)=([\d.]+)", graphs.group(1))
                out["graph_capture_s"] = round(sum(float(v) for _, v in phases), 2)
        if "graph_capture_s" not in out:
            found = re.findall(
                r"Capture [\w ]*?graph end\. (?:Time elapsed: |elapsed=)([\d.]+)", log_text
            )
            if found:
                out["graph_capture_s"] = max(float(v) for v in found)
        return out

    def cache_dirs(self, env: Mapping[str, str]) -> dict[str, Path]:
        tvm = env.get("TVM_FFI_CACHE_DIR") or home(env) / ".cache" / "tvm-ffi"
        return {
            "tvm-ffi": Path(tvm),
            "flashinfer": flashinfer_cache(env),
            "triton": triton_cache(env),
            "torch-inductor": inductor_cache(env),
        }

    def cache_state(self, env: Mapping[str, str]) -> dict:
        """As every engine's, and `compile_cache` (the report's word for a boot): the same
        cold / warm / partial, since SGLang's log does not say whether it compiled."""
        state = super().cache_state(env)
        if state:
            state["compile_cache"] = state["caches"]
        return state

    def level_figures(self, counters: dict[str, float]) -> dict:
        """The prefix-cache hit rate (cached over prompt tokens) and the mean accept length
        (tokens generated after each request's first, per verify call), from the level's
        counters."""
        total = lambda name: counter_total(counters, name)  # noqa: E731
        out = {}
        prompt = total(PROMPT)
        if prompt > 0:
            out["prefix_cache_hit_rate"] = round(total(CACHED) / prompt, 4)
        verify = total(VERIFY)
        if verify > 0:
            out["spec_accept_length"] = round((total(GENERATED) - total(REQUESTS)) / verify, 3)
        return out

    def served_model_name(self, model_path: str) -> str | None:
        # /v1/models lists --served-model-name, which defaults to the model path; a
        # variant that sets that flag names it again as `model_name`.
        return self.options.get("model_name") or model_path

    def token_ids_fields(self) -> dict:
        # The answer's choices[0].token_ids (vLLM 0.10.2+, recent SGLang); older versions
        # ignore the unknown field, and the correctness pass re-encodes the text.
        return {"return_token_ids": True}

    def request_extras(self) -> dict:
        # Fixed-length outputs: every request generates exactly max_tokens.
        return {"ignore_eos": True}

    def flush_cache(self, base_url: str, timeout_s: float = 10.0) -> bool | None:
        return self._post_until_ok(base_url + "/flush_cache", timeout_s)

    def headline(self, metrics: dict[str, float], server_info: dict) -> dict:
        states = server_info.get("internal_states") or []
        accept = [
            s["avg_spec_accept_length"]
            for s in states
            if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), int | float)
        ]
        out = {
            "running_requests": metric_sum(metrics, "sglang:num_running_reqs"),
            "waiting_requests": metric_sum(metrics, "sglang:num_queue_reqs"),
            "kv_cache_usage": metric_mean(metrics, "sglang:token_usage"),
            "prefix_cache_hit_rate": metric_mean(metrics, "sglang:cache_hit_rate"),
            # The gauge where metrics are on; else the scheduler's own average.
            "spec_accept_length": metric_mean(metrics, "sglang:spec_accept_length")
            or (sum(accept) / len(accept) if accept else None),
            "spec_accept_rate": metric_mean(metrics, "sglang:spec_accept_rate") or None,
            "gen_throughput": metric_sum(metrics, "sglang:gen_throughput"),
            "version": server_info.get("version") or None,
        }
        return {k: v for k, v in out.items() if v is not None}
