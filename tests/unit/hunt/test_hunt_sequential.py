"""Group-sequential boundaries against published values, and the per-arm decision's error
rates by simulation (the production `level_stats` / `decide_codes`, vectorised by
`first_decisions`; the whole hunt's path through `replay`: test_hunt_state)."""

import math

import numpy as np
import pytest

from servesweep import stats
from servesweep.hunt import spec as hs
from servesweep.hunt.power import power_at
from servesweep.hunt.sequential import (
    ADOPT,
    classic_constant,
    decide,
    first_decisions,
    make_design,
    spend,
    spending_bounds,
)

# Lan-DeMets O'Brien-Fleming-type spending (sfLDOF), one-sided alpha = 0.025, K equally
# spaced looks: the boundaries the gsDesign R package (K. Anderson) reports for
# gsDesign(k=K, test.type=1, alpha=0.025, sfu=sfLDOF) (Lan & DeMets 1983, Biometrika 70).
LDOF_0025 = {
    2: [2.9626, 1.9686],
    3: [3.7103, 2.5114, 1.9930],
    4: [4.3326, 2.9631, 2.3590, 2.0141],
    5: [4.8769, 3.3569, 2.6803, 2.2898, 2.0310],
}
# Jennison & Turnbull (2000), Group Sequential Methods with Applications to Clinical Trials,
# Table 2.1 (Pocock C_P(K, 0.05)) and Table 2.3 (O'Brien-Fleming C_B(K, 0.05)), two-sided.
POCOCK_005 = {1: 1.960, 2: 2.178, 3: 2.289, 4: 2.361, 5: 2.413}
OBF_005 = {1: 1.960, 2: 1.977, 3: 2.004, 4: 2.024, 5: 2.040}


@pytest.mark.parametrize("looks", [2, 3, 4, 5])
def test_lan_demets_obf_bounds_match_published(looks):
    got = spending_bounds(list(range(1, looks + 1)), 0.025, "obf")
    assert got == pytest.approx(LDOF_0025[looks], abs=2e-3)


def test_classic_pocock_and_obrien_fleming_constants_match_jennison_turnbull():
    for k in (2, 3, 5):
        assert classic_constant("pocock", k, 0.05) == pytest.approx(POCOCK_005[k], abs=2e-3)
        assert classic_constant("obf", k, 0.05) == pytest.approx(OBF_005[k], abs=2e-3)


def test_spending_functions_spend_all_and_only_alpha():
    for kind in ("obf", "pocock"):
        assert float(spend(kind, 0.05, 1.0)) == pytest.approx(0.05)
        assert float(spend(kind, 0.05, 0.0)) == pytest.approx(0.0)
    assert float(spend("obf", 0.05, 0.2)) < float(spend("pocock", 0.05, 0.2))


def _draw(rng, cv, shape):
    sigma = math.sqrt(math.log1p(cv**2))
    return np.exp(rng.normal(-(sigma**2) / 2, sigma, shape))


def _arms(effect, cv, sims, levels, boots, seed, others=0, arm_cv=None, second=0.0):
    """A reference and an arm (the first level gains `effect`, the second `second`), and
    `others` null samples measured beside them (the rest of a round), shaped as
    first_decisions takes them."""
    rng = np.random.default_rng(seed)
    ref = _draw(rng, cv, (sims, levels, boots))
    arm = _draw(rng, cv if arm_cv is None else arm_cv, (sims, levels, boots))
    arm[:, 0] *= 1 + effect
    if levels > 1:
        arm[:, 1] *= 1 + second
    return ref, arm, _draw(rng, cv, (sims, others, levels, boots))


SPEC = hs.from_dict(
    {"start": {"name": "b", "stack": "s"}, "candidates": {"c": {}}, "objective": {"levels": [1]}}
)
SPEC2 = hs.from_dict(  # the defaults, two counted levels
    {"start": {"name": "b", "stack": "s"}, "candidates": {"c": {}}, "objective": {"levels": [1, 2]}}
)


def _design(spec=SPEC, cv=0.02, arms=1):
    """The defaults' design of a round of `arms` arms, sized on a known boot CV (and the
    fewest df a round's pool can have: its reference's and one arm's)."""
    return hs.round_design(spec, arms, math.log1p(cv**2))[0]


SIMS = 4000  # Monte-Carlo standard error of a rate p: sqrt(p (1 - p) / SIMS)


def _bound(p, sims=SIMS):
    return 3 * math.sqrt(p * (1 - p) / sims)


def _adopted(d, ref, arm, others):
    return float(np.mean(first_decisions(d, ref, arm, others=others).code == ADOPT))


@pytest.mark.slow
def test_the_defaults_size_a_round_from_the_scatter_and_delta():
    """One arm, one level, CV 2 %, δ 3 %, alpha 0.025, power 0.8: the boots a side grow
    with the scatter (the fixed-sample n = 2 (z_a + z_b)^2 s^2 / log(1.03)^2 = 7.2 here is a
    floor: the looks cost more), with the arms (Bonferroni), and past the cap the round
    tests the gain the cap finds with that power instead."""
    one = hs.round_design(SPEC, 1, math.log1p(0.02**2))[1]
    five = hs.round_design(SPEC, 5, math.log1p(0.02**2))[1]
    assert 8 <= one.boots < five.boots <= SPEC.boots_max and not one.capped
    assert one.min_effect_pct == SPEC.min_effect_pct
    noisy = hs.round_design(SPEC, 1, math.log1p(0.05**2))[1]
    assert noisy.capped and noisy.boots == SPEC.boots_max
    # n grows as s^2 and shrinks as log(1 + δ)^2: the gain the cap finds
    assert noisy.needed == pytest.approx(one.needed * (0.05 / 0.02) ** 2, rel=0.25)
    found = 100 * math.expm1(math.log1p(0.03) * math.sqrt(noisy.needed / noisy.boots))
    assert noisy.min_effect_pct == pytest.approx(found, rel=0.05)
    assert hs.power_of(SPEC, noisy) < 0.5 < 0.8 <= hs.power_of(SPEC, one) + 0.01


@pytest.mark.slow
def test_the_stated_power_is_what_a_simulation_delivers():
    """A true gain of exactly δ at CV 2 %, the round sized by the defaults: adopted with
    the stated power 0.8, less 3 Monte-Carlo standard errors; power_at agrees with the
    simulated rate, and at the cap of a noisier host with its own (lower) figure."""
    d = _design()
    ref, arm, _ = _arms(d.min_effect, 0.02, SIMS, 1, d.looks[-1], seed=13)
    result = first_decisions(d, ref, arm, others=_arms(0, 0.02, SIMS, 1, d.looks[-1], 3)[2])
    rate = float(np.mean(result.code == ADOPT))
    assert rate >= 0.8 - _bound(0.8)
    assert rate == pytest.approx(power_at(d, math.log1p(0.02**2)), abs=_bound(0.8) + 0.02)
    assert result.boots.mean() < d.looks[-1]  # it stops early on average
    capped = _design(cv=0.04)
    assert capped.looks[-1] == SPEC.boots_max
    ref, arm, more = _arms(0.03, 0.04, SIMS, 1, capped.looks[-1], seed=17, others=2)
    sim = _adopted(capped, ref, arm, more)
    stated = power_at(capped, math.log1p(0.04**2), gain_pct=3)
    assert sim == pytest.approx(stated, abs=_bound(stated) + 0.03) and stated < 0.7


@pytest.mark.slow
@pytest.mark.parametrize("arms", [1, 3, 5])
def test_a_round_of_null_arms_adopts_one_at_most_alpha_of_the_time(arms):
    """m identical arms sharing the reference, the scatter pooled over them: some arm is
    adopted in at most alpha (0.025) of the rounds, whatever m (Bonferroni over the arms),
    plus 3 Monte-Carlo standard errors; per arm alpha / m."""
    d = _design(arms=arms)
    sims = 2000
    rng = np.random.default_rng(11 + arms)
    ref = _draw(rng, 0.02, (sims, 1, d.looks[-1]))
    arm = _draw(rng, 0.02, (sims, arms, 1, d.looks[-1]))
    any_adopt = np.zeros(sims, dtype=bool)
    for j in range(arms):
        rest = np.delete(arm, j, axis=1)
        any_adopt |= first_decisions(d, ref, arm[:, j], others=rest).code == ADOPT
    assert d.alpha == pytest.approx(0.025 / arms)
    assert any_adopt.mean() <= 0.025 + _bound(0.025, sims)


def test_identical_arms_by_welch_adopted_at_most_alpha():
    d = _design()
    ref, arm, _ = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11)
    assert _adopted(d, ref, arm, None) <= d.alpha + _bound(d.alpha)


def test_identical_arms_over_two_levels_bonferroni_keeps_alpha():
    d = _design(SPEC2, cv=0.03, arms=3)
    ref, arm, more = _arms(0.0, 0.03, 2000, 2, d.looks[-1], seed=12, others=2)
    assert _adopted(d, ref, arm, more) <= d.alpha * 2 + _bound(d.alpha * 2, 2000)


@pytest.mark.slow
def test_worse_than_the_margin_at_another_level_is_not_adopted():
    """Non-inferiority with margin δ (3 %): +8 % at one level with -5 % at the other is not
    adopted (it was 0.66 of the time with "not significantly worse"); at the margin itself
    (-3 %) at most alpha; +8 % with the other level unchanged as often as its
    non-inferiority test's power allows (0.94 here)."""
    d = _design(SPEC2, arms=1)
    n = d.looks[-1]
    for second, most in ((-0.05, 0.01), (-0.03, 0.025 + _bound(0.025, 2000))):
        ref, arm, more = _arms(0.08, 0.02, 2000, 2, n, seed=21, others=2, second=second)
        assert _adopted(d, ref, arm, more) <= most, second
    ref, arm, more = _arms(0.08, 0.02, 2000, 2, n, seed=22, others=2)
    assert _adopted(d, ref, arm, more) > 0.9


def test_pooling_stops_earlier_than_welch():
    """What pooling buys: a +6 % gain at CV 2 % decided in fewer boots a side."""
    d = _design()
    ref, arm, more = _arms(0.06, 0.02, SIMS, 1, d.looks[-1], seed=14, others=4)
    welch = first_decisions(d, ref, arm).boots.mean()
    pooled = first_decisions(d, ref, arm, others=more).boots.mean()
    assert pooled < welch - 0.5


def test_an_arm_that_scatters_more_is_judged_by_its_own_scatter(monkeypatch):
    """An arm whose boots scatter 3 times as much as the others' (CV 6 % among 2 %): pooled
    blindly, it is adopted by chance several times alpha (the pool understates its
    variance); the guard (the grid's, servesweep.stats) judges it by its scaled own scatter
    instead, close to alpha."""
    d = _design()
    ref, arm, more = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=15, others=3, arm_cv=0.06)
    checked = _adopted(d, ref, arm, more)
    monkeypatch.setattr(stats, "GUARD_LEVEL", 1e-300)  # the guard never fires
    monkeypatch.setattr(stats.scatter_agrees, "__defaults__", (1e-300,))
    blind = _adopted(d, ref, arm, more)
    assert checked < 0.05 < 0.1 < blind, (checked, blind)


def test_naive_repeated_looks_would_inflate_alpha():
    """The same looks with a fixed 2.5 % test at each: the error this design exists to avoid."""
    d = _design()
    naive = d._replace(efficacy_p=(d.alpha,) * len(d.looks))
    ref, arm, more = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11, others=4)
    assert _adopted(naive, ref, arm, more) > d.alpha + _bound(d.alpha)


def test_a_level_not_yet_within_the_margin_goes_on_and_is_rejected_at_the_last_look():
    """Better at one level, not yet shown within the margin at another (a chance dip at an
    unchanged level clears with more boots): the next look; at the last, rejected."""
    d = make_design(1, 6, 1, 0.025, 0.8, 3, 2, "pocock", "pocock")
    ref = [[100, 101, 99], [100, 104, 96]]
    arm = [[110, 111, 109], [99, 103, 93]]  # +10 % at the first level, -2 % +- 3 at the second
    early = decide(d, 2, ref, arm, ["a", "b"], higher_is_better=True, others=[ref])
    assert early.verdict == "continue", early
    last = d._replace(
        looks=d.looks[:3],
        efficacy_p=d.efficacy_p[:3],
        futility_p=d.futility_p[:3],
        noninferiority_p=d.noninferiority_p[:3],
    )
    late = decide(last, 2, ref, arm, ["a", "b"], higher_is_better=True, others=[ref])
    assert late.verdict == "reject" and "not shown within 3 % at level b" in late.reason


def test_decide_on_one_arm_latency_lower_is_better():
    d = make_design(2, 5, 1, 0.025, 0.8, 3, 1, "pocock", "pocock")
    ref = [[100, 101, 99, 100, 100]]
    faster = [[90, 91, 89, 90, 90]]  # a latency 10 % lower
    look = decide(d, 1, ref, faster, ["c1"], higher_is_better=False)
    assert look.verdict == "adopt" and look.gain_pct > 9 and look.low_pct > 0
    look = decide(d, 1, faster, ref, ["c1"], higher_is_better=False)
    assert look.verdict == "reject" and "worse" in look.reason
