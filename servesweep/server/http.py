"""The one small HTTP helper for control endpoints (health, model list, metrics, cache flush).

Benchmark traffic does not go through here: it has its own client (`servesweep.bench`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def http_request(
    method: str, url: str, timeout_s: float = 10.0, body: dict | None = None
) -> tuple[int, bytes]:
    """One HTTP request returning (status, body); status 0 when nothing answered. Never
    raises for what the server does, so a dying server cannot break what is around it."""
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


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    return http_request("GET", url, timeout_s)
