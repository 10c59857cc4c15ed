"""The engine adapter interface, and the HTTP and Prometheus helpers engines share."""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.request


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


def http_request(
    method: str, url: str, timeout_s: float = 10.0, body: dict | None = None
) -> tuple[int, bytes]:
    """One HTTP request returning (status, body); status 0 when nothing answered.
    Never raises, so a dying server cannot break the measurement around it."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (urllib.error.URLError, OSError, TimeoutError, ValueError):
        return 0, b""


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text exposition to {sample: value}.

    A sample's key is its name, plus its labels sorted by name as `{a="x",b="y"}` when it
    has any, so keys are stable across scrapes. Comments and unparsable lines are skipped.
    """
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        if labels:
            pairs = sorted(_LABEL.findall(labels))
            if pairs:
                name += "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"
        out[name] = number
    return out


def metric_values(metrics: dict[str, float], name: str) -> list[float]:
    """Values of every label set of one metric (`name` or `name{...}`)."""
    return [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]


def metric_sum(metrics: dict[str, float], name: str) -> float | None:
    values = [v for v in metric_values(metrics, name) if not math.isnan(v)]
    return sum(values) if values else None


def metric_mean(metrics: dict[str, float], name: str) -> float | None:
    values = [v for v in metric_values(metrics, name) if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for counters and histogram/summary sums and counts: what one level
    added. Gauges (queue length, cache usage) are point values and are left out."""
    return {
        key: after[key] - before[key]
        for key in after
        if key in before and key.split("{", 1)[0].endswith(("_total", "_sum", "_count"))
    }


class Engine:
    """What servesweep needs to know about one inference server."""

    name = ""
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path: str | None = None  # Prometheus endpoint, where the engine has one
    # JSON endpoints describing the running server, tried in order (the first that
    # answers 200 with JSON wins: engines rename them between versions).
    server_info_paths: tuple[str, ...] = ()

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
        records: `{"metrics": {...}, "server_info": {...}, "summary": {...}}`, each key
        present only where the engine answered. `metrics` is the parsed Prometheus page
        without histogram buckets; `summary` holds the few numbers a reader looks for
        (running requests, cache hit rate, speculative accept length). Never raises: a
        server that does not answer gives {}."""
        out: dict = {}
        try:
            if self.metrics_path:
                status, body = http_request("GET", base_url + self.metrics_path, timeout_s)
                if status == 200:
                    parsed = parse_prometheus(body.decode("utf-8", "replace"))
                    # Buckets are most of the page and say little per level; NaN
                    # and infinities are not JSON.
                    out["metrics"] = {
                        k: v
                        for k, v in parsed.items()
                        if math.isfinite(v) and not k.split("{", 1)[0].endswith("_bucket")
                    }
            for path in self.server_info_paths:
                status, body = http_request("GET", base_url + path, timeout_s)
                if status != 200:
                    continue
                try:
                    out["server_info"] = json.loads(body)
                    break
                except ValueError:
                    continue
            summary = self.summarize(out.get("metrics", {}), out.get("server_info") or {})
            if summary:
                out["summary"] = summary
        except Exception:  # a snapshot is evidence, never a reason to fail a level
            pass
        return out

    def summarize(self, metrics: dict[str, float], server_info: dict) -> dict:
        """Headline numbers from a snapshot (engine-specific; {} by default)."""
        return {}

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
