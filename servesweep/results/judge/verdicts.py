"""Verdicts: is a variant faster than its baseline (or a stack than the reference stack),
beyond the noise between boots and by more than a change that matters?

A boot is the unit of repetition: its value of a metric is the mean of its valid
measurements of the level (several when `repeats_in_boot` > 1). Throughput is compared by
Welch's interval on the boots' values; a latency percentile by Welch's interval on the
boots' log percentiles (each boot's percentile of its own requests), as a ratio. Levels that
fail a validity gate never enter (`servesweep.results.collect.validity`); they are counted
and named in `excluded`.

A verdict is `faster` / `slower` only when (1) the comparison is significant at 5 % across
its family, every level and metric of one variant against its reference (Holm's step-down
adjustment of the p-values), and (2) the change is larger than the metric kind's practical
margin (`analysis.margin_throughput_pct`, `analysis.margin_latency_pct`); a significant
change inside the margin is `no meaningful change`. The intervals stay per comparison (95 %).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from servesweep import stats
from servesweep.level import parse_value

FASTER, SLOWER, SAME = "faster", "slower", "no significant change"
SMALL = "no meaningful change"  # significant, but inside the practical margin
INCONCLUSIVE = "inconclusive (n < 2)"
VERDICTS = (FASTER, SLOWER, SMALL, SAME, INCONCLUSIVE)
ALPHA = 1 - stats.CONFIDENCE  # per family of comparisons (Holm)


class Metric(NamedTuple):
    column: str  # in summary.csv
    higher_is_better: bool
    # None: compare the boots' values with Welch. Else (request field, percentile): Welch
    # on each boot's log percentile of its own requests.
    from_requests: tuple[str, float] | None = None

    @property
    def margin_key(self) -> str:
        """The `analysis` key of this metric kind's practical margin (in %)."""
        return "margin_throughput_pct" if self.from_requests is None else "margin_latency_pct"


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


def verdict_of(
    low: float,
    high: float,
    n: int,
    n_ref: int,
    higher_is_better: bool,
    delta: float = math.nan,
    margin_pct: float = 0.0,
    significant: bool = True,
) -> str:
    """The verdict for an interval of Δ % (variant vs reference): `significant` is False
    where the family's adjustment (Holm) does not reject; a change of at most `margin_pct`
    (by its estimate `delta`, else the interval's bound nearer zero) is no meaningful one."""
    if n < 2 or n_ref < 2 or math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if not (low > 0 or high < 0) or not significant:
        return SAME
    size = abs(delta) if not math.isnan(delta) else min(abs(low), abs(high))
    if size <= margin_pct:
        return SMALL
    return FASTER if (low > 0) == higher_is_better else SLOWER


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
    p_value: float = math.nan  # two-sided, of this comparison alone
    p_holm: float = math.nan  # Holm-adjusted over the variant's levels and metrics
    margin_pct: float = math.nan  # the practical margin applied


class Side(NamedTuple):
    """One side of a comparison: a cell at a level, and its stats."""

    cell: tuple[str, str, str]  # stack, model, variant
    level: int
    stats: LevelStats


class Delta(NamedTuple):
    """Δ % with its 95 % interval and p, and the two sides' spreads repeats_needed reads."""

    point: float
    low: float = math.nan
    high: float = math.nan
    p: float = math.nan
    spread: float = math.nan  # CV (throughput) or std of log values (percentiles)
    spread_ref: float = math.nan


def welch_delta(mine: LevelStats, ref: LevelStats) -> Delta:
    """Welch's interval of the difference of the boots' means, over the reference's mean."""
    if not ref.mean:
        return Delta(math.nan)
    point = (mine.mean / ref.mean - 1) * 100
    w = stats.welch(mine.values, ref.values)
    if w is None:
        return Delta(point)
    low, high = w.ci_low / ref.mean * 100, w.ci_high / ref.mean * 100
    return Delta(point, low, high, w.p, mine.cv, ref.cv)


def boot_percentiles(metric: Metric, side: Side, requests: RequestValues) -> list[float]:
    """Each valid boot's percentile of its own requests (its summary value where no
    requests are stored)."""
    field, q = metric.from_requests
    out = []
    for repeat, value in zip(side.stats.repeats, side.stats.values, strict=True):
        found = requests(side.cell, repeat, side.level, field)
        out.append(float(np.percentile(found, q)) if found else value)
    return out


def percentile_delta(metric: Metric, mine: Side, ref: Side, requests: RequestValues) -> Delta:
    """Welch's interval on the boots' log percentiles, as Δ % of the ratio of geometric
    means (docs/design.md §6 says why not a bootstrap: with 3 boots it under-covers)."""
    a, b = boot_percentiles(metric, mine, requests), boot_percentiles(metric, ref, requests)
    r = stats.log_ratio(a, b)
    if r is None:
        pos_a, pos_b = [x for x in a if x > 0], [x for x in b if x > 0]
        if not pos_a or not pos_b:
            return Delta(math.nan)
        point = math.exp(np.mean(np.log(pos_a)) - np.mean(np.log(pos_b)))
        return Delta((point - 1) * 100)
    pct = [(x - 1) * 100 for x in (r.ratio, r.low, r.high)]
    return Delta(*pct, r.p, r.sd_log, r.sd_log_ref)


def _needed(mine: LevelStats, ref: LevelStats, d: Delta, resolve: float) -> int | None:
    """Boots per side that would resolve ±resolve % where the verdict is not settled: no
    significant change with an interval wider than that (a significant one needs no more;
    with fewer than 2 boots there is no spread to go by)."""
    if math.isnan(d.low) or d.low > 0 or d.high < 0 or (d.high - d.low) / 2 <= resolve:
        return None
    ratio = mine.mean / ref.mean if ref.mean else math.nan
    return stats.repeats_needed(d.spread, d.spread_ref, ratio, resolve)


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
                d = welch_delta(mine.stats, ref.stats)
            else:
                d = percentile_delta(metric, mine, ref, requests)
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
                    delta_pct=d.point,
                    delta_lo=d.low,
                    delta_hi=d.high,
                    verdict="",
                    noisy=any(s.cv > analysis["noise_cv"] for s in (a, b) if not math.isnan(s.cv)),
                    repeats_needed=_needed(a, b, d, analysis["resolve_pct"]),
                    excluded="; ".join(x for x in (a.excluded, b.excluded) if x),
                    p_value=d.p,
                    margin_pct=analysis[metric.margin_key],
                )
            )
    return judge(out, metrics)


def family(c: Comparison) -> tuple:
    """The comparisons whose error rate is controlled together: one variant (or stack)
    against its reference, over every level and metric."""
    return (c.stack, c.model, c.variant, c.kind, c.compared_stack, c.compared_variant)


def judge(comparisons: list[Comparison], metrics: dict[str, Metric] = METRICS) -> list:
    """Each comparison's verdict, with Holm's adjustment over its family."""
    families: dict[tuple, list[int]] = {}
    for i, c in enumerate(comparisons):
        families.setdefault(family(c), []).append(i)
    adjusted = [math.nan] * len(comparisons)
    for members in families.values():
        p_values = stats.holm([comparisons[i].p_value for i in members])
        for i, p in zip(members, p_values, strict=True):
            adjusted[i] = p
    out = []
    for c, p in zip(comparisons, adjusted, strict=True):
        verdict = verdict_of(
            c.delta_lo,
            c.delta_hi,
            c.n,
            c.n_ref,
            metrics[c.metric].higher_is_better,
            c.delta_pct,
            c.margin_pct,
            significant=not p > ALPHA,  # nan (no spread to test): the interval decides
        )
        out.append(c._replace(p_holm=p, verdict=verdict))
    return out


def to_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([c._asdict() for c in comparisons], columns=list(Comparison._fields))
