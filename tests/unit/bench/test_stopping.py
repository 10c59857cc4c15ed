"""The `auto` stop rule's batches as the coordinator sees them: worker statuses every 0.1 s."""

import types

import numpy as np

from servesweep.bench import stopping
from servesweep.bench.messages import Status
from servesweep.bench.stopping import PrecisionStop
from servesweep.sizing import Precision

EVENTS = 131  # SSE events of one 128-token request


def run_level(monkeypatch, durations_s, tick_s=0.1, offset_s=0.037):
    """One stream sending back to back from t = 0 (requests of `durations_s`); the
    coordinator observes the worker's status every `tick_s`. Returns the stopper."""
    ends = np.cumsum(durations_s)
    clock = types.SimpleNamespace(now=0.0)
    fake = types.SimpleNamespace(
        monotonic=lambda: clock.now, perf_counter_ns=lambda: int(round(clock.now * 1e9))
    )
    monkeypatch.setattr(stopping, "time", fake)
    rule = Precision(rse_pct=1e-9, min_batches=100, max_s=1e9, max_requests=10**9)
    stop = PrecisionStop(rule, batch_requests=10, warmup=0, boot_share_s=None)
    stop.start([Status(1, 0, 0, 0, 0, 0)])
    t = offset_s
    while t < ends[-1]:
        clock.now = t
        done = int(np.searchsorted(ends, t, side="right"))
        last = int(round(ends[done - 1] * 1e9)) if done else 0
        stop.observe([Status(1, done, 0, EVENTS * done, int(t * 1e9), last)])
        t += tick_s
    return stop, ends


def test_a_batch_lasts_from_one_batch_end_to_the_next_not_from_status_to_status(monkeypatch):
    # One stream, requests of 0.186-0.193 s (a batch of 10 in ~1.9 s: one stream on the
    # H100 of 2026-12-07). Measured between the statuses' 0.1 s ticks the batches looked
    # alike (0.09 % RSE where the requests' own ends say 0.9 %); between the batches' own
    # last ends they are what they were.
    rng = np.random.default_rng(7)
    per_batch = rng.uniform(1.86, 1.93, 12)
    durations = np.repeat(per_batch / 10, 10)
    stop, ends = run_level(monkeypatch, durations)
    batch_ends = ends[9::10]
    truth = np.diff(np.concatenate([[0.0], batch_ends]))
    seen = [b.seconds for b in stop.batches]
    assert len(seen) >= 10
    # Each batch ends at the status after its 10th request; the batch's seconds run from
    # the previous batch's last end to its own (the first from the phase's start).
    np.testing.assert_allclose(seen, truth[: len(seen)], rtol=0, atol=1e-6)
    assert all(b.tokens == 10 * EVENTS for b in stop.batches)
    # Not multiples of the tick, as the coordinator's clock would give.
    assert any(abs(s * 10 - round(s * 10)) > 0.01 for s in seen)


def test_the_rse_is_the_batches_own(monkeypatch):
    # Batch rates that truly scatter 1 %: the rule's RSE over its counted batches is the
    # batch means' (within a tenth of it), not the 0.1 s ticks' (which turn 1 % into 0 or 5 %).
    rng = np.random.default_rng(11)
    per_batch = 1.9 * np.exp(rng.normal(0, 0.01, 30))
    stop, _ = run_level(monkeypatch, np.repeat(per_batch / 10, 10))
    counted = stop.batches[1:]  # the first is discarded by the rule
    rates = np.array([b.tokens / b.seconds for b in counted])
    want = rates.std(ddof=1) / np.sqrt(len(rates)) / rates.mean()
    got = stopping.request_stop(stop.rule, stop.batches, 0.0, 0).estimate.rse
    assert got is not None and abs(got - want) <= 0.1 * want
    truth = 10 * EVENTS / per_batch[1 : len(counted) + 1]
    true_rse = truth.std(ddof=1) / np.sqrt(len(truth)) / truth.mean()
    assert abs(got - true_rse) <= 0.1 * true_rse
