"""Goodput and the capacity search's bracket and next probe (servesweep.capacity), on
hand-built inputs with hand-computed answers."""

import math

import pytest

from servesweep.capacity import search as probes
from servesweep.capacity.goodput import goodput, request_meets_slo


def _r(ttft, tpot, e2e, out=10, ok=True, warmup=False):
    return {
        "ok": ok,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2el_ms": e2e,
        "output_tokens": out,
        "warmup": warmup,
    }


def test_goodput_by_hand():
    slo = {"ttft_ms": 100, "tpot_ms": 20}
    records = [
        _r(50, 10, 200),  # meets
        _r(100, 20, 300),  # meets: the bounds are inclusive
        _r(101, 10, 200),  # TTFT over
        _r(50, 25, 200),  # TPOT over
        _r(50, None, 60, out=1),  # one token: no TPOT, meets
        _r(None, None, 5, ok=False),  # failed: never meets
        _r(1, 1, 1, warmup=True),  # warmup: not counted at all
    ]
    g = goodput(records, slo, duration_s=2.0)
    assert g.slo_met == 3
    assert g.slo_met_share == pytest.approx(3 / 6, abs=1e-4)
    assert g.goodput_request_rate == 1.5
    assert g.goodput_output_throughput == (10 + 10 + 1) / 2
    assert not request_meets_slo(_r(10, 10, 501), {"e2e_ms": 500})


def test_bracket_and_probes_by_hand():
    met = {1: True, 4: True, 16: False, 64: False}
    b = probes.bracket(met)
    assert b == (4, 16)
    assert probes.next_probe(b, rate=False) == 10
    assert probes.next_probe(b, rate=True) == 8.0  # sqrt(4 × 16)
    assert probes.next_probe(probes.Bracket(11.3, 16), rate=True) == 13.4  # sqrt(180.8), 3 s.f.
    assert probes.next_probe(probes.Bracket(4, 5), rate=False) is None  # nothing between
    assert probes.next_probe(probes.Bracket(None, 1), rate=False) is None  # none passed
    assert probes.next_probe(probes.Bracket(64, None), rate=False) is None  # all passed
    assert probes.next_probe(probes.Bracket(16, math.inf), rate=True) is None
    # A pass above a failure (a burst absorbed) does not lift the capacity past the failure.
    assert probes.bracket({1: True, 4: False, 16: True, 64: False}) == (1, 4)
    assert probes.bracket({4: True, 16: True, 64: False, math.inf: True}) == (16, 64)
    summary = {"status": "ok", "client_bound": False}
    assert probes.level_meets_slo(summary, 0.9, 0.9) and not probes.level_meets_slo(
        summary, 0.89, 0.9
    )
    assert not probes.level_meets_slo({**summary, "rate_short": True}, 1.0, 0.9)
