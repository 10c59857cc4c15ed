"""Peaks of a server's gauges while a level runs: its /metrics page read on a thread.

The snapshots around a level (`Engine.snapshot`) see gauges such as the KV-cache usage
only when the level has not started or has drained, where they read 0; what a level
reached is only seen while it runs. The engine names the gauges (`Engine.peak_gauges`:
our name -> its Prometheus metric); every label set of a metric counts (the largest wins).
"""

from __future__ import annotations

import threading
import time
from typing import Literal

from servesweep.server.engines.prometheus import metric_values, parse_prometheus
from servesweep.server.http import http_request


class GaugeSampler:
    """Read `url` (a Prometheus page) every `interval_s` on a thread between enter and exit;
    `result()` holds each gauge's largest value, the samples taken and what went wrong.
    Never raises for what the server does: a missing sample is a missing measurement."""

    def __init__(
        self, url: str, gauges: dict[str, str], interval_s: float = 0.5, timeout_s: float = 2.0
    ):
        self.url = url
        self.gauges = dict(gauges)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.peaks: dict[str, float] = {}
        self.samples = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GaugeSampler:
        if self.gauges:
            self._thread = threading.Thread(target=self._run, name="gauge-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
        return False  # never swallow the level's own exception

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            self.sample()
            if self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started))):
                return

    def sample(self) -> None:
        """One read of the page; each gauge's value kept if it is the largest yet."""
        status, body = http_request("GET", self.url, self.timeout_s)
        if status != 200:
            self._note(f"GET {self.url}: " + (f"HTTP {status}" if status else "no answer"))
            return
        metrics = parse_prometheus(body.decode("utf-8", "replace"))
        self.samples += 1
        for name, metric in self.gauges.items():
            values = [v for v in metric_values(metrics, metric) if v == v]  # NaN is no value
            if values:
                self.peaks[name] = max(self.peaks.get(name, values[0]), *values)

    def _note(self, text: str) -> None:
        if text not in self.errors and len(self.errors) < 5:
            self.errors.append(text)

    def result(self) -> dict:
        """{"peaks": {name: largest value}, "samples": n, "interval_s": s, "errors": [...]}
        (errors only when there were any)."""
        out: dict = {"peaks": dict(self.peaks), "samples": self.samples}
        out["interval_s"] = self.interval_s
        if self.errors:
            out["errors"] = list(self.errors)
        return out
