"""The benchmarks' request-noise worlds (benchmarks/simulation/hunt_cost.py's `cvC-reqS`
scenarios, gpu_minutes.py's `level_stops`) against known truth: a boot's value scatters by
σ_B² + σ_W² / R, the requests' share at the default R is the stated one, and `auto` lengths
send more where requests are more of the scatter, at a cost the machine charges."""

import math

import numpy as np
import pytest

from benchmarks.simulation import gpu_minutes as gm
from benchmarks.simulation import hunt_cost as hc


def log_values(sc: hc.Scenario, auto: bool, boots: int = 4000) -> tuple[np.ndarray, hc.Machine]:
    w = hc.world(np.random.default_rng([3, 0]))
    m = hc.Machine(w, sc, seed=3, stream=1, auto=auto)
    values = [m.boot(()).values for _ in range(boots)]
    return np.log([[v[lv] for lv in hc.LEVELS] for v in values]), m


def test_a_boots_scatter_is_the_boots_and_its_requests():
    sc = hc.Scenario(0.05, request_share=0.5)
    logs, m = log_values(sc, auto=False)
    # At the default requests the requests are half of a boot value's variance: total
    # σ_B² / (1 - 0.5) = 2 σ_B² at every level (the boot's lognormal: log1p(cv²) ≈ cv²).
    var = logs.var(axis=0)
    assert np.allclose(var, 2 * math.log1p(0.05**2), rtol=0.1), var
    assert m.boots == 4000 and m.seconds == pytest.approx(4000 * m.boot_s)
    # Without request noise only σ_B is left.
    quiet = log_values(hc.Scenario(0.05), auto=False)[0].var(axis=0)
    assert np.allclose(quiet, math.log1p(0.05**2), rtol=0.1), quiet


def test_auto_lengths_send_more_where_requests_are_the_scatter_and_cost_it():
    loud = hc.Scenario(0.05, request_share=0.9)
    default, m0 = log_values(loud, auto=False, boots=2000)
    longer, m1 = log_values(loud, auto=True, boots=2000)
    # σ_W² is 9 σ_B² at the default requests; auto's levels cut it, and cost more seconds.
    assert (longer.var(axis=0) < 0.6 * default.var(axis=0)).all()
    assert m1.boot_s > m0.boot_s
    charged, sampled = hc.lengths(loud, True)
    charged10, _ = hc.lengths(hc.Scenario(0.05, request_share=0.1), True)
    assert all(charged[lv] > charged10[lv] for lv in hc.LEVELS)
    assert all(sampled[lv] <= charged[lv] + 1e-9 for lv in hc.LEVELS)  # harmonic <= mean


def test_level_stops_bound_stops_a_quiet_level_of_many_streams_early():
    # A quiet level (σ_W² small): the upper-bound stop after 3 counted batches, not 5;
    # charged the discarded first batch and the 256 in flight at the stop too.
    args = ([256], [1e-4], [0.018], 0.02, 20.0)
    with_bound = gm.level_stops(*args, bound=True)
    without = gm.level_stops(*args, bound=False)
    assert with_bound.harmonic[0] == pytest.approx(3 * 256)
    assert without.harmonic[0] == pytest.approx(5 * 256)
    assert with_bound.charged[0] == 5 * 256 and without.charged[0] == 7 * 256
