"""Verdicts: is a variant faster than its baseline (or a stack than the reference stack),
beyond the noise between boots?

A boot is the unit of repetition: its value of a metric is the mean of its valid
measurements of the level (several when `repeats_in_boot` > 1). Throughput is compared by
Welch's interval on the boots' values; latency percentiles by a two-stage bootstrap of the
percentile ratio over the boots' pooled requests. Levels that fail a validity gate never
enter (`servesweep.results.collect.validity`); they are counted and named in `excluded`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from servesweep.level import parse_value
from servesweep.results.judge import stats

FASTER, SLOWER, SAME = "faster", "slower", "no significant change"
INCONCLUSIVE = "inconclusive (n < 2)"
VERDICTS = (FASTER, SLOWER, SAME, INCONCLUSIVE)


class Metric(NamedTuple):
    column: str  # in summary.csv
    higher_is_better: bool
    # None: compare the boots' values with Welch. Else (request field, percentile): a
    # two-stage bootstrap over the requests themselves.
    from_requests: tuple[str, float] | None = None


METRICS = {
    "output_throughput": Metric("output_throughput", True),
    "median_ttft_ms": Metric("median_ttft_ms", False, ("ttft_ms", 50)),
    "p99_ttft_ms": Metric("p99_ttft_ms", False, ("ttft_ms", 99)),
    "median_tpot_ms": Metric("median_tpot_ms", False, ("tpot_ms", 50)),
    "p99_tpot_ms": Metric("p99_tpot_ms", False, ("tpot_ms", 99)),
}
HEADLINE_METRIC = "output_throughput"

# Per boot (repeat) and level: the request values of its valid measurements.
RequestValues = Callable[[tuple, int, int, str], list[float]]


class LevelStats(NamedTuple):
    """One cell's metric at one level, across its boots."""

    n: int  # boots with a valid measurement
    boots: int  # boots in all
    repeats: list[int]  # the valid boots
    values: list[float]  # each valid boot's value
    mean: float
    std: float
    cv: float  # across boots
    ci_low: float
    ci_high: float
    within_boot_cv: float  # pooled over boots with several measurements; nan otherwise
    excluded: str  # "r1: client_bound: …" for each boot kept out


def verdict_of(low: float, high: float, n: int, n_ref: int, higher_is_better: bool) -> str:
    """The verdict for an interval of Δ % (variant vs reference)."""
    if n < 2 or n_ref < 2 or math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if low > 0:
        return FASTER if higher_is_better else SLOWER
    if high < 0:
        return SLOWER if higher_is_better else FASTER
    return SAME


def _within_boot_cv(groups: list[list[float]]) -> float:
    multi = [np.asarray(g, dtype=float) for g in groups if len(g) > 1]
    if not multi:
        return math.nan
    pooled_var = np.mean([g.var(ddof=1) for g in multi])
    grand = np.mean(np.concatenate(multi))
    return float(math.sqrt(pooled_var) / grand) if grand else math.nan


def level_stats(rows: pd.DataFrame, column: str) -> LevelStats:
    """Stats of one (stack, model, variant, level) over its boots."""
    groups, repeats, excluded = [], [], []
    for repeat, boot in rows.groupby("repeat", sort=True):
        valid = boot[boot["valid"]]
        values = pd.to_numeric(valid[column], errors="coerce").dropna().tolist()
        if values:
            groups.append(values)
            repeats.append(int(repeat))
        reasons = boot.loc[~boot["valid"], "invalid_reasons"].dropna().unique()
        excluded += [f"r{int(repeat)}: {r}" for r in reasons]
    values = [float(np.mean(g)) for g in groups]
    d = stats.describe(values)
    return LevelStats(
        d.n,
        int(rows["repeat"].nunique()),
        repeats,
        values,
        d.mean,
        d.std,
        d.cv,
        d.ci_low,
        d.ci_high,
        _within_boot_cv(groups),
        "; ".join(excluded),
    )


class Comparison(NamedTuple):
    """A row of results/verdicts.csv."""

    stack: str
    model: str
    variant: str
    level: int
    metric: str
    kind: str  # variant (vs the baseline) | stack (vs the reference stack's same variant)
    compared_stack: str
    compared_variant: str
    n: int
    n_ref: int
    mean: float
    mean_ref: float
    cv: float
    cv_ref: float
    within_boot_cv: float
    delta_pct: float
    delta_lo: float
    delta_hi: float
    verdict: str
    noisy: bool  # CV across boots above analysis.noise_cv on either side
    repeats_needed: int | None  # boots per side to resolve ±analysis.resolve_pct
    excluded: str


class Side(NamedTuple):
    """One side of a comparison: a cell at a level, and its stats."""

    cell: tuple[str, str, str]  # stack, model, variant
    level: int
    stats: LevelStats


def _welch_delta(mine: LevelStats, ref: LevelStats) -> tuple[float, float, float]:
    """(Δ %, low, high): Welch's interval of the difference of the boots' means, over the
    reference's mean."""
    if not ref.mean:
        return math.nan, math.nan, math.nan
    point = (mine.mean / ref.mean - 1) * 100
    w = stats.welch(mine.values, ref.values)
    if w is None:
        return point, math.nan, math.nan
    return point, w.ci_low / ref.mean * 100, w.ci_high / ref.mean * 100


def _bootstrap_delta(
    metric: Metric, mine: Side, ref: Side, requests: RequestValues, seed: int
) -> tuple[float, float, float]:
    """(Δ %, low, high): the two-stage bootstrap of the percentile's ratio."""
    field, q = metric.from_requests

    def groups(side: Side) -> list[list[float]]:
        found = [requests(side.cell, r, side.level, field) for r in side.stats.repeats]
        return [g for g in found if g]

    a, b = groups(mine), groups(ref)
    est, low, high = stats.two_stage_bootstrap(
        a, b, lambda v: float(np.percentile(v, q)), seed=seed
    )
    if len(a) < 2 or len(b) < 2:
        return (est - 1) * 100, math.nan, math.nan
    return (est - 1) * 100, (low - 1) * 100, (high - 1) * 100


def _needed(
    metric: Metric, mine: LevelStats, ref: LevelStats, low: float, high: float, resolve: float
) -> int | None:
    """Boots per side that would resolve ±resolve % where the verdict is not settled: no
    significant change with an interval wider than that (a decided faster / slower needs no
    more; with fewer than 2 boots there is no spread to go by)."""
    if math.isnan(low) or low > 0 or high < 0 or (high - low) / 2 <= resolve:
        return None
    if metric.from_requests is None:
        ratio = mine.mean / ref.mean if ref.mean else math.nan
        return stats.repeats_needed(mine.cv, ref.cv, ratio, resolve)
    # Bootstrap intervals narrow as 1 / sqrt(boots).
    n = max(mine.n, ref.n)
    return max(2, math.ceil(n * (((high - low) / 2) / resolve) ** 2))


def _pairs(groups: dict, baseline: str, reference: str | None) -> list[tuple]:
    """(kind, key, reference key) for every comparison the sweep allows."""
    pairs = []
    for stack, model, variant, level in groups:
        if variant != baseline and (stack, model, baseline, level) in groups:
            pairs.append(
                ("variant", (stack, model, variant, level), (stack, model, baseline, level))
            )
        if reference and stack != reference and (reference, model, variant, level) in groups:
            pairs.append(
                ("stack", (stack, model, variant, level), (reference, model, variant, level))
            )
    return pairs


def compare(
    summary: pd.DataFrame,
    analysis: dict,
    stacks: list[str],
    variants: list[str],
    requests: RequestValues,
    metrics: dict[str, Metric] = METRICS,
) -> list[Comparison]:
    """Every variant against the baseline (same stack and model), and every stack's
    variants against the reference stack's (same model), per level and metric, in the
    config's order."""
    df = summary[summary["level"].notna()].copy()
    df["level"] = df["level"].map(parse_value)
    reference = analysis.get("reference_stack") or (stacks[0] if stacks else None)
    groups = {key: rows for key, rows in df.groupby(["stack", "model", "variant", "level"])}
    position = {v: i for i, v in enumerate(variants)} | {s: i for i, s in enumerate(stacks)}
    pairs = sorted(
        _pairs(groups, analysis["baseline"], reference),
        key=lambda p: (
            p[0] != "variant",
            position.get(p[1][0], 99),
            p[1][1],
            position.get(p[1][2], 99),
            p[1][3],
        ),
    )
    cache: dict = {}

    def side(key, column) -> Side:
        if (key, column) not in cache:
            cache[(key, column)] = Side(key[:3], key[3], level_stats(groups[key], column))
        return cache[(key, column)]

    out = []
    for kind, key, ref_key in pairs:
        for name, metric in metrics.items():
            if metric.column not in df:
                continue
            mine, ref = side(key, metric.column), side(ref_key, metric.column)
            if metric.from_requests is None:
                point, low, high = _welch_delta(mine.stats, ref.stats)
            else:
                point, low, high = _bootstrap_delta(metric, mine, ref, requests, seed=len(out))
            a, b = mine.stats, ref.stats
            out.append(
                Comparison(
                    stack=key[0],
                    model=key[1],
                    variant=key[2],
                    level=key[3],
                    metric=name,
                    kind=kind,
                    compared_stack=ref_key[0],
                    compared_variant=ref_key[2],
                    n=a.n,
                    n_ref=b.n,
                    mean=a.mean,
                    mean_ref=b.mean,
                    cv=a.cv,
                    cv_ref=b.cv,
                    within_boot_cv=a.within_boot_cv,
                    delta_pct=point,
                    delta_lo=low,
                    delta_hi=high,
                    verdict=verdict_of(low, high, a.n, b.n, metric.higher_is_better),
                    noisy=any(s.cv > analysis["noise_cv"] for s in (a, b) if not math.isnan(s.cv)),
                    repeats_needed=_needed(metric, a, b, low, high, analysis["resolve_pct"]),
                    excluded="; ".join(x for x in (a.excluded, b.excluded) if x),
                )
            )
    return out


def to_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([c._asdict() for c in comparisons], columns=list(Comparison._fields))
