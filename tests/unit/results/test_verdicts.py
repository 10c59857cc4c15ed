"""Verdicts against the baseline and across stacks: every branch, with the interval worked
out independently (statistics + scipy's t quantile), not by the module under test."""

import math
import statistics

import pandas as pd
import pytest
from scipy.stats import t as student_t

from servesweep.results.judge.verdicts import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    SMALL,
    Metric,
    compare,
    to_frame,
    verdict_of,
)
from servesweep.results.report import verdict_views

ANALYSIS = {
    "baseline": "baseline",
    "noise_cv": 0.05,
    "resolve_pct": 2.0,
    "margin_throughput_pct": 2.0,
    "margin_latency_pct": 5.0,
}
THROUGHPUT = {"output_throughput": Metric("output_throughput", True)}


def rows(variant, values, stack="s", level=8, valid=None):
    valid = valid or [True] * len(values)
    return [
        {
            "stack": stack,
            "model": "m",
            "variant": variant,
            "repeat": r,
            "level": level,
            "in_boot": 0,
            "status": "ok",
            "valid": ok,
            "invalid_reasons": None if ok else "client_bound: achieved concurrency 3",
            "output_throughput": v,
        }
        for r, (v, ok) in enumerate(zip(values, valid, strict=True))
    ]


def verdicts(*groups, stacks=("s",), metrics=THROUGHPUT):
    df = pd.DataFrame([r for g in groups for r in g])
    variants = list(dict.fromkeys(df["variant"]))
    out = compare(df, ANALYSIS, list(stacks), variants, lambda *a: [], metrics)
    return {(c.stack, c.variant, c.kind): c for c in out}


def welch_delta(a, b):
    """Δ % interval by hand: Welch's interval of mean(a) - mean(b), over mean(b)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = student_t.ppf(0.975, df) * math.sqrt(va + vb)
    diff, mb = statistics.mean(a) - statistics.mean(b), statistics.mean(b)
    return (diff - half) / mb * 100, (diff + half) / mb * 100


def test_faster_with_the_welch_interval():
    base, fast = [100.0, 101.0, 99.0], [150.0, 152.0, 148.0]
    c = verdicts(rows("baseline", base), rows("fast", fast))[("s", "fast", "variant")]
    assert c.verdict == FASTER
    assert c.delta_pct == pytest.approx(50.0)
    lo, hi = welch_delta(fast, base)
    assert (c.delta_lo, c.delta_hi) == (pytest.approx(lo), pytest.approx(hi))
    assert c.n == c.n_ref == 3 and not c.noisy
    assert c.repeats_needed is None  # decided: nothing more to resolve


def test_slower():
    c = verdicts(rows("baseline", [100.0, 101.0, 99.0]), rows("slow", [80.0, 81.0, 79.5]))
    assert c[("s", "slow", "variant")].verdict == SLOWER


def test_a_single_run_win_that_is_no_significant_change():
    # Boot r0 alone says +3 % (103 vs 100); the second boot shows how far boots scatter.
    base, variant = [100.0, 104.0], [103.0, 102.0]
    c = verdicts(rows("baseline", base), rows("v", variant))[("s", "v", "variant")]
    assert (variant[0] / base[0] - 1) * 100 == pytest.approx(3.0)
    assert c.verdict == SAME
    assert c.delta_lo < 0 < c.delta_hi
    assert c.repeats_needed is not None and c.repeats_needed > 2


def test_one_boot_is_inconclusive_but_shows_the_single_run_delta():
    c = verdicts(rows("baseline", [100.0]), rows("v", [130.0]))[("s", "v", "variant")]
    assert c.verdict == INCONCLUSIVE
    assert c.delta_pct == pytest.approx(30.0)
    assert math.isnan(c.delta_lo) and c.repeats_needed is None


def test_invalid_boots_stay_out_and_are_named():
    # r2 of the variant is client-bound: its 500 must not count.
    c = verdicts(
        rows("baseline", [100.0, 101.0, 99.0]),
        rows("v", [100.5, 99.5, 500.0], valid=[True, True, False]),
    )[("s", "v", "variant")]
    assert c.n == 2 and c.mean == pytest.approx(100.0)
    assert c.verdict == SAME
    assert c.excluded == "r2: client_bound: achieved concurrency 3"


def test_noisy_when_the_cv_across_boots_exceeds_the_threshold():
    c = verdicts(rows("baseline", [100.0, 101.0, 99.0]), rows("v", [90.0, 110.0, 100.0]))
    assert c[("s", "v", "variant")].noisy  # CV 10 %


@pytest.mark.parametrize(
    "low, high, higher_is_better, expected",
    [
        (1.0, 5.0, True, FASTER),
        (1.0, 5.0, False, SLOWER),  # latency went up
        (-5.0, -1.0, True, SLOWER),
        (-5.0, -1.0, False, FASTER),  # latency went down
        (-1.0, 1.0, True, SAME),
        (math.nan, math.nan, True, INCONCLUSIVE),
    ],
)
def test_verdict_of(low, high, higher_is_better, expected):
    assert verdict_of(low, high, 3, 3, higher_is_better) == expected
    assert verdict_of(low, high, 1, 3, higher_is_better) == INCONCLUSIVE


def test_the_margin_and_the_family_decide_faster_and_slower():
    # Significant, +0.6 %: inside a 2 % margin (the identical copy, "slower").
    assert verdict_of(0.03, 1.27, 3, 3, False, 0.6, 2.0) == SMALL
    assert verdict_of(-1.27, -0.03, 3, 3, True, -0.6, 2.0) == SMALL
    # Beyond the margin: decided; not significant across the family: no significant change.
    assert verdict_of(2.5, 15.8, 3, 3, False, 11.3, 5.0) == SLOWER
    assert verdict_of(2.5, 15.8, 3, 3, False, 11.3, 5.0, significant=False) == SAME
    # Without an estimate, the bound nearer zero is the size.
    assert verdict_of(1.0, 9.0, 3, 3, True, math.nan, 2.0) == SMALL


def test_holm_over_a_variants_levels_and_metrics():
    # Three levels: a clear win at 100, the same marginal +3.5 % at 1 and 10 (p = 0.038
    # alone by scipy, beyond the 2 % margin: alone, each would be "faster"). Holm: the
    # smallest p against 0.05 / 3, the next against 0.05 / 2, ...: 100 stays faster; 1 and
    # 10 have adjusted p = 2 × 0.038 = 0.077 and are no significant change.
    base = [100.0, 103.0, 97.0, 101.0, 99.0]
    marginal = [x + 3.5 for x in reversed(base)]
    out = compare(
        pd.DataFrame(
            rows("baseline", base, level=1)
            + rows("v", marginal, level=1)
            + rows("baseline", base, level=10)
            + rows("v", marginal, level=10)
            + rows("baseline", base, level=100)
            + rows("v", [150.0, 151.0, 149.0, 150.5, 149.5], level=100)
        ),
        ANALYSIS,
        ["s"],
        ["baseline", "v"],
        lambda *a: [],
        THROUGHPUT,
    )
    by = {c.level: c for c in out}
    from scipy.stats import ttest_ind

    p1 = ttest_ind(marginal, base, equal_var=False).pvalue
    assert p1 == pytest.approx(0.0384, abs=1e-4)
    assert by[1].p_value == pytest.approx(p1)
    assert by[1].p_holm == by[10].p_holm == pytest.approx(2 * p1)
    assert by[100].p_holm == pytest.approx(3 * by[100].p_value)
    assert by[1].delta_lo > 0  # the interval stays per comparison ...
    assert by[1].verdict == by[10].verdict == SAME  # ... the verdict is the family's
    assert by[100].verdict == FASTER


def test_latency_percentiles_use_the_requests_of_valid_boots():
    def requests(cell, repeat, level, field):
        base = 100.0 if cell[2] == "baseline" else 80.0
        return [base + repeat + k % 7 for k in range(200)]

    df = pd.DataFrame(
        [
            {**r, "median_ttft_ms": 0.0}
            for r in rows("baseline", [1.0, 1.0, 1.0]) + rows("v", [1.0, 1.0, 1.0])
        ]
    )
    metrics = {"median_ttft_ms": Metric("median_ttft_ms", False, ("ttft_ms", 50))}
    out = compare(df, ANALYSIS, ["s"], ["baseline", "v"], requests, metrics)
    (c,) = out
    # Medians by hand: baseline boots 103, 104, 105; variant 83, 84, 85. Welch on the
    # boots' log medians: the ratio of geometric means with its interval.
    la = [math.log(x) for x in (83, 84, 85)]
    lb = [math.log(x) for x in (103, 104, 105)]
    va, vb = statistics.variance(la) / 3, statistics.variance(lb) / 3
    diff = statistics.mean(la) - statistics.mean(lb)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    half = student_t.ppf(0.975, df) * math.sqrt(va + vb)
    assert c.delta_pct == pytest.approx((math.exp(diff) - 1) * 100)
    assert c.delta_pct == pytest.approx((84 / 104 - 1) * 100, abs=0.01)
    assert c.delta_lo == pytest.approx((math.exp(diff - half) - 1) * 100)
    assert c.delta_hi == pytest.approx((math.exp(diff + half) - 1) * 100)
    assert c.verdict == FASTER  # lower latency, by more than the 5 % margin
    assert c.p_holm == pytest.approx(c.p_value)  # a family of one


def test_stacks_are_compared_variant_by_variant_against_the_reference():
    out = verdicts(
        rows("baseline", [100.0, 101.0, 99.0], stack="cu128"),
        rows("baseline", [120.0, 121.0, 119.0], stack="cu130"),
        stacks=("cu128", "cu130"),
    )
    c = out[("cu130", "baseline", "stack")]
    assert (c.compared_stack, c.compared_variant, c.verdict) == ("cu128", "baseline", FASTER)
    assert ("cu128", "baseline", "stack") not in out  # the reference is not compared with itself


def test_words_and_tables():
    comparisons = compare(
        pd.DataFrame(
            rows("baseline", [100.0, 101.0, 99.0], level=1)
            + rows("cb", [100.5, 99.5, 100.0], level=1)
            + rows("baseline", [100.0, 101.0, 99.0], level=10)
            + rows("cb", [340.0, 342.0, 338.0], level=10)
            + rows("baseline", [100.0, 101.0, 99.0], level=256)
            + rows("cb", [420.0, 421.0, 419.0], level=256)
        ),
        ANALYSIS,
        ["s"],
        ["baseline", "cb"],
        lambda *a: [],
        THROUGHPUT,
    )
    frame = to_frame(comparisons)
    (line,) = verdict_views.verdict_lines(frame)
    assert line == "cb (s / m): +240 to +320 % at 10–256 (faster); no significant change at 1"


def test_the_report_and_the_plan_share_one_practical_number_of_boots():
    from servesweep.stats import PRACTICAL_MAX_BOOTS
    from servesweep.sweep import plan_text

    assert plan_text.PRACTICAL_MAX_BOOTS is PRACTICAL_MAX_BOOTS == 20
    row = {
        "stack": "s",
        "model": "m",
        "variant": "v",
        "level": 1,
        "metric": "output_throughput",
        "kind": "variant",
        "compared_stack": "s",
        "compared_variant": "baseline",
        "n": 2,
        "cv": 0.05,
        "cv_ref": 0.05,
        "delta_pct": 1.0,
        "delta_lo": -20.0,
        "delta_hi": 22.0,
        "verdict": SAME,
    }
    frame = pd.DataFrame(
        [
            {**row, "repeats_needed": PRACTICAL_MAX_BOOTS},
            {**row, "level": 10, "repeats_needed": PRACTICAL_MAX_BOOTS + 1},
            {**row, "level": 100, "repeats_needed": None},
        ]
    )
    at_most, past, unknown = verdict_views.resolve_hints(frame, 2.0)
    assert f"{PRACTICAL_MAX_BOOTS} boots per side would resolve" in at_most
    assert "practical number of boots (at most 20" in past
    assert "practical number of boots (at most 20" in unknown


def test_a_significant_change_inside_the_margin_is_no_meaningful_change_in_words():
    base = [100.0, 100.2, 99.8, 100.1, 99.9]
    out = compare(
        pd.DataFrame(rows("baseline", base) + rows("v", [x + 1.0 for x in base])),
        ANALYSIS,
        ["s"],
        ["baseline", "v"],
        lambda *a: [],
        THROUGHPUT,
    )
    (c,) = out
    assert c.p_value < 0.001 and c.delta_pct == pytest.approx(1.0)
    assert c.verdict == SMALL
    (line,) = verdict_views.verdict_lines(to_frame(out))
    assert line == "v (s / m): no meaningful change at 8"
