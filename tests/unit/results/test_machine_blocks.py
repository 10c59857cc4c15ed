"""Machines as blocks: a comparison whose boots ran on several machines, each machine a
block (`stats.blocked_contrast`, the judge's board). Checked against statsmodels' least
squares, by simulation with a known truth and a large machine effect, and through the
judge on a summary whose boots carry their machine."""

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from fixtures.verdict_sim import summary_rows
from scipy import stats as sps

from servesweep import stats
from servesweep.results.judge.board import Metric
from servesweep.results.judge.verdicts import FASTER, SAME, compare
from servesweep.results.report import verdict_views

THROUGHPUT = {"output_throughput": Metric("output_throughput", True)}
ANALYSIS = {"baseline": "baseline", "first_boot": "keep", "margin_throughput_pct": 2.0}


def test_the_estimate_is_least_squares_with_the_machine_a_factor():
    rng = np.random.default_rng(7)
    counts = {"m1": (2, 3), "m2": (4, 1), "m3": (1, 2)}  # (a, b) boots: unbalanced
    shift = {"m1": 0.0, "m2": -0.3, "m3": 0.2}
    rows = []
    for m, (na, nb) in counts.items():
        rows += [("a", m, 0.1 + shift[m] + rng.normal(0, 0.05)) for _ in range(na)]
        rows += [("b", m, shift[m] + rng.normal(0, 0.05)) for _ in range(nb)]
    df = pd.DataFrame(rows, columns=["side", "machine", "y"])
    blocks = {
        side: [df[(df.side == side) & (df.machine == m)].y.to_numpy() for m in counts]
        for side in "ab"
    }
    pool = stats.scatter([g for side in "ab" for g in blocks[side]], logs=True)
    c = stats.blocked_contrast(blocks["a"], blocks["b"], pool)
    additive = smf.ols("y ~ C(side, Treatment('b')) + C(machine)", data=df).fit()
    term = "C(side, Treatment('b'))[T.a]"
    assert c.estimate == pytest.approx(additive.params[term], abs=1e-12)
    # Its variance: the boots about their own (side, machine) mean, the interaction
    # model's residual variance and df.
    cells = smf.ols("y ~ C(side) * C(machine)", data=df).fit()
    assert float(pool.variance) == pytest.approx(cells.scale, rel=1e-12)
    assert c.df == cells.df_resid == len(df) - 6
    w = sum(1 / (1 / na + 1 / nb) for na, nb in counts.values())
    assert c.se == pytest.approx(math.sqrt(cells.scale / w), rel=1e-12)
    assert c.variance == "blocked" and (c.n, c.n_ref) == (7, 6)


def test_a_machine_with_one_side_only_carries_no_difference():
    pool = stats.Scatter(0.02, 4)
    c = stats.blocked_contrast(
        [np.log([110.0, 112.0]), np.log([70.0])], [np.log([100.0, 101.0]), np.array([])], pool
    )
    assert c.estimate == pytest.approx(np.log([110, 112]).mean() - np.log([100, 101]).mean())
    assert (c.n, c.n_ref) == (2, 2)  # the lone boot on the second machine is not counted


@pytest.mark.parametrize("cv", [0.02, 0.05, 0.10])
def test_with_a_known_truth_the_interval_covers_it_and_the_machine_is_gone(cv):
    """Two machines 25 % apart; the variant (+8 %) ran mostly on the slow one, the
    baseline mostly on the fast one: pooled, the Δ reads the machine; blocked, its 95 %
    interval covers the truth in 95 % of sweeps, at boot CV 2, 5 and 10 %."""
    rng = np.random.default_rng(int(cv * 1000))
    truth = math.log(1.08)
    host = {"fast": 0.0, "slow": math.log(0.75)}
    counts = {"fast": (1, 4), "slow": (4, 1)}  # (variant, baseline) boots
    covered, pooled_bias = 0, []
    sims = 2000
    for _ in range(sims):
        a, b = [], []
        for m, (na, nb) in counts.items():
            a.append(truth + host[m] + rng.normal(0, cv, na))
            b.append(host[m] + rng.normal(0, cv, nb))
        c = stats.blocked_contrast(a, b, stats.scatter(a + b, logs=True))
        iv = c.interval()
        covered += iv.low <= math.exp(truth) <= iv.high
        pooled_bias.append(np.concatenate(a).mean() - np.concatenate(b).mean() - truth)
    rate = covered / sims
    assert 0.935 <= rate <= 0.965, rate  # 2000 sims: ±1.0 % is 2 standard errors
    assert np.mean(pooled_bias) < -0.15  # the slow machine's −29 % in log, 3/5 of it


def summary(values: dict, machines: dict | None = None) -> pd.DataFrame:
    """summary.csv rows: variant -> each boot's throughput; machines: variant -> each
    boot's machine key."""
    out = []
    for variant, vals in values.items():
        rows = summary_rows(variant, vals)
        if machines is not None:
            rows = [r | {"machine": m} for r, m in zip(rows, machines[variant], strict=True)]
        out += rows
    return pd.DataFrame(out)


def judge(df: pd.DataFrame):
    variants = list(dict.fromkeys(df["variant"]))
    (c,) = compare(df, ANALYSIS, ["s"], variants, lambda *a: [], THROUGHPUT)
    return c


def test_the_judge_blocks_on_the_machine_where_boots_moved():
    # The baseline's first two boots ran on a fast host, the rest of the sweep on one
    # 30 % slower: the variant is +10 % on each machine.
    base = [1000.0, 1010.0, 700.0, 707.0, 693.0]
    fast = [1105.0, 770.0, 763.0, 777.0]
    where = {"baseline": ["A", "A", "B", "B", "B"], "fast": ["A", "B", "B", "B"]}
    c = judge(summary({"baseline": base, "fast": fast}, where))
    assert c.variance == "blocked" and c.df == 9 - 4 and c.verdict == FASTER
    assert c.delta_lo < 10.0 < c.delta_hi and abs(c.delta_pct - 10.0) < 1.0
    assert "each machine a block" in verdict_views.basis(c)
    # The same values with no machine known: the host's 30 % sits in the scatter.
    plain = judge(summary({"baseline": base, "fast": fast}))
    assert plain.variance == "pooled" and plain.verdict == SAME
    assert plain.delta_hi - plain.delta_lo > 5 * (c.delta_hi - c.delta_lo)


def test_a_machine_that_ran_one_side_is_named_and_left_out():
    base = [1000.0, 1010.0, 990.0]
    fast = [1100.0, 1090.0, 700.0]  # r2 on machine C, where no baseline ran
    where = {"baseline": ["A", "A", "B"], "fast": ["A", "B", "C"]}
    c = judge(summary({"baseline": base, "fast": fast}, where))
    assert c.variance == "blocked" and (c.n, c.n_ref) == (2, 3)
    assert "machine C: one side's boots only" in c.excluded
    assert c.delta_pct > 5  # the slow lone boot does not drag it down


def test_one_machine_or_machines_that_never_ran_both_sides_are_not_blocked():
    base, fast = [1000.0, 1010.0, 990.0], [1100.0, 1090.0, 1110.0]
    one = {"baseline": ["A"] * 3, "fast": ["A"] * 3}
    assert judge(summary({"baseline": base, "fast": fast}, one)).variance == "pooled"
    apart = {"baseline": ["A"] * 3, "fast": ["B"] * 3}  # the machine is the variant here
    assert judge(summary({"baseline": base, "fast": fast}, apart)).variance == "pooled"
    t = sps.ttest_ind(np.log(fast), np.log(base))
    assert judge(summary({"baseline": base, "fast": fast}, apart)).p_value == pytest.approx(
        t.pvalue
    )
