"""The open loop's arithmetic (docs/load_modes.md): when a rate level's requests are due, and
how well the client kept to it.

A rate level's arrivals are a seeded schedule: gaps drawn from a gamma distribution of mean
1 / rate and shape `burstiness` (1: exponential, i.e. Poisson arrivals; under 1 burstier,
over 1 steadier), as `vllm bench serve --request-rate --burstiness`. The settings
(`Arrival`) are resolved with the sweep (servesweep.sweep.benchmark.Arrival.of)."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from servesweep.level import INF

LATE_FLOOR_S = 0.005  # a send later than max(this, LATE_GAP_SHARE x mean gap) is late
LATE_GAP_SHARE = 0.25
RATE_SHORT_RATIO = 0.95  # achieved / scheduled rate under this: the level fell short
LATE_SHARE_LIMIT = 0.05  # … or more than this share of its requests were late


class Arrival(Protocol):
    """What the schedule needs of the arrival settings (servesweep.sweep.benchmark.Arrival)."""

    @property
    def burstiness(self) -> float: ...  # the gamma shape; 1 for poisson

    @property
    def seed(self) -> int: ...


def schedule(n: int, rate: float, how: Arrival, salt: int = 0) -> np.ndarray:
    """When each of n requests is due, seconds after the first (which is due at 0), at
    exactly `rate` over the whole schedule. Seeded: the same (n, rate, arrival, salt)
    always give the same schedule."""
    if n <= 0:
        return np.zeros(0)
    if rate == INF:
        return np.zeros(n)
    rng = np.random.default_rng([how.seed, salt])
    shape = how.burstiness
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n - 1)
    # Scaled so the schedule's own rate, (n - 1) / span, is the target exactly: a short
    # level's sample would otherwise run at another rate than it is named by (91 Poisson
    # arrivals at 45.3/s drew a span of 60.4/s in the example sweep). The gaps keep their
    # shape: the spread, the bursts and their order are the drawn ones.
    gaps *= (n - 1) / rate / gaps.sum()
    return np.concatenate([[0.0], np.cumsum(gaps)])


def late_threshold_s(rate: float) -> float:
    """A send this much after its scheduled time is late; an `inf` level is never late."""
    if rate == INF:
        return INF
    return max(LATE_FLOOR_S, LATE_GAP_SHARE / rate)


class RateFigures(NamedTuple):
    target_rate: float | None  # configured req/s (None for inf)
    scheduled_rate: float | None  # of the drawn schedule: (n - 1) / its span
    achieved_rate: float | None  # of the actual sends: (n - 1) / their span
    achieved_ratio: float | None  # achieved / scheduled
    send_lag_p50_ms: float | None  # sent - scheduled, over measured requests
    send_lag_p99_ms: float | None
    send_lag_max_ms: float | None
    late_requests: int  # later than late_threshold_s, not held by the cap
    held_requests: int  # found the concurrency cap full when due
    rate_short: bool  # the client did not deliver the schedule (not the cap's doing)


def rate_figures(measured: list[dict], rate: float) -> RateFigures:
    """Target, scheduled and achieved rate, and send lag, of a rate level's measured
    requests (each with `sent_s`, `scheduled_s` and `held`)."""
    sent = np.array([r["sent_s"] for r in measured], dtype=float)
    due = np.array([r["scheduled_s"] for r in measured], dtype=float)
    held = np.array([bool(r.get("held")) for r in measured])
    target = None if rate == INF else float(rate)
    if len(sent) < 2:
        return RateFigures(target, None, None, None, None, None, None, 0, int(held.sum()), False)
    span_due, span_sent = due.max() - due.min(), sent.max() - sent.min()
    scheduled = (len(due) - 1) / span_due if span_due > 0 else None
    achieved = (len(sent) - 1) / span_sent if span_sent > 0 else None
    ratio = achieved / scheduled if scheduled and achieved else None
    lag = (sent - due) * 1e3
    free = lag[~held]
    late = int((free > late_threshold_s(rate) * 1e3).sum())
    p50, p99 = np.percentile(free, [50, 99]) if free.size else (None, None)
    short = rate != INF and (
        (ratio is not None and ratio < RATE_SHORT_RATIO and not held.any())
        or late > LATE_SHARE_LIMIT * len(sent)
    )
    return RateFigures(
        target,
        _r(scheduled),
        _r(achieved),
        _r(ratio),
        _r(p50),
        _r(p99),
        _r(free.max() if free.size else None),
        late,
        int(held.sum()),
        bool(short),
    )


def _r(x, digits: int = 4):
    return None if x is None else round(float(x), digits)
