"""The `auto` stop rule's batches as the coordinator sees them: worker statuses every 0.1 s."""

import types

import numpy as np

from servesweep.bench import stopping
from servesweep.bench.messages import Status
from servesweep.bench.stopping import PrecisionStop
from servesweep.level import Level
from servesweep.sizing import Precision

EVENTS = 131  # SSE events of one 128-token request


def run_level(
    monkeypatch, durations_s, tick_s=0.1, offset_s=0.037, rule=None, level=None, boot_share_s=None
):
    """One stream sending back to back from t = 0 (requests of `durations_s`); the
    coordinator observes the worker's status every `tick_s` until the rule stops it (by
    default one that never does). Returns the stopper."""
    ends = np.cumsum(durations_s)
    clock = types.SimpleNamespace(now=0.0)
    fake = types.SimpleNamespace(
        monotonic=lambda: clock.now, perf_counter_ns=lambda: int(round(clock.now * 1e9))
    )
    monkeypatch.setattr(stopping, "time", fake)
    rule = rule or Precision(rse_pct=1e-9, min_batches=100, max_s=1e9, max_requests=10**9)
    stop = PrecisionStop(rule, 10, 0, boot_share_s, level or Level.parse(1))
    stop.start([Status(1, 0, 0, 0, 0, 0)])
    t = offset_s
    while t < ends[-1]:
        clock.now = t
        done = int(np.searchsorted(ends, t, side="right"))
        last = int(round(ends[done - 1] * 1e9)) if done else 0
        if stop.observe([Status(1, done, 0, EVENTS * done, int(t * 1e9), last)]):
            break
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


def test_a_level_stops_on_its_own_boot_scatter(monkeypatch):
    # σ_B per level (1 % at level 1, 8 % at 256): the same stream of batches (CV ~5 %)
    # stops far sooner as level 256, and the recorded target is σ_B(level) √(t / c_b) with
    # t the phase's seconds to the batch it stopped at.
    rng = np.random.default_rng(3)
    durations = np.repeat(1.9 * np.exp(rng.normal(0, 0.05, 60)) / 10, 10)
    rule = Precision.of({"precision": {"boot_cv_pct": {1: 1.0, 256: 8.0}}})
    c_b = 10.0
    fields = {}
    for value in (1, 256):
        level = Level.parse(value)
        stop, _ = run_level(monkeypatch, durations, rule=rule, level=level, boot_share_s=c_b)
        fields[value] = f = stop.fields()
        assert f["stop_reason"] == "cost_optimal" and f["boot_share_s"] == c_b
        t = stop.mark_s - stop.start_s
        assert f["stop_target_rse"] == round(rule.boot_cv(level) / 100 * np.sqrt(t / c_b), 5)
        assert f["stop_rse"] <= f["stop_target_rse"]
    assert rule.boot_cv(Level.parse(256)) == 8.0 and rule.boot_cv(Level.parse(1)) == 1.0
    assert fields[256]["stop_batches"] + 3 < fields[1]["stop_batches"]
