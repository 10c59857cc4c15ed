"""`transformers serve`: the embedded CPU default (a real OpenAI-compatible server)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from servesweep.server.engines.base import Engine, check_reserved, flags_to_args
from servesweep.server.engines.caches import inductor_cache, triton_cache, xdg_cache


class TransformersEngine(Engine):
    name = "transformers"
    probed_packages = {"transformers": ("transformers",)}
    # No /metrics and no prefix cache to flush (measured with transformers 5.24).
    metrics_path = None
    # /v1/models lists a local-path model in 5.24 but answers 500 in 5.17 (it only scans
    # the hub cache; seen on the H200 image). Readiness does not need it: the real
    # generation it runs names the model, and a server pinned to another model refuses.
    models_path = None

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        # The console script beside the stack's interpreter, so the stack's own
        # transformers runs (never the workflow's).
        check_reserved(self.name, flags, ("host", "port"))
        cli = str(Path(python).parent / "transformers")
        return [
            cli,
            "serve",
            model_path,
            "--host",
            host,
            "--port",
            str(port),
            *flags_to_args(flags),
        ]

    def request_extras(self) -> dict:
        # It rejects unknown fields such as ignore_eos with HTTP 422; fixed output
        # lengths come from the synthetic model's generation config instead.
        return {}

    def logprobs_fields(self, endpoint: str, top_k: int) -> dict:
        # 5.24 accepts `logprobs` / `top_logprobs` but ignores them (a warning in its log,
        # no logprobs in the answer), so asking only adds noise.
        return {}

    # token_ids_fields stays {}: 5.24 answers `return_token_ids` with HTTP 422.

    def cache_dirs(self, env: Mapping[str, str]) -> dict[str, Path]:
        # transformers compiles only when asked (torch.compile: Inductor's cache, and
        # Triton's on a GPU); its hub kernels (`kernels`) are fetched into the hub cache.
        # On the CPU default all three stay empty: every boot is "cold", and the report's
        # first-boot contrast says whether that matters (it compiles nothing on first use).
        hub = (
            env.get("HF_HUB_CACHE")
            or Path(env.get("HF_HOME") or xdg_cache(env) / "huggingface") / "hub"
        )
        return {
            "torch-inductor": inductor_cache(env),
            "triton": triton_cache(env),
            "hf-kernels": Path(env.get("HF_KERNELS_CACHE") or Path(hub).parent / "kernels"),
        }
