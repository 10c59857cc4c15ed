"""`sglang`: SGLang's OpenAI-compatible server (`python -m sglang.launch_server`).

    variants:
      baseline:
        flags: {tp: 8, trust-remote-code: true, enable-metrics: true}
      mscclpp:
        extends: baseline
        flags: {enable-mscclpp: true}
        env: {SGLANG_MSCCLPP_MAX_BYTES: 4MB}

Checked against SGLang 0.5.9 (`sglang/srt/entrypoints/http_server.py`, `server_args.py`):
- `--model-path` (alias `--model`), `--host`, `--port` are set here; every other flag comes
  from the variant, in order. `--tp 8` works because argparse accepts the unique prefix
  of `--tp-size`.
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
"""

from __future__ import annotations

from servesweep.server.engines.base import Engine
from servesweep.server.engines.prometheus import metric_mean, metric_sum


class SGLangEngine(Engine):
    name = "sglang"
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"  # answers 404 without --enable-metrics (recorded as such)
    server_info_paths = ("/server_info", "/get_server_info")
    # Set by servesweep from the model, the server section and the port it picks.
    reserved_flags = ("model-path", "model", "host", "port")
    # SGLang 0.5.x log lines; the capture line was renamed in later nightlies ("Capture
    # target decode CUDA graph end. elapsed=16.40 s"), so both spellings are read. Every
    # TP rank logs its own: the slowest capture, the first rank's pool.
    boot_log_facts = (
        (
            "graph_capture_s",
            r"Capture [\w ]*?graph end\. (?:Time elapsed: |elapsed=)([\d.]+)",
            "max",
        ),
        ("kv_cache_tokens", r"KV Cache is allocated\. #tokens: (\d+)", "first"),
    )

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        return self.module_command(
            python, "sglang.launch_server", "--model-path", model_path, host, port, flags
        )

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
            "gen_throughput": metric_sum(metrics, "sglang:gen_throughput"),
            "version": server_info.get("version") or None,
        }
        return {k: v for k, v in out.items() if v is not None}
