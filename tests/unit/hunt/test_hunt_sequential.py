"""Group-sequential boundaries against published values, and the per-arm decision's error
rates by simulation (the production `first_decisions`, vectorised)."""

import math

import numpy as np
import pytest

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


def _arms(effect, cv, sims, levels, boots, seed):
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(cv**2))
    ref = np.exp(rng.normal(0, sigma, (sims, levels, boots)))
    arm = np.exp(rng.normal(0, sigma, (sims, levels, boots)))
    arm[:, 0] *= 1 + effect
    return ref, arm


DEFAULTS = hs.HuntSpec.__dataclass_fields__


def _default_design(levels=1):
    d = {k: DEFAULTS[k].default for k in ("boots_min", "boots_max", "stage", "alpha", "power")}
    return make_design(
        d["boots_min"],
        d["boots_max"],
        d["stage"],
        d["alpha"],
        d["power"],
        DEFAULTS["min_effect_pct"].default,
        levels,
        DEFAULTS["alpha_spending"].default,
        DEFAULTS["beta_spending"].default,
    )


SIMS = 4000  # Monte-Carlo standard error of a rate p: sqrt(p (1 - p) / SIMS)


def _bound(p, sims=SIMS):
    return 3 * math.sqrt(p * (1 - p) / sims)


def test_identical_arms_adopted_at_most_alpha():
    """Defaults (3..11 boots per side, stages of 2, one-sided alpha 0.05): the adopt rate of
    identical arms at CV 2 % is at most alpha + 3 Monte-Carlo standard errors (0.060)."""
    d = _default_design()
    ref, arm = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11)
    rate = float(np.mean(first_decisions(d, ref, arm).code == ADOPT))
    assert rate <= d.alpha + _bound(d.alpha)


def test_identical_arms_over_two_levels_bonferroni_keeps_alpha():
    d = _default_design(levels=2)
    ref, arm = _arms(0.0, 0.03, 2000, 2, d.looks[-1], seed=12)
    rate = float(np.mean(first_decisions(d, ref, arm).code == ADOPT))
    assert rate <= d.alpha + _bound(d.alpha, 2000)


def test_true_effect_of_delta_adopted_with_power():
    """A true gain of exactly δ = 3 % at CV 2 % is adopted within 11 boots per side with the
    stated power 0.8, less 3 Monte-Carlo standard errors (0.781)."""
    d = _default_design()
    ref, arm = _arms(d.min_effect, 0.02, SIMS, 1, d.looks[-1], seed=13)
    result = first_decisions(d, ref, arm)
    assert float(np.mean(result.code == ADOPT)) >= (1 - d.beta) - _bound(1 - d.beta)
    assert result.boots.mean() < d.looks[-1]  # it stops early on average


def test_naive_repeated_looks_would_inflate_alpha():
    """The same looks with a fixed 5 % test at each: the error this design exists to avoid."""
    d = _default_design()
    naive = d._replace(efficacy_p=(0.05,) * len(d.looks))
    ref, arm = _arms(0.0, 0.02, SIMS, 1, d.looks[-1], seed=11)
    rate = float(np.mean(first_decisions(naive, ref, arm).code == ADOPT))
    assert rate > d.alpha + _bound(d.alpha)


def test_decide_on_one_arm_latency_lower_is_better():
    d = _default_design()
    ref = [[100, 101, 99, 100, 100]]
    faster = [[90, 91, 89, 90, 90]]  # a latency 10 % lower
    look = decide(d, 1, ref, faster, ["c1"], higher_is_better=False)
    assert look.verdict == "adopt" and look.gain_pct > 9 and look.low_pct > 0
    look = decide(d, 1, faster, ref, ["c1"], higher_is_better=False)
    assert look.verdict == "reject" and "worse" in look.reason
