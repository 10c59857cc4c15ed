"""The engine adapter interface."""

from __future__ import annotations

import json


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
    models_path = "/v1/models"
    metrics_path: str | None = None  # Prometheus endpoint, where the engine has one

    def __init__(self, options: dict | None = None):
        # Per-variant engine options (e.g. the `command` engine's template).
        self.options = dict(options or {})
        if self.options.get("health_path"):
            self.health_path = self.options["health_path"]
        if "models_path" in self.options:
            self.models_path = self.options["models_path"]

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        raise NotImplementedError

    def env(self, variant_env: dict) -> dict[str, str]:
        """Environment variables added to the server's environment."""
        return dict(variant_env)

    def served_model_name(self, model_path: str) -> str | None:
        """The `model` value requests must carry (None: omit it)."""
        return model_path

    def request_extras(self) -> dict:
        """Extra fields for every benchmark request body (e.g. ignore_eos)."""
        return {}

    def flush_cache(self, base_url: str, timeout_s: float = 10.0) -> bool | None:
        """Drop the engine's prefix cache before a level; None when it has none."""
        return None

    def snapshot(self, base_url: str, timeout_s: float = 10.0) -> dict:
        """Server-side state captured before and after each level into the level's
        records: `{"metrics": {...}, "server_info": {...}}` (empty where the engine
        exposes nothing). Never raises: a server that does not answer gives {}."""
        return {}
