"""Verdicts against the baseline and across stacks: every branch, with the interval worked
out independently (scipy's pooled t-test, the pooled variance and Holm by hand), not by the
module under test."""

import math
import statistics

import numpy as np
import pandas as pd
import pytest
from fixtures.verdict_sim import summary_rows as rows
from scipy import stats as sps

from servesweep.results.judge.board import (
    PRIMARY,
    SECONDARY,
    Judging,
    Metric,
    judged_first_boots,
    read_first_boots,
    write_first_boots,
)
from servesweep.results.judge.verdicts import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    SMALL,
    compare,
    to_frame,
    verdict_of,
)
from servesweep.results.judge.verdicts import (
    judge as judge_comparisons,
)
from servesweep.results.report import verdict_views

ANALYSIS = {
    "baseline": "baseline",
    "noise_cv": 0.05,
    "resolve_pct": 2.0,
    "margin_throughput_pct": 2.0,
    "margin_latency_pct": 5.0,
    "first_boot": "keep",
}
THROUGHPUT = {"output_throughput": Metric("output_throughput", True)}


def judge(*groups, stacks=("s",), metrics=THROUGHPUT, **analysis):
    df = pd.DataFrame([r for g in groups for r in g])
    variants = list(dict.fromkeys(df["variant"]))
    out = compare(df, {**ANALYSIS, **analysis}, list(stacks), variants, lambda *a: [], metrics)
    return out


def by_variant(out):
    return {(c.stack, c.variant, c.kind): c for c in out}


def pct(x):
    return (math.exp(x) - 1) * 100


def test_faster_by_the_pooled_t_test_on_logs():
    # Two configurations: the pooled scatter is Student's two-sample test with equal
    # variances on the logs (scipy's ttest_ind), as a ratio of geometric means.
    base, fast = [100.0, 101.0, 99.0], [150.0, 152.0, 148.0]
    c = by_variant(judge(rows("baseline", base), rows("fast", fast)))[("s", "fast", "variant")]
    t = sps.ttest_ind(np.log(fast), np.log(base), equal_var=True)
    ci = t.confidence_interval(0.95)
    assert c.verdict == FASTER and c.family == PRIMARY and c.variance == "pooled"
    assert c.delta_pct == pytest.approx(pct(np.log(fast).mean() - np.log(base).mean()))
    assert (c.delta_lo, c.delta_hi) == (pytest.approx(pct(ci.low)), pytest.approx(pct(ci.high)))
    assert c.p_value == pytest.approx(t.pvalue) and c.df == 4
    assert c.mean == pytest.approx(statistics.geometric_mean(fast))
    assert c.n == c.n_ref == 3 and not c.noisy
    assert c.repeats_needed is None  # decided: nothing more to resolve


def test_the_scatter_is_pooled_over_every_configuration_at_the_level():
    base, v, other = [100.0, 104.0], [130.0, 126.0], [90.0, 93.0]
    out = by_variant(judge(rows("baseline", base), rows("v", v), rows("other", other)))
    c = out[("s", "v", "variant")]
    logs = [np.log(x) for x in (base, v, other)]
    ss = sum(((y - y.mean()) ** 2).sum() for y in logs)
    s2, df = ss / 3, 3  # three configurations, one df each
    se = math.sqrt(s2 * (1 / 2 + 1 / 2))
    diff = logs[1].mean() - logs[0].mean()
    half = sps.t.ppf(0.975, df) * se
    assert c.df == df and c.variance == "pooled"
    assert (c.delta_lo, c.delta_hi) == (
        pytest.approx(pct(diff - half)),
        pytest.approx(pct(diff + half)),
    )
    assert c.p_value == pytest.approx(2 * sps.t.sf(abs(diff / se), df))
    # Welch on the two alone would have had no df to speak of; here +26.7 % decides.
    assert c.verdict == FASTER


def test_a_configuration_that_scatters_more_is_judged_by_its_own_scatter():
    # Four levels, five configurations; `wild`'s boots scatter 12 times more than the
    # others' at every level: the guard sends it to its scatter ratio times the rest's.
    rng = np.random.default_rng(3)
    groups, truth = [], {}
    for name, cv in [("baseline", 0.01), ("a", 0.01), ("b", 0.01), ("c", 0.01), ("wild", 0.12)]:
        for level in (1, 4, 16, 64):
            values = list(100 * np.exp(rng.normal(0, cv, 3)))
            truth[(name, level)] = values
            groups.append(rows(name, values, level=level))
    out = judge(*groups)
    wild = [c for c in out if c.variant == "wild"]
    calm = [c for c in out if c.variant == "a"]
    assert {c.variance for c in wild} == {"own"} and {c.variance for c in calm} == {"pooled"}
    # By hand at level 16: the ratio over levels, the rest's variance, and their df.
    logs = {k: np.log(v) for k, v in truth.items()}

    def ss(x):
        return float(((x - x.mean()) ** 2).sum())

    rest_var, std = {}, 0.0
    for level in (1, 4, 16, 64):
        rest = [ss(logs[(n, level)]) for n in ("baseline", "a", "b", "c")]
        rest_var[level] = sum(rest) / 8
        std += ss(logs[("wild", level)]) / rest_var[level]
    ratio = std / 8
    var_wild, df_wild = ratio * rest_var[16], 1 / (1 / 8 + 1 / 8)
    pool = sum(ss(logs[(n, 16)]) for n in ("baseline", "a", "b", "c", "wild")) / 10
    qa, qb = var_wild / 3, pool / 3
    df = (qa + qb) ** 2 / (qa**2 / df_wild + qb**2 / 10)
    (c16,) = [c for c in wild if c.level == 16]
    assert c16.df == pytest.approx(df)
    diff = logs[("wild", 16)].mean() - logs[("baseline", 16)].mean()
    assert c16.p_value == pytest.approx(2 * sps.t.sf(abs(diff) / math.sqrt(qa + qb), df))


def test_slower():
    out = judge(rows("baseline", [100.0, 101.0, 99.0]), rows("slow", [80.0, 81.0, 79.5]))
    assert by_variant(out)[("s", "slow", "variant")].verdict == SLOWER


def test_a_single_run_win_that_is_no_significant_change():
    # Boot r0 alone says +3 % (103 vs 100); the second boot shows how far boots scatter.
    base, variant = [100.0, 104.0], [103.0, 102.0]
    c = by_variant(judge(rows("baseline", base), rows("v", variant)))[("s", "v", "variant")]
    assert (variant[0] / base[0] - 1) * 100 == pytest.approx(3.0)
    assert c.verdict == SAME
    assert c.delta_lo < 0 < c.delta_hi
    assert c.repeats_needed is not None and c.repeats_needed > 2


def test_one_boot_a_side_borrows_the_scatter_of_the_others():
    # No configuration has two boots: nothing to judge by.
    c = by_variant(judge(rows("baseline", [100.0]), rows("v", [130.0])))[("s", "v", "variant")]
    assert c.verdict == INCONCLUSIVE
    assert c.delta_pct == pytest.approx(30.0)
    assert math.isnan(c.delta_lo) and c.repeats_needed is None
    # A third configuration with two boots gives the pool one df: one boot a side is
    # judged on it (the premise: configurations scatter alike).
    out = by_variant(
        judge(rows("baseline", [100.0]), rows("v", [130.0]), rows("w", [100.0, 101.0]))
    )
    c = out[("s", "v", "variant")]
    s2 = statistics.variance([math.log(100), math.log(101)])  # 1 df
    half = sps.t.ppf(0.975, 1) * math.sqrt(2 * s2)
    assert c.df == 1 and c.delta_lo == pytest.approx(pct(math.log(1.3) - half))


def test_invalid_boots_stay_out_and_are_named():
    # r2 of the variant is client-bound: its 500 must not count.
    c = by_variant(
        judge(
            rows("baseline", [100.0, 101.0, 99.0]),
            rows("v", [100.5, 99.5, 500.0], valid=[True, True, False]),
        )
    )[("s", "v", "variant")]
    assert c.n == 2 and c.mean == pytest.approx(math.sqrt(100.5 * 99.5))
    assert c.verdict == SAME
    assert c.excluded == "r2: client_bound: achieved concurrency 3"


def test_noisy_when_a_cells_own_scatter_exceeds_the_threshold():
    out = judge(rows("baseline", [100.0, 101.0, 99.0]), rows("v", [90.0, 110.0, 100.0]))
    assert by_variant(out)[("s", "v", "variant")].noisy  # own CV about 10 %


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
    assert verdict_of(low, high, 0, 3, higher_is_better) == INCONCLUSIVE


def test_the_margin_and_the_family_decide_faster_and_slower():
    # Significant, +0.6 %: inside a 2 % margin (the identical copy, "slower").
    assert verdict_of(0.03, 1.27, 3, 3, False, 0.6, 2.0) == SMALL
    assert verdict_of(-1.27, -0.03, 3, 3, True, -0.6, 2.0) == SMALL
    # Beyond the margin: decided; not significant across the family: no significant change.
    assert verdict_of(2.5, 15.8, 3, 3, False, 11.3, 5.0) == SLOWER
    assert verdict_of(2.5, 15.8, 3, 3, False, 11.3, 5.0, significant=False) == SAME
    # Without an estimate, the bound nearer zero is the size.
    assert verdict_of(1.0, 9.0, 3, 3, True, math.nan, 2.0) == SMALL


def test_holm_over_the_objective_at_the_counted_levels_only():
    # Three levels: a clear win at 100, the same marginal +3.5 % at 1 and 10. Latency is
    # measured too but is a family of its own: Holm's factors are the 3 levels, not 3 x 2.
    base = [100.0, 103.0, 97.0, 101.0, 99.0]
    marginal = [x + 3.5 for x in reversed(base)]
    lat = {"median_ttft_ms": 50.0}
    groups = []
    for level, v in [(1, marginal), (10, marginal), (100, [x * 1.5 for x in base])]:
        groups += [rows("baseline", base, level=level, **lat), rows("v", v, level=level, **lat)]
    metrics = {**THROUGHPUT, "median_ttft_ms": Metric("median_ttft_ms", False, ("ttft_ms", 50))}
    out = judge(*groups, metrics=metrics)
    primary = {c.level: c for c in out if c.metric == "output_throughput"}
    assert {c.family for c in primary.values()} == {PRIMARY}
    assert {c.family for c in out if c.metric == "median_ttft_ms"} == {SECONDARY}
    # By hand: each level's pooled test over its two configurations (8 df), then Holm.
    p = {}
    for level, c in primary.items():
        a = [r["output_throughput"] for r in groups[2 * list(primary).index(level) + 1]]
        p[level] = sps.ttest_ind(np.log(a), np.log(base), equal_var=True).pvalue
        assert c.p_value == pytest.approx(p[level])
    order = sorted(p, key=p.get)
    holm = {order[0]: 3 * p[order[0]]}
    holm[order[1]] = max(holm[order[0]], 2 * p[order[1]])
    holm[order[2]] = max(holm[order[1]], p[order[2]])
    for level, c in primary.items():
        assert c.p_holm == pytest.approx(min(1.0, holm[level]))
    assert primary[1].delta_lo > 0  # the interval stays per comparison ...
    assert primary[1].verdict == primary[10].verdict == SAME  # ... the verdict is the family's
    assert primary[100].verdict == FASTER
    # A counted-levels objective moves level 1 out of the primary family.
    out = judge(*groups, metrics=metrics, levels=[10, 100])
    fam = {(c.metric, c.level): c.family for c in out}
    assert fam[("output_throughput", 1)] == SECONDARY
    assert fam[("output_throughput", 10)] == PRIMARY


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
    (c,) = compare(
        df, Judging(objective="median_ttft_ms"), ["s"], ["baseline", "v"], requests, metrics
    )
    # Medians by hand: baseline boots 103, 104, 105; variant 83, 84, 85; pooled on logs.
    la, lb = np.log([83, 84, 85]), np.log([103, 104, 105])
    t = sps.ttest_ind(la, lb, equal_var=True)
    ci = t.confidence_interval(0.95)
    assert c.delta_pct == pytest.approx(pct(la.mean() - lb.mean()))
    assert c.delta_pct == pytest.approx(
        (math.exp(np.log([83, 84, 85]).mean()) / math.exp(lb.mean()) - 1) * 100
    )
    assert (c.delta_lo, c.delta_hi) == (pytest.approx(pct(ci.low)), pytest.approx(pct(ci.high)))
    assert c.verdict == FASTER  # lower latency, by more than the 5 % margin
    assert c.p_holm == pytest.approx(c.p_value)  # a family of one


def test_stacks_are_compared_variant_by_variant_against_the_reference():
    out = by_variant(
        judge(
            rows("baseline", [100.0, 101.0, 99.0], stack="cu128"),
            rows("baseline", [120.0, 121.0, 119.0], stack="cu130"),
            stacks=("cu128", "cu130"),
        )
    )
    c = out[("cu130", "baseline", "stack")]
    assert (c.compared_stack, c.compared_variant, c.verdict) == ("cu128", "baseline", FASTER)
    assert ("cu128", "baseline", "stack") not in out  # the reference is not compared with itself


def test_words_and_tables_read_the_primary_family():
    groups = []
    for level, cb in [
        (1, [100.5, 99.5, 100.0]),
        (10, [340.0, 342.0, 338.0]),
        (256, [420.0, 421.0, 419.0]),
    ]:
        groups += [rows("baseline", [100.0, 101.0, 99.0], level=level), rows("cb", cb, level=level)]
    frame = to_frame(judge(*groups))
    (line,) = verdict_views.verdict_lines(frame)
    assert line == "cb (s / m): +240 to +320 % at 10–256 (faster); no significant change at 1"
    # A range names only levels that lie together: faster at 1 and 256, not at 10 between.
    apart = frame.copy()
    apart.loc[apart["level"].map(str) == "1", ["verdict", "delta_pct"]] = [FASTER, 50.0]
    apart.loc[apart["level"].map(str) == "10", "verdict"] = "no significant change"
    (line,) = verdict_views.verdict_lines(apart)
    assert line.startswith("cb (s / m): +50 to +320 % at 1, 256 (faster)"), line
    # A secondary row never speaks in that line, however it is judged.
    secondary = frame.copy()
    secondary["family"] = SECONDARY
    assert verdict_views.verdict_lines(secondary) == []


def test_a_five_fold_speed_up_on_a_noisy_host_is_faster_at_three_boots():
    # The README's default on a loaded 2-core box: CV about 25 % across boots, continuous
    # batching 4-6 x faster from 10 streams on. Welch and Holm over 20 comparisons called it
    # "no significant change" everywhere. Pooled on logs, Holm over the 4 levels: faster at
    # 3 boots a cell; at 2 (2 df a level) the smallest Holm step needs t > 8.9: not yet.
    base = {
        1: [150.0, 118.0, 171.0], 10: [160.0, 121.0, 99.0],
        256: [151.0, 205.0, 122.0], 1024: [163.0, 120.0, 198.0],
    }  # fmt: skip
    cb = {
        1: [140.0, 180.0, 121.0], 10: [820.0, 610.0, 540.0],
        256: [780.0, 1050.0, 600.0], 1024: [490.0, 640.0, 860.0],
    }  # fmt: skip
    groups = [rows("baseline", v, level=lv) for lv, v in base.items()]
    groups += [rows("continuous-batching", v, level=lv) for lv, v in cb.items()]
    out = {c.level: c for c in judge(*groups)}
    assert [out[lv].verdict for lv in (10, 256, 1024)] == [FASTER] * 3
    assert out[1].verdict == SAME
    assert all(out[lv].delta_lo > -100 for lv in out)  # ratio intervals: never below -100 %
    two = [pd.DataFrame(g).query("repeat < 2").to_dict("records") for g in groups]
    assert {c.verdict for c in judge(*two) if c.level != 1} != {FASTER}


def test_first_boots_that_differ_are_left_out_when_two_boots_remain():
    # Every configuration's first boot 40 % slower at level 16 (kernels compiled on first
    # use); later boots scatter 1 %. With 3 boots a cell auto drops r0 there.
    rng = np.random.default_rng(5)
    groups = []
    for name, truth in [("baseline", 1.0), ("a", 1.1), ("b", 1.0), ("c", 1.0)]:
        for level in (1, 16):
            values = list(100 * truth * np.exp(rng.normal(0, 0.01, 3)))
            if level == 16:
                values[0] *= 0.6
            groups.append(rows(name, values, level=level))
    out = judge(*groups, first_boot="auto")
    at16 = [c for c in out if c.level == 16]
    at1 = [c for c in out if c.level == 1]
    assert {c.first_boot for c in at16} == {"dropped"} and {c.n for c in at16} == {2}
    assert {c.first_boot for c in at1} == {"kept"} and {c.n for c in at1} == {3}
    assert by_variant(at16)[("s", "a", "variant")].verdict == FASTER
    # The same with two boots a cell: r0 cannot go (one boot would be left), so it stays.
    groups2 = [pd.DataFrame(g).query("repeat < 2").to_dict("records") for g in groups]
    out2 = judge(*groups2, first_boot="auto")
    assert {c.first_boot for c in out2 if c.level == 16} == {"kept"}
    frame = pd.DataFrame([r for g in groups2 for r in g])
    (row16,) = [
        r
        for r in verdict_views.first_boot_rows(
            judged_first_boots(frame, Judging.of({**ANALYSIS, "first_boot": "auto"}))
        )
        if r["level"] == 16
    ]
    assert row16["action"] == "kept" and "fewer than 2 boots" in row16["why"]


def test_first_boot_decisions_survive_their_file(tmp_path):
    # first_boots.csv carries the judge's decisions to the report: every level, with and
    # without a contrast, a rate level's inf, read back equal.
    rng = np.random.default_rng(3)
    groups = []
    for name in ("baseline", "a"):
        for level in (1, 16, "inf"):
            values = list(100 * np.exp(rng.normal(0, 0.01, 3)))
            if level == 16:
                values[0] *= 0.6
            groups.append(rows(name, values, level=level))
    groups.append(rows("lone", [100.0], level=64))  # one boot: no first/later contrast
    frame = pd.DataFrame([r for g in groups for r in g])
    first = judged_first_boots(frame, Judging.of({**ANALYSIS, "first_boot": "auto"}))
    assert first[16].dropped and not first[1].dropped and first[64].contrast is None
    write_first_boots(first, tmp_path / "first_boots.csv")
    back = read_first_boots(tmp_path / "first_boots.csv")
    assert list(back) == list(first) and math.inf in back
    for level, fb in first.items():
        got = back[level]
        assert (got.dropped, got.why) == (fb.dropped, fb.why)
        if fb.contrast is None:
            assert got.contrast is None
        else:
            assert got.contrast == pytest.approx(fb.contrast, rel=1e-12)
    assert read_first_boots(tmp_path / "absent.csv") == {}


def test_repeats_needed_come_from_the_pooled_scatter():
    # Five configurations at CV ~5 %, 2 boots each: the pooled scatter (5 df) says how
    # many boots every cell needs to settle ±max(2 %, half the change seen).
    rng = np.random.default_rng(11)
    logs = {n: rng.normal(0, 0.05, 2) for n in ("baseline", "v", "w", "x", "y")}
    groups = [rows(n, list(100 * np.exp(y))) for n, y in logs.items()]
    out = by_variant(judge(*groups))
    c = out[("s", "v", "variant")]
    assert c.verdict == SAME
    s2 = sum(((y - y.mean()) ** 2).sum() for y in logs.values()) / 5
    target = max(2.0, abs(math.expm1(abs(math.log1p(c.delta_pct / 100)) / 2)) * 100)
    n = next(
        n
        for n in range(2, 1001)
        if sps.t.ppf(1 - 0.05 / 2, 5 * (n - 1)) * math.sqrt(s2 * 2 / n) <= math.log1p(target / 100)
    )
    assert c.repeats_needed == n


def unsettled_row(n: int, cv: float, **delta) -> dict:
    """A primary verdicts.csv row at level 1 that did not settle: n boots a side, both
    sides at CV `cv`, the Δ and its bounds in `delta` (delta_pct, delta_lo, delta_hi)."""
    return {
        "stack": "s", "model": "m", "variant": "v", "level": 1, "metric": "output_throughput",
        "kind": "variant", "compared_stack": "s", "compared_variant": "baseline", "n": n,
        "n_ref": n, "cv": cv, "cv_ref": cv, **delta, "verdict": SAME, "family": PRIMARY,
        "df": 6, "variance": "pooled",
    }  # fmt: skip


def test_the_report_and_the_plan_share_one_practical_number_of_boots():
    from servesweep.stats import PRACTICAL_MAX_BOOTS
    from servesweep.sweep import plan_text

    assert plan_text.PRACTICAL_MAX_BOOTS is PRACTICAL_MAX_BOOTS == 20
    row = unsettled_row(n=2, cv=0.05, delta_pct=1.0, delta_lo=-20.0, delta_hi=22.0)
    frame = pd.DataFrame(
        [
            {**row, "repeats_needed": PRACTICAL_MAX_BOOTS},
            {**row, "level": 10, "repeats_needed": PRACTICAL_MAX_BOOTS + 1},
            {**row, "level": 100, "repeats_needed": None, "df": math.nan},
        ]
    )
    at_most, past, none = verdict_views.resolve_hints(frame, 2.0)
    assert f"set benchmark.repeats: {PRACTICAL_MAX_BOOTS} to settle" in at_most
    assert "more than 20 boots a side" in past and "quieten the host" in past
    assert "no boot scatter to judge by" in none and "quieten" not in none


def test_under_staged_repeats_the_hint_raises_the_stages_max_not_a_fixed_count():
    """A staged sweep (`repeats: auto` or {min, max}) told 'set benchmark.repeats: 20' would
    turn into 20 fixed boots for every cell: the hint names the stages' max instead, and
    where the boots needed are within it, that the stages stopped it and how."""
    from servesweep.sweep.stages import repeats_rule

    row = unsettled_row(n=4, cv=0.10, delta_pct=3.0, delta_lo=-12.0, delta_hi=20.0)
    frame = pd.DataFrame(
        [
            {**row, "repeats_needed": 12, "stage_outcome": "cap"},
            {**row, "level": 10, "repeats_needed": 5, "stage_outcome": "out of reach"},
        ]
    )
    auto = repeats_rule("auto")  # min 2, max 6
    above, within = verdict_views.resolve_hints(frame, 2.0, auto)
    assert "raise benchmark.repeats max to 12 (now 6) to settle" in above
    assert "set benchmark.repeats" not in above + within
    assert "5 boots a side would settle" in within and within.endswith("stopped it: out of reach")
    # Fixed repeats keep the fixed wording.
    fixed, _ = verdict_views.resolve_hints(frame, 2.0, repeats_rule(3))
    assert "set benchmark.repeats: 12 to settle" in fixed


def test_a_significant_change_inside_the_margin_is_no_meaningful_change_in_words():
    base = [100.0, 100.2, 99.8, 100.1, 99.9]
    out = judge(rows("baseline", base), rows("v", [x + 1.0 for x in base]))
    (c,) = out
    assert c.p_value < 0.001 and c.delta_pct == pytest.approx(1.0, abs=0.01)
    assert c.verdict == SMALL
    (line,) = verdict_views.verdict_lines(to_frame(out))
    assert line == "v (s / m): no meaningful change at 8"


def test_a_goodput_objective_is_primary_and_the_latencies_stay_secondary():
    lat = {"median_ttft_ms": 50.0, "goodput_output_throughput": 0.0}
    base, fast = [100.0, 101.0, 99.0], [150.0, 152.0, 148.0]
    groups = [
        [{**r, "goodput_output_throughput": r["output_throughput"]} for r in rows(v, x, **lat)]
        for v, x in (("baseline", base), ("fast", fast))
    ]
    metrics = {**THROUGHPUT, "median_ttft_ms": Metric("median_ttft_ms", False, ("ttft_ms", 50))}
    out = judge(*groups, metrics=metrics, objective="goodput_output_throughput")
    fam = {c.metric: c.family for c in out}
    assert fam == {
        "goodput_output_throughput": PRIMARY,
        "output_throughput": SECONDARY,
        "median_ttft_ms": SECONDARY,
    }
    assert (
        by_variant([c for c in out if c.family == PRIMARY])[("s", "fast", "variant")].verdict
        == FASTER
    )


def test_an_unbounded_interval_still_gets_a_number_of_boots():
    # CI's shapes tier: two boots, a Satterthwaite df near zero, an interval from 0 to
    # +inf. The judge must size boots for it (its own scatter), not take log(0).
    from servesweep.results.judge.verdicts import _needed
    from servesweep.stats import Contrast

    c = Contrast(0.1, 5.0, 0.05, "own", 2, 2)
    assert c.interval().low == 0.0 and c.interval().high == math.inf
    n = _needed(None, ("s", "m", "v", 8), c, 2.0, 1)
    assert n is not None and n > 2


def test_bare_comparisons_are_judged_as_the_pairs_are():
    # judge() takes bare Comparisons too (a Comparison is a NamedTuple, so a tuple: it was
    # unpacked as a pair and failed).
    out = judge(rows("baseline", [100.0, 101.0, 99.0]), rows("fast", [130.0, 131.0, 129.0]))
    again = judge_comparisons(out, THROUGHPUT)
    assert [(c.variant, c.verdict, c.p_holm) for c in again] == [
        (c.variant, c.verdict, c.p_holm) for c in out
    ]
    assert by_variant(again)[("s", "fast", "variant")].verdict == FASTER
