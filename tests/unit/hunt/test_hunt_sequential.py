"""Group-sequential boundaries against published values, and the per-arm decision's error
rates by simulation (the production `level_stats` / `decide_codes`, vectorised by
`first_decisions`; the whole hunt's path through `advance`: test_hunt_state)."""

import math

import numpy as np
import pytest

from servesweep import stats
from servesweep.hunt import spec as hs
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


def _arms(effect, cv, sims, levels, boots, seed, others=0, arm_cv=None):
    """A reference and an arm (the first level gains `effect`), and `others` null samples
    measured beside them (the rest of a round), shaped as first_decisions takes them."""
    rng = np.random.default_rng(seed)
    ref = _draw(rng, cv, (sims, levels, boots))
    arm = _draw(rng, cv if arm_cv is None else arm_cv, (sims, levels, boots))
    arm[:, 0] *= 1 + effect
    return ref, arm, _draw(rng, cv, (sims, others, levels, boots))


DEFAULTS = hs.HuntSpec.__dataclass_fields__


def _default_design(levels=1, **overrides):
    keys = ("boots_min", "boots_max", "stage", "alpha", "power", "min_effect_pct")
    d = {k: DEFAULTS[k].default for k in keys} | overrides
    return make_design(
        d["boots_min"],
        d["boots_max"],
        d["stage"],
        d["alpha"],
        d["power"],
        d["min_effect_pct"],
        levels,
        DEFAULTS["alpha_spending"].default,
        DEFAULTS["beta_spending"].default,
    )


SIMS = 4000  # Monte-Carlo standard error of a rate p: sqrt(p (1 - p) / SIMS)


def _bound(p, sims=SIMS):
    return 3 * math.sqrt(p * (1 - p) / sims)


def _adopted(d, ref, arm, others):
    return float(np.mean(first_decisions(d, ref, arm, others=others).code == ADOPT))


@pytest.mark.parametrize("others", [0, 4])
def test_identical_arms_adopted_at_most_alpha(others):
    """Defaults (1..11 boots per side, stages of 1, one-sided alpha 0.05, the scatter pooled
    over the reference, the arm and the 0 or 4 other arms of its round): the adopt rate of
    identical arms at CV 2 % is at most alpha + 3 Monte-Carlo standard errors (0.060)."""
    d = _default_design()
    ref, arm, more = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11, others=others)
    assert _adopted(d, ref, arm, more) <= d.alpha + _bound(d.alpha)


def test_identical_arms_by_welch_adopted_at_most_alpha():
    d = _default_design(boots_min=2)  # Welch needs two boots a side
    ref, arm, _ = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11)
    assert _adopted(d, ref, arm, None) <= d.alpha + _bound(d.alpha)


def test_identical_arms_over_two_levels_bonferroni_keeps_alpha():
    d = _default_design(levels=2)
    ref, arm, more = _arms(0.0, 0.03, 2000, 2, d.looks[-1], seed=12, others=2)
    assert _adopted(d, ref, arm, more) <= d.alpha + _bound(d.alpha, 2000)


@pytest.mark.parametrize("others", [0, 4])
def test_true_effect_of_delta_adopted_with_power(others):
    """A true gain of exactly δ = 3 % at CV 2 % is adopted within 11 boots per side with the
    stated power 0.8, less 3 Monte-Carlo standard errors (0.781)."""
    d = _default_design()
    ref, arm, more = _arms(d.min_effect, 0.02, SIMS, 1, d.looks[-1], seed=13, others=others)
    result = first_decisions(d, ref, arm, others=more)
    assert float(np.mean(result.code == ADOPT)) >= (1 - d.beta) - _bound(1 - d.beta)
    assert result.boots.mean() < d.looks[-1]  # it stops early on average


def test_pooling_stops_earlier_than_welch():
    """What pooling buys: a +6 % gain at CV 2 % decided in fewer boots a side."""
    d = _default_design(boots_min=2)
    ref, arm, more = _arms(0.06, 0.02, SIMS, 1, d.looks[-1], seed=14, others=4)
    welch = first_decisions(d, ref, arm).boots.mean()
    pooled = first_decisions(d, ref, arm, others=more).boots.mean()
    assert pooled < welch - 0.5


def test_an_arm_that_scatters_more_is_judged_by_its_own_scatter(monkeypatch):
    """An arm whose boots scatter 3 times as much as the others' (CV 6 % among 2 %): pooled
    blindly, its false adopts pass 0.13 (the pool understates its variance); the guard
    (the grid's, servesweep.stats) judges it by its scaled own scatter instead."""
    d = _default_design()
    ref, arm, more = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=15, others=3, arm_cv=0.06)
    checked = _adopted(d, ref, arm, more)
    monkeypatch.setattr(stats, "GUARD_LEVEL", 1e-300)  # the guard never fires
    monkeypatch.setattr(stats.scatter_agrees, "__defaults__", (1e-300,))
    blind = _adopted(d, ref, arm, more)
    assert checked < 0.09 < 0.13 < blind, (checked, blind)


def test_naive_repeated_looks_would_inflate_alpha():
    """The same looks with a fixed 5 % test at each: the error this design exists to avoid."""
    d = _default_design()
    naive = d._replace(efficacy_p=(0.05,) * len(d.looks))
    ref, arm, more = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11, others=4)
    assert _adopted(naive, ref, arm, more) > d.alpha + _bound(d.alpha)


def test_a_chance_dip_at_an_unchanged_level_does_not_reject_a_winner():
    """Better at one level, significantly worse at another: a trade-off that goes on to the
    next look (an unchanged level's dip clears), rejected only at the last look."""
    d = _default_design(levels=2)
    ref = [[100, 101, 99], [100, 101, 99]]
    arm = [[110, 111, 109], [95, 96, 94]]  # +10 % at the first level, -5 % at the second
    early = decide(d, 2, ref, arm, ["a", "b"], higher_is_better=True, others=[ref])
    assert early.verdict == "continue"
    last = d._replace(looks=d.looks[:3], efficacy_p=d.efficacy_p[:3], futility_p=d.futility_p[:3])
    late = decide(last, 2, ref, arm, ["a", "b"], higher_is_better=True, others=[ref])
    assert late.verdict == "reject" and "worse at level b" in late.reason


def test_decide_on_one_arm_latency_lower_is_better():
    d = _default_design(boots_min=2)
    ref = [[100, 101, 99, 100, 100]]
    faster = [[90, 91, 89, 90, 90]]  # a latency 10 % lower
    look = decide(d, 1, ref, faster, ["c1"], higher_is_better=False)
    assert look.verdict == "adopt" and look.gain_pct > 9 and look.low_pct > 0
    look = decide(d, 1, faster, ref, ["c1"], higher_is_better=False)
    assert look.verdict == "reject" and "worse" in look.reason
