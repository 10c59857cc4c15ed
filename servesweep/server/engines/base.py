"""The engine adapter interface, and the command-line helpers engines share."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path

from servesweep.server.engines.caches import cache_state, note_growth
from servesweep.server.engines.prometheus import parse_prometheus
from servesweep.server.http import http_request


def flags_to_args(flags: dict) -> list[str]:
    """Variant flags to argv, in the order given.

    true -> bare `--flag`; false or null -> omitted; a list -> `--flag a b`;
    a mapping -> `--flag '<json>'`; anything else -> `--flag value`.
    """
    args: list[str] = []
    for name, value in flags.items():
        flag = name if name.startswith("-") else f"--{name}"
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            args += [flag, *(_scalar(v) for v in value)]
        elif isinstance(value, dict):
            args += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            args += [flag, _scalar(value)]
    return args


def check_reserved(engine: str, flags: dict, reserved: tuple[str, ...]) -> None:
    """Refuse variant flags that servesweep sets itself (model, host, port): a second
    `--port` would silently win over the port the cell checked and talks to."""
    for name in flags:
        bare = name.lstrip("-")
        if bare in reserved:
            raise ValueError(
                f"engine {engine!r}: flag --{bare} is set by servesweep (from the model, "
                "server.host and server.port); remove it from the variant"
            )


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


class Engine:
    """What servesweep needs to know about one inference server."""

    name = ""
    health_path = "/health"
    models_path: str | None = "/v1/models"
    metrics_path: str | None = None  # Prometheus endpoint, where the engine has one
    # JSON endpoints describing the running server, tried in order (the first that
    # answers 200 with JSON wins: engines rename them between versions).
    server_info_paths: tuple[str, ...] = ()
    # Gauges on the metrics page whose peak during a level is recorded (our name ->
    # the engine's metric; servesweep.server.engines.gauges): none by default.
    peak_gauges: dict[str, str] = {}
    # Whether a server's first boot on a host compiles kernels or graphs that later boots
    # find cached (vLLM's torch.compile and CUDA graphs, SGLang's JIT kernels): a hunt with
    # first_boot auto then leaves every variant's r0 out from the start.
    compiles_on_first_use = False
    # The stack manifest's facts this engine's software gives: key -> the distributions
    # whose version it is, tried in order (a package renamed between releases). Every
    # stack is probed for every engine's keys (servesweep.server.engines.probed_packages),
    # so the manifest's keys, and with them its identity, do not depend on the engine.
    probed_packages: dict[str, tuple[str, ...]] = {}

    def __init__(self, options: dict | None = None):
        # Per-variant engine options (e.g. the `command` engine's template).
        self.options = dict(options or {})
        if self.options.get("health_path"):
            self.health_path = self.options["health_path"]
        if "models_path" in self.options:
            self.models_path = self.options["models_path"]
        if self.options.get("metrics_path"):
            self.metrics_path = self.options["metrics_path"]
        if self.options.get("peak_gauges"):
            self.peak_gauges = dict(self.options["peak_gauges"])

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        raise NotImplementedError

    def module_command(
        self, python: str, module: str, model_flag: str, model_path: str, host: str, port, flags
    ) -> list[str]:
        """`python -m MODULE <model_flag> M --host H --port P <flags>`, refusing variant
        flags that servesweep sets itself (the model flag, host, port): a second `--port`
        would silently win over the port the cell checked and talks to."""
        check_reserved(self.name, flags, self.reserved_flags)
        return [
            python,
            "-m",
            module,
            model_flag,
            model_path,
            "--host",
            host,
            "--port",
            str(port),
            *flags_to_args(flags),
        ]

    reserved_flags: tuple[str, ...] = ("host", "port")

    def env(self, variant_env: dict) -> dict[str, str]:
        """Environment variables added to the server's environment."""
        return dict(variant_env)

    def served_model_name(self, model_path: str) -> str | None:
        """The `model` value requests must carry (None: omit it)."""
        return model_path

    def request_extras(self) -> dict:
        """Extra fields for every benchmark request body (e.g. ignore_eos)."""
        return {}

    def logprobs_fields(self, endpoint: str, top_k: int) -> dict:
        """Request fields that ask for the chosen tokens' logprobs and `top_k` alternatives
        (the correctness pass), in OpenAI's two spellings; {} where the engine has none."""
        if endpoint == "chat":
            return {"logprobs": True, "top_logprobs": top_k}
        return {"logprobs": top_k}

    def token_ids_fields(self) -> dict:
        """Request fields that ask for the generated token ids ({}: the engine has none, and
        the correctness pass re-encodes the text)."""
        return {}

    def flush_cache(self, base_url: str, timeout_s: float = 10.0) -> bool | None:
        """Drop the engine's prefix cache before a level; None when it has none."""
        return None

    def snapshot(self, base_url: str, timeout_s: float = 10.0) -> dict:
        """Server-side state captured before and after each level into the level's records:
        `{"metrics": {...}, "server_info": {...}, "headline": {...}, "errors": [...]}`, each
        key present only where there is something to say. `metrics` is the parsed
        Prometheus page without histogram buckets; `headline` the few numbers a reader
        looks for, in one vocabulary for every engine (HEADLINE_KEYS); `errors` what did
        not answer or could not be read (`where: type: message`). Never raises: a snapshot
        is evidence, never a reason to fail a level."""
        out: dict = {}
        errors: list[str] = []
        try:
            if self.metrics_path:
                status, body = http_request("GET", base_url + self.metrics_path, timeout_s)
                if status == 200:
                    parsed = parse_prometheus(body.decode("utf-8", "replace"))
                    # Buckets are most of the page and say little per level; NaN and
                    # infinities are not JSON.
                    out["metrics"] = {
                        k: v
                        for k, v in parsed.items()
                        if math.isfinite(v) and not k.split("{", 1)[0].endswith("_bucket")
                    }
                else:
                    errors.append(f"GET {self.metrics_path}: {_status_text(status)}")
            tried = []
            for path in self.server_info_paths:
                status, body = http_request("GET", base_url + path, timeout_s)
                if status == 200:
                    try:
                        out["server_info"] = json.loads(body)
                        break
                    except ValueError as exc:
                        tried.append(f"{path}: ValueError: {exc}"[:200])
                        continue
                tried.append(f"{path}: {_status_text(status)}")
            else:
                if tried:
                    errors.append("no server info (" + "; ".join(tried) + ")")
            headline = self.headline(out.get("metrics", {}), out.get("server_info") or {})
            if headline:
                out["headline"] = headline
        except Exception as exc:  # recorded, never raised
            errors.append(f"snapshot: {type(exc).__name__}: {exc}"[:300])
        if errors:
            out["errors"] = errors
        return out

    # (fact, regex with one number group, how several matches combine) read from the
    # server's log after boot; engine-specific.
    boot_log_facts: tuple[tuple[str, str, str], ...] = ()

    def boot_facts(self, log_text: str) -> dict:
        """What the boot cost and left, where the engine's log says so: `graph_capture_s`
        (CUDA-graph capture), `kv_cache_tokens` (KV-cache capacity). {} when it says nothing
        we know how to read."""
        out = {}
        for fact, pattern, combine in self.boot_log_facts:
            found = [float(m.replace(",", "")) for m in re.findall(pattern, log_text)]
            if found:
                out[fact] = max(found) if combine == "max" else found[0]
        return out

    def headline(self, metrics: dict[str, float], server_info: dict) -> dict:
        """The numbers a reader looks for in a snapshot, named by HEADLINE_KEYS ({} by
        default)."""
        return {}

    def level_figures(self, counters: dict[str, float]) -> dict:
        """The level's own rates from its counters' growth (`server_counters`), named by
        HEADLINE_KEYS: `prefix_cache_hit_rate`, `spec_accept_length`, `spec_accept_rate`
        where the engine counts what they need; {} by default. servesweep.run.boot puts
        them into the headline of the snapshot after the level, in place of the gauges'
        point values (a gauge read at idle says 0, a cumulative rate mixes earlier levels)."""
        return {}

    def cache_dirs(self, env: Mapping[str, str]) -> dict[str, Path]:
        """The compile caches that outlive a boot (name -> directory), as the server with
        environment `env` would find them (servesweep.server.engines.caches); none by
        default."""
        return {}

    def cache_state(self, env: Mapping[str, str]) -> dict:
        """Boot facts read before a launch: `caches` (cold / warm / partial) and
        `cache_dirs` (what each held); {} for an engine without cache directories."""
        return cache_state(self.cache_dirs(env))

    def note_cache_growth(self, facts: dict, env: Mapping[str, str]) -> None:
        """After a boot: what each cache directory of `facts` holds now."""
        note_growth(facts, self.cache_dirs(env))

    def _post_until_ok(self, url: str, timeout_s: float, retry_on=(400,)) -> bool:
        """POST until 200; statuses in `retry_on` mean "busy, try again shortly"."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = max(0.5, deadline - time.monotonic())
            status, _ = http_request("POST", url, min(remaining, 10.0))
            if status == 200:
                return True
            if status not in retry_on or time.monotonic() >= deadline:
                return False
            time.sleep(0.25)


# One vocabulary for what every engine's snapshot headline may hold.
HEADLINE_KEYS = {
    "running_requests": "requests being decoded",
    "waiting_requests": "requests queued in the server",
    "kv_cache_usage": "share of the KV cache in use (0-1)",
    "prefix_cache_hit_rate": "share of prompt tokens served from the prefix cache (0-1)",
    "spec_accept_length": "mean tokens accepted per speculative step, the verified one included",
    "spec_accept_rate": "share of proposed draft tokens accepted (0-1)",
    "gen_throughput": "the server's own generation throughput estimate (tok/s)",
    "version": "the engine's version",
}


def _status_text(status: int) -> str:
    return f"HTTP {status}" if status else "no answer"
