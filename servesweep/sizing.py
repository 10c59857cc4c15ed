"""How many requests a level sends: the one home of the rule.

`benchmark.num_prompts` is either a count rule, clamp(per_level × level, min, max) (the
default: `max(20, level)` measured requests at a concurrency level), or `auto`: the level
keeps sending until its own throughput estimate is precise enough (`request_stop`), within
a time cap and a request cap (`benchmark.precision`). Before the measured requests every
level sends an unrecorded warm-up (`warmup_requests`).

The `auto` stop rule, and why it does not bias the estimate:

- **Batch means** (Law & Kelton, *Simulation Modeling and Analysis*, ch. 9): the measured
  requests are cut, in the order they finish, into consecutive batches of B requests (B =
  max(level, MIN_BATCH_REQUESTS) at a concurrency level: at least one full wave, so that
  consecutive batches are close to independent). Batch i carries its output tokens x_i and
  its seconds d_i (from the end of batch i−1 to its own end). The throughput estimate is
  the ratio Σx / Σd, as the level's own output throughput is; its standard error is the
  ratio estimator's, √(Σ(x_i − R d_i)² / (k(k − 1))) / mean(d), and its relative standard
  error (RSE) se / R.
- **A steady window**: the first batch (the ramp from an empty server to `level` in
  flight) is counted in no estimate of the rule.
- **A minimum**: no stop on the RSE's estimate before `min_batches` counted batches (the
  variance of a few batch means is itself too noisy to stop on: with 2 a lucky small
  spread stops early, and early stops on a ratio are what bias it). Before it a level
  stops only where the RSE's one-sided upper 95 % bound is at the target (`rse_bound`:
  the estimate × √((k − 1) / χ²₀.₀₅,ₖ₋₁), 4.42 / 2.92 × at 3 / 4 batches), so at each such
  look a lucky spread stops it at most 5 % of the time where the true RSE is at the target,
  and far less where it is above (0.3 % at 4x; not from 2 batches, whose 1 df stops 1 % of
  levels 5x above the target: tests/unit/test_sizing.py). What it buys: a quiet level of
  many streams stops after 4-5 waves, not `min_batches` + 1.
- **Looks at batch boundaries only**: the rule is asked once per finished batch, never
  between, so a stop never cuts a batch.
- **Caps**: the measured phase's seconds (`max_s`) and requests (`max_requests`); whichever
  comes first ends the level (`stop_reason` cap / max_requests) and the summary records
  the RSE reached.

The target, `rse_pct` (2 % unless set), or, where the sweep states its boots' own scatter
(`precision.boot_cv_pct`, σ_B: the report's variance components give it), the cost-optimal
length of Kalibera & Jones (`cost_optimal_per_boot`) read in seconds: n boots of a level
that runs t seconds after a boot's share c_b of start-up cost n (c_b + t) and give a
variance (σ_B² + v / t) / n, v / t being the level's own sampling variance (RSE²); the
product is least at t² = c_b v / σ_B², that is where RSE² = σ_B² t / c_b. So the level
stops (`stop_reason` cost_optimal) at the first batch boundary where RSE ≤ σ_B √(t / c_b):
its sampling is then as large a share of a boot's variance as its seconds are of a boot's
cost. No request count and no per-request cost enter (both are inside v and t). c_b is the
boot's launch -> ready seconds over its measured levels (`servesweep.run.boot`): levels
that scatter alike get exactly their part of the shared optimum (`stats.
shared_boot_per_level`); t the measured phase's seconds so far. σ_B is one number for
every level, or one a level (`boot_cv_pct: {1: 1.0, 10: 1.0, 256: 8.0}`, `Precision.
boot_cv`): on an H100 it was ~1 % at levels 1 and 10 and 6-9 % at 256 (docs/sglang-h200.md),
where one number either runs 256 to its cap or stops 1 and 10 too early.

Measured on simulated levels with known truth (tests/unit/test_sizing.py): the stopped
estimate's mean is within 0.5 % of the true throughput, and its RSE at the stop is the
target's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol, cast

from servesweep.level import INF, Level, parse_value

MIN_BATCH_REQUESTS = 10  # requests in a batch at least (level 1 would batch single requests)
StopReason = Literal["precision", "cost_optimal", "cap", "max_requests"]
# χ²'s 5 % quantile at 1-10 degrees of freedom (scipy.stats.chi2.ppf(0.05, df); checked in
# tests/unit/test_sizing.py); above 10, Wilson and Hilferty's cube (within 0.3 % there).
CHI2_05 = (0.003932, 0.1026, 0.3518, 0.7107, 1.1455, 1.6354, 2.1673, 2.7326, 3.3251, 3.9403)
Z_05 = -1.644854


class Precision(NamedTuple):
    """`benchmark.precision`: the `auto` rule's settings (defaults: the schema's, kept
    equal by tests/unit/test_sizing.py)."""

    rse_pct: float = 2.0  # stop once the level's throughput RSE is at most this
    min_batches: int = 5  # counted batches (after the first, discarded) before a stop
    batch_requests: int = 0  # requests a batch; 0: max(level, MIN_BATCH_REQUESTS)
    max_s: float = 120.0  # the measured phase's time cap
    max_requests: int = 5000  # the measured phase's request cap
    # σ_B, %: stop at the cost-optimal length instead. One number for every level, or
    # (level key, σ_B) pairs in level order where boots scatter differently at different
    # levels (pairs, not a dict: the rule stays hashable); read it with `boot_cv`.
    boot_cv_pct: float | tuple[tuple[str, float], ...] | None = None

    @classmethod
    def of(cls, benchmark: Mapping) -> Precision:
        given = dict(benchmark.get("precision") or {})
        per_level = given.get("boot_cv_pct")
        if isinstance(per_level, Mapping):  # keys as YAML wrote them (1) or a spec's JSON ("1")
            pairs = [(Level.parse(k).key, float(v)) for k, v in per_level.items()]
            given["boot_cv_pct"] = tuple(sorted(pairs, key=lambda kv: parse_value(kv[0])))
        return cls(**{k: v for k, v in given.items() if k in cls._fields})

    def boot_cv(self, level: Level | None) -> float | None:
        """σ_B in % at a level (None: no σ_B stated, the rule is `rse_pct`'s). Under a
        per-level map, a level it does not name (a capacity-search probe, which lies between
        two configured levels) takes the σ_B of the nearest named level below it (the lowest
        one's below them all): boots scatter more at higher levels (docs/sglang-h200.md), so
        this errs towards the longer, more precise level."""
        if not isinstance(self.boot_cv_pct, tuple):
            return self.boot_cv_pct
        if level is None:
            raise ValueError("a per-level precision.boot_cv_pct needs the level")
        below = [cv for key, cv in self.boot_cv_pct if parse_value(key) <= level.value]
        return below[-1] if below else self.boot_cv_pct[0][1]

    def batch_size(self, level: Level) -> int:
        """Requests a batch at a concurrency level (`auto` sizes concurrency levels only)."""
        return self.batch_requests or max(MIN_BATCH_REQUESTS, int(level.value))


class Batch(NamedTuple):
    """One batch of finished requests: its output tokens and its seconds."""

    tokens: float
    seconds: float


class Estimate(NamedTuple):
    value: float | None  # tokens per second over the counted batches
    rse: float | None  # relative standard error (a fraction); None below 2 batches
    batches: int  # counted batches


class RequestStop(NamedTuple):
    """The rule's answer at one batch boundary."""

    stop: bool
    reason: StopReason | None
    estimate: Estimate


def batch_estimate(batches: Sequence[Batch], discard: int = 1) -> Estimate:
    """The ratio estimate Σx / Σd over the batches after the first `discard`, and its RSE
    from the batch means (the ratio estimator's standard error)."""
    counted = list(batches)[discard:]
    k = len(counted)
    tokens = sum(b.tokens for b in counted)
    seconds = sum(b.seconds for b in counted)
    if k == 0 or seconds <= 0:
        return Estimate(None, None, k)
    ratio = tokens / seconds
    if k < 2 or ratio <= 0:
        return Estimate(ratio, None, k)
    mean_d = seconds / k
    resid = sum((b.tokens - ratio * b.seconds) ** 2 for b in counted)
    se = math.sqrt(resid / (k * (k - 1))) / mean_d
    return Estimate(ratio, se / ratio, k)


def chi2_05(df: int) -> float:
    """χ²'s 5 % quantile at df degrees of freedom (df ≥ 1)."""
    if df <= len(CHI2_05):
        return CHI2_05[df - 1]
    h = 2 / (9 * df)
    return df * (1 - h + Z_05 * math.sqrt(h)) ** 3


BOUND_MIN_BATCHES = 3  # counted batches before the bound may stop a level (module doc)


def rse_bound(est: Estimate) -> float | None:
    """The RSE's one-sided upper 95 % bound from k counted batches (k − 1 df: the batch
    means taken as normal, the usual χ² interval of a standard deviation); None below 2."""
    if est.rse is None or est.batches < 2:
        return None
    df = est.batches - 1
    return est.rse * math.sqrt(df / chi2_05(df))


def target_rse(
    rule: Precision, elapsed_s: float, boot_share_s: float | None, level: Level | None = None
) -> float | None:
    """The RSE a level stops at (a fraction): `rse_pct`, or under `boot_cv_pct` the
    cost-optimal one, σ_B √(t / c_b) with the level's own σ_B (module doc; `level` is
    needed only where σ_B is given per level); None without a boot cost (only the caps
    stop it)."""
    boot_cv = rule.boot_cv(level)
    if boot_cv is None:
        return rule.rse_pct / 100
    if not boot_share_s or boot_share_s <= 0:
        return None
    return boot_cv / 100 * math.sqrt(max(elapsed_s, 0.0) / boot_share_s)


def request_stop(
    rule: Precision,
    batches: Sequence[Batch],
    elapsed_s: float,
    sent: int,
    boot_share_s: float | None = None,
    level: Level | None = None,
) -> RequestStop:
    """Whether a level under `num_prompts: auto` stops now: asked at each batch boundary
    (`batches`: every finished batch of the measured phase, the first included), and at
    any time for the caps (`elapsed_s`: seconds since the measured phase began; `sent`:
    measured requests sent; `boot_share_s`: the boot's start-up seconds a measured level,
    which the cost-optimal target needs; `level`: the level, whose own σ_B it takes
    where `boot_cv_pct` is given per level). Precision first: a level that reached its target
    as the cap came says so. At the target: the estimate after `min_batches` counted
    batches, or its upper bound (`rse_bound`) after BOUND_MIN_BATCHES."""
    est = batch_estimate(batches)
    target = target_rse(rule, elapsed_s, boot_share_s, level)
    bound = rse_bound(est) if est.batches >= BOUND_MIN_BATCHES else None
    if target is not None and est.rse is not None:
        estimate_at = est.batches >= rule.min_batches and est.rse <= target
        if estimate_at or (bound is not None and bound <= target):
            reason: StopReason = "precision" if rule.boot_cv_pct is None else "cost_optimal"
            return RequestStop(True, reason, est)
    if sent >= rule.max_requests:
        return RequestStop(True, "max_requests", est)
    if elapsed_s >= rule.max_s:
        return RequestStop(True, "cap", est)
    return RequestStop(False, None, est)


def cost_optimal_per_boot(
    between: float, within: float, boot_cost: float, measurement_cost: float
) -> float:
    """Measurements a boot (in-boot repeats, or requests) that minimise the cost of a given
    precision of boot means (Kalibera & Jones, "Rigorous benchmarking in reasonable time",
    ISMM 2013): n boots of r measurements cost n (c_boot + r c_meas) and give variance
    (σ_B² + σ_W² / r) / n; the product is least at r = sqrt(c_boot / c_meas × σ_W² / σ_B²).
    `within` is one measurement's σ_W² (per request where the measurement is a request).
    inf where boots do not scatter (σ_B² = 0: one boot, as many measurements as the
    precision asks); at least 1. nan without both components."""
    if any(math.isnan(x) for x in (between, within, boot_cost, measurement_cost)):
        return math.nan
    if measurement_cost <= 0:
        return math.inf
    if between <= 0:
        return math.inf if within > 0 else 1.0
    return max(1.0, math.sqrt(boot_cost / measurement_cost * within / between))


class Sizing(Protocol):
    """What the request counts read of a sweep's or a spec's benchmark: its settings
    (`servesweep.sweep.benchmark.BenchmarkSettings`, which the sweep layer builds)."""

    @property
    def warmup(self) -> int | str: ...  # a count, or "auto"
    @property
    def num_prompts(self) -> PromptCount | str: ...  # or "auto"
    @property
    def num_prompts_per_level(self) -> Mapping[str, int]: ...  # a spec's, by level key
    @property
    def precision(self) -> Precision: ...


class PromptCount(NamedTuple):
    """`benchmark.num_prompts` as a count rule, clamp(per_level × level, min, max) (defaults:
    the schema's, kept equal by tests/unit/test_sizing.py)."""

    per_level: float = 1
    min: int = 20
    max: int = 100000

    @classmethod
    def of(cls, rule: Mapping | str) -> PromptCount | Literal["auto"]:
        """The rule as a sweep or a spec gives it: "auto", or {per_level, min, max}."""
        if rule == "auto":
            return "auto"
        return cls(**cast(Mapping[str, Any], rule))


def num_prompts(rule: PromptCount | str, level: Level, precision: Precision | None = None) -> int:
    """Measured requests of a level: clamp(per_level × level, min, max). A rate level counts
    per_level × rate (per_level seconds of arrivals); an `inf` rate takes `min`. Under
    `auto`: the most the level may send (`precision.max_requests`)."""
    if rule == "auto":
        return (precision or Precision()).max_requests
    count = cast(PromptCount, rule)  # (another string fails here)
    if level.value == INF:
        return count.min
    return max(count.min, min(count.max, int(round(count.per_level * level.value))))


def measured_requests(benchmark: Sizing, level: Level) -> int:
    """A spec's measured requests at a level (under `auto`, the most it may send): the
    configured level's count, or by the same rule for a level the capacity search adds (a
    probe)."""
    if level.key in benchmark.num_prompts_per_level:
        return benchmark.num_prompts_per_level[level.key]
    return num_prompts(benchmark.num_prompts, level, benchmark.precision)


class LevelRequests(NamedTuple):
    """What one level of a boot sends, computed once (level_requests) for the boot that sends
    it, the prompts it is built from and the plan that estimates its time."""

    warmup: int  # unrecorded requests sent first
    measured: int  # measured requests (under `num_prompts: auto`, the most it may send)
    paced_warmup: bool  # a rate level's `auto` warm-up follows the level's own arrivals

    @property
    def requests(self) -> int:
        return self.warmup + self.measured


def level_requests(benchmark: Sizing, level: Level) -> LevelRequests:
    """A spec's LevelRequests at a level (configured or a capacity-search probe)."""
    paced = level.is_rate and benchmark.warmup == "auto"
    return LevelRequests(
        warmup_requests(benchmark, level), measured_requests(benchmark, level), paced
    )


WARMUP_RATE_S = 10.0  # a rate level's `auto` warm-up: this many seconds of its arrivals


def warmup_requests(benchmark: Sizing, level: Level) -> int:
    """Unrecorded requests sent before a level's measured ones (`benchmark.warmup`).

    `auto` (the default): one full wave at the level's own load, so that every batch size
    the measured requests reach has run once before they are timed (engines compile or
    autotune kernels on first use at a new batch size: vLLM's and SGLang's first run at a
    new level was measured up to 10 x slower in TTFT). A concurrency level c sends c
    requests with c in flight: the batch grows through every size up to c as the server
    admits them, and shrinks back as they finish, which covers the measured window (its
    waves are c and then smaller). A rate level sends the first WARMUP_RATE_S seconds of
    its arrivals at its own rate (at most as many requests as it measures; an `inf` rate
    as many as it measures, all at once), so the in-flight count reaches its steady value
    whenever a request takes less than that. An integer: exactly that many requests, with
    at most min(level, that) in flight (the rule before `auto`)."""
    rule = benchmark.warmup
    if rule != "auto":
        return int(rule)
    measured = measured_requests(benchmark, level)
    if not level.is_rate:
        return int(level.value)
    if level.value == INF:
        return measured
    return max(1, min(measured, math.ceil(level.value * WARMUP_RATE_S)))
