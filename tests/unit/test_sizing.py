"""The `num_prompts: auto` stop rule against simulated levels with known truth: it stops
where it should, and the estimate it stops on is unbiased."""

import math

import numpy as np
import pytest
import yaml

from servesweep.level import Level
from servesweep.sizing import (
    Batch,
    Precision,
    PromptCount,
    batch_estimate,
    chi2_05,
    measured_requests,
    num_prompts,
    request_stop,
    rse_bound,
    warmup_requests,
)
from servesweep.sweep.benchmark import BenchmarkSettings
from servesweep.sweep.schema import SCHEMA_PATH

TOKENS = 16 * 20  # a batch of 20 requests of 16 output tokens


def run_level(rule: Precision, rng, mean_s: float, cv: float, max_batches: int = 10_000):
    """Batches until the rule stops: each batch's seconds lognormal about mean_s (so the
    true throughput is TOKENS / mean_s), its first batch twice as slow (the ramp)."""
    sigma = math.sqrt(math.log1p(cv**2))
    batches, elapsed = [], 0.0
    for k in range(max_batches):
        d = mean_s * math.exp(rng.normal(-(sigma**2) / 2, sigma)) * (2.0 if k == 0 else 1.0)
        batches.append(Batch(TOKENS, d))
        elapsed += d
        stop = request_stop(rule, batches, elapsed, 20 * len(batches))
        if stop.stop:
            return stop, len(batches)
    raise AssertionError("never stopped")


def test_precision_stop_is_unbiased_and_reaches_its_target():
    # Truth: 320 tokens a batch, mean 1 s; the ratio's truth is TOKENS / E[d] = 320 tok/s.
    rng = np.random.default_rng(7)
    rule = Precision(rse_pct=2.0, min_batches=5, max_s=1e9, max_requests=10**9)
    ests, rses, sizes = [], [], []
    for _ in range(2000):
        stop, n = run_level(rule, rng, 1.0, 0.15)
        assert stop.reason == "precision" and n >= 4  # 3 counted (the bound) at least
        ests.append(stop.estimate.value)
        rses.append(stop.estimate.rse)
        sizes.append(n)
    truth = TOKENS / 1.0
    ests = np.asarray(ests)
    # Unbiased to within 0.5 % (the Monte-Carlo se of the mean is about 0.05 %).
    assert abs(ests.mean() / truth - 1) < 0.005
    assert max(rses) <= 0.02
    # The precision delivered: the estimates' spread about the truth is near the target
    # (2 %: a stop at RSE <= 2 % with a noisy RSE gives a little more, never much more).
    assert 0.01 < ests.std() / truth < 0.03
    # CV 15 % a batch: RSE 2 % needs about (0.15 / 0.02)^2 = 56 batches.
    assert 30 < np.median(sizes) < 90
    # The bound's lucky stops before the minimum, with the true RSE 4-5x its target: rare
    # (about 0.3 %; from 2 batches it would be 1 %).
    assert np.mean(np.asarray(sizes) < rule.min_batches + 1) < 0.01


def test_a_quiet_level_stops_at_the_minimum_and_a_noisy_one_at_the_cap():
    rng = np.random.default_rng(1)
    # CV 1 % a batch: RSE about 0.5 % after 4 counted batches, whose upper bound (x 2.92)
    # is at the 2 % target: the level stops before its 5 counted batches.
    quiet, n = run_level(Precision(min_batches=5, max_s=1e9), rng, 1.0, 0.01)
    assert quiet.reason == "precision" and 4 <= n <= 5  # 3-4 counted after the first
    # Batches of 0.975 s and 1.025 s in turn: the bound never at the 2 % target before 5
    # counted batches (3.2 % at 4), the estimate (1.2 %) at the fifth: 6 batches.
    batches = [Batch(TOKENS, 2.0)]
    for k in range(1, 8):
        batches.append(Batch(TOKENS, 1 + 0.025 * (-1) ** k))
        if request_stop(Precision(min_batches=5, max_s=1e9), batches, k, 20 * k).stop:
            break
    assert len(batches) == 6
    noisy, n = run_level(Precision(min_batches=5, max_s=30.0), rng, 1.0, 0.8)
    assert noisy.reason == "cap" and noisy.estimate.rse > 0.02
    many, n = run_level(Precision(min_batches=5, max_s=1e9, max_requests=200), rng, 1.0, 0.8)
    assert many.reason == "max_requests" and n == 10  # 20 requests a batch


def test_the_ratio_estimators_se_matches_the_spread_of_its_estimates():
    # Fixed 40 batches, tokens and seconds both varying: the mean reported RSE against the
    # spread of the estimates over 4000 levels (independent of the code's formula).
    rng = np.random.default_rng(3)
    est, rse = [], []
    for _ in range(4000):
        d = rng.gamma(4.0, 0.25, 41)
        x = TOKENS * rng.uniform(0.8, 1.2, 41)
        e = batch_estimate([Batch(a, b) for a, b in zip(x, d, strict=True)])
        est.append(e.value)
        rse.append(e.rse)
    spread = np.std(est) / np.mean(est)
    assert np.mean(rse) == pytest.approx(spread, rel=0.1)
    assert batch_estimate([Batch(TOKENS, 1.0)] * 2).rse is None  # one counted batch


def test_precision_defaults_are_the_schemas_and_auto_keeps_the_count_rule_apart():
    bench = yaml.safe_load(SCHEMA_PATH.read_text())["properties"]["benchmark"]["properties"]
    props = bench["precision"]["properties"]
    schema = {k: v["default"] for k, v in props.items() if "default" in v}
    given = {k: v for k, v in Precision()._asdict().items() if v is not None}
    assert schema == given and "boot_cv_pct" in bench["precision"]["properties"]
    rule = PromptCount()
    assert [num_prompts(rule, Level.parse(c)) for c in (1, 10, 64)] == [20, 20, 64]
    count = bench["num_prompts"]["oneOf"][1]["properties"]
    assert {k: v["default"] for k, v in count.items()} == PromptCount()._asdict()
    auto = BenchmarkSettings.of(
        {"num_prompts": "auto", "precision": {"max_requests": 300}, "warmup": "auto"}
    )
    assert measured_requests(auto, Level.parse(64)) == 300
    assert warmup_requests(auto, Level.parse(64)) == 64
    assert Precision().batch_size(Level.parse(1)) == 10
    assert Precision().batch_size(Level.parse(64)) == 64


def cost_optimal_stop_s(
    rule: Precision, level: Level | None, rng: np.random.Generator, c: float, c_b: float
) -> float:
    """Seconds a level of batches of mean 1 s and CV c runs under `rule` before it stops
    (the cost-optimal target, with the boot's share c_b), batches drawn from `rng`."""
    sigma = math.sqrt(math.log1p(c**2))
    batches, elapsed = [], 0.0
    while True:
        d = math.exp(rng.normal(-(sigma**2) / 2, sigma))
        batches.append(Batch(TOKENS, d))
        elapsed += d
        stop = request_stop(rule, batches, elapsed, 20 * len(batches), c_b, level)
        if stop.stop:
            assert stop.reason == "cost_optimal"
            return elapsed


def test_a_stated_boot_scatter_stops_a_level_at_its_cost_optimal_length():
    # Truth: batches of mean 1 s and CV c, so a level of t seconds has a sampling variance
    # c^2 / t (relative). With a boot's share c_b and boot scatter s_b, the length that
    # minimises (c_b + t) (s_b^2 + c^2 / t) is found here by brute force over a grid, not
    # from the rule's formula; the rule's median stop must land near it, longer where boots
    # scatter less.
    rng = np.random.default_rng(11)
    c, c_b = 0.3, 60.0
    grid = np.linspace(1.0, 2000.0, 200_000)
    stops = {}
    for s_b in (0.005, 0.02, 0.05):
        best = grid[np.argmin((c_b + grid) * (s_b**2 + c**2 / grid))]
        rule = Precision(boot_cv_pct=s_b * 100, min_batches=5, max_s=1e9, max_requests=10**9)
        times = [cost_optimal_stop_s(rule, None, rng, c, c_b) for _ in range(300)]
        stops[s_b] = float(np.median(times))
        floor = rule.min_batches + 1  # the rule never stops before its minimum
        assert stops[s_b] == pytest.approx(max(best, floor), rel=0.3), (s_b, best)
    assert stops[0.005] > 3 * stops[0.02] > 3 * stops[0.05] / 2
    # Without the boot's cost the stated scatter gives no target: only the caps stop.
    capped = request_stop(
        Precision(boot_cv_pct=2.0, max_s=10.0), [Batch(TOKENS, 1.0)] * 20, 20.0, 400, None
    )
    assert capped.reason == "cap"


def test_the_rse_bound_is_chi2s_and_a_lucky_spread_stops_at_most_5_percent():
    from scipy.stats import chi2

    for df in range(1, 60):
        assert chi2_05(df) == pytest.approx(chi2.ppf(0.05, df), rel=1e-3 if df <= 10 else 3e-3)
    # Levels whose true RSE after k counted batches is exactly the target (batch seconds
    # lognormal, CV 20 %): the bound is below it at most 5 % of the time (the estimate
    # alone about half the time).
    rng = np.random.default_rng(5)
    cv = 0.2
    sigma = math.sqrt(math.log1p(cv**2))
    for k in (2, 3, 4, 8):
        below_bound = below_estimate = 0
        for _ in range(4000):
            d = np.exp(rng.normal(-(sigma**2) / 2, sigma, k + 1))
            est = batch_estimate([Batch(TOKENS, x) for x in d])
            truth = cv / math.sqrt(k)  # the ratio's RSE over k batches of CV 20 %
            below_bound += rse_bound(est) <= truth
            below_estimate += est.rse <= truth
        assert below_bound / 4000 < 0.075, k  # 0.05 and its Monte-Carlo error (0.0034)
        assert below_estimate / 4000 > 0.4, k
    assert rse_bound(batch_estimate([Batch(TOKENS, 1.0)] * 2)) is None  # one counted


def test_a_per_level_boot_scatter_stops_each_level_at_its_own_cost_optimal_length():
    # The H100's σ_B: ~1 % at levels 1 and 10, ~8 % at 256 (docs/sglang-h200.md, lease C).
    # Each level under the map stops exactly where one number, its own σ_B, stops it on the
    # same batches; and 256 (more boot scatter: a boot's own sampling matters less) stops
    # far sooner than 1 on batches that scatter alike.
    limits = {"min_batches": 5, "max_s": 1e9, "max_requests": 10**9}
    per_level = Precision.of({"precision": {"boot_cv_pct": {1: 1.0, 10: 1.0, 256: 8.0}, **limits}})
    # Hashable, and the same rule whatever the keys' order or spelling (a spec's JSON: "1").
    as_json = {"boot_cv_pct": {"256": 8.0, "1": 1.0, "10": 1.0}, **limits}
    assert hash(per_level) == hash(Precision.of({"precision": as_json}))
    c, c_b = 0.3, 60.0
    stops: dict[int, list[float]] = {1: [], 256: []}
    for seed in range(200):
        for value, own in ((1, 1.0), (256, 8.0)):
            level = Level.parse(value)
            alone = Precision(boot_cv_pct=own, **limits)
            got = cost_optimal_stop_s(per_level, level, np.random.default_rng(seed), c, c_b)
            assert got == cost_optimal_stop_s(alone, level, np.random.default_rng(seed), c, c_b)
            stops[value].append(got)
    assert np.median(stops[256]) * 5 < np.median(stops[1])


def test_a_per_level_boot_scatter_is_read_by_level_key():
    # Keys as the sweep file writes levels (YAML ints) or as a spec's JSON does (strings).
    for given in ({1: 1.0, 10: 1.5, 256: 8}, {"1": 1.0, "10": 1.5, "256": 8}):
        rule = Precision.of({"precision": {"boot_cv_pct": given}})
        assert rule.boot_cv_pct == (("1", 1.0), ("10", 1.5), ("256", 8.0))
        assert [rule.boot_cv(Level.parse(v)) for v in (1, 10, 256)] == [1.0, 1.5, 8.0]
        # A capacity-search probe between two levels: the one below's σ_B.
        assert rule.boot_cv(Level.parse(64)) == 1.5 and rule.boot_cv(Level.parse(999)) == 8.0
    one = Precision.of({"precision": {"boot_cv_pct": 2.0}})
    assert one.boot_cv(Level.parse(256)) == one.boot_cv(None) == 2.0
    assert Precision().boot_cv(Level.parse(1)) is None
    with pytest.raises(ValueError, match="needs the level"):
        rule.boot_cv(None)
