"""`command`: any server started from a user's command template (llama.cpp, TGI, a
private fork, the test suite's fault servers).

    variants:
      baseline:
        engine: command
        command: "{python} -m my_server --model {model} --host {host} --port {port}"
        health_path: /health        # default /health
        models_path: /v1/models     # null: skip the model-listed check
        model_name: my-model        # `model` sent in requests; omitted when unset
        metrics_path: /metrics      # a Prometheus page: snapshots and counters per level
        peak_gauges:                # gauges on it whose peak during a level is recorded
          kv_cache_usage: my_server:kv_cache_usage

Placeholders: {python} (the stack's interpreter), {bin} (its directory), {model},
{host}, {port}, {gpus}. Variant flags are appended after the template.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from servesweep.server.engines.base import Engine, flags_to_args

PLACEHOLDER = re.compile(r"\{(python|bin|model|host|port|gpus)\}")


def fill(template: str, values: dict[str, str]) -> list[str]:
    """Split the template like a shell would, then fill the known placeholders only
    (so JSON braces in arguments are left alone)."""
    return [PLACEHOLDER.sub(lambda m: values[m.group(1)], token) for token in shlex.split(template)]


class CommandEngine(Engine):
    name = "command"

    def command(
        self, python: str, model_path: str, host: str, port, flags: dict, gpus: int = 0
    ) -> list[str]:
        template = self.options.get("command")
        if not template:
            raise ValueError("engine 'command' needs the variant's `command` template")
        values = {
            "python": python,
            "bin": str(Path(python).parent),
            "model": model_path,
            "host": host,
            "port": str(port),
            "gpus": str(gpus),
        }
        return [*fill(template, values), *flags_to_args(flags)]

    def served_model_name(self, model_path: str) -> str | None:
        return self.options.get("model_name")
