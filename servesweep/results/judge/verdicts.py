"""Verdicts: is a variant faster than its baseline (or a stack than the reference stack),
beyond the noise between boots and by more than a change that matters?

The maths is `servesweep.stats` (the one core the hunt uses too); this module applies it
to a sweep's summary:

- **A boot is the unit**: its value of a metric at a level is the mean of its valid
  measurements (throughput), or its own requests' percentile (TTFT, TPOT). Levels that fail
  a validity gate never enter (`servesweep.results.collect.validity`); they are counted and
  named in `excluded`.
- **Log scale, pooled scatter**: every comparison is a ratio of geometric means; the boot
  scatter at a level and metric is pooled over every configuration of the sweep measured
  there (each about its own mean); a configuration whose own scatter the guard
  (`stats.scatter_agrees`, over its levels) finds larger is judged by its own scatter ratio
  times the rest's variance (`stats.scaled_side`). The premise (configurations on one host
  scatter alike in relative terms) is stated beside the verdicts in the report.
- **First boots**: per level, the first boots of every configuration against their later
  ones (`stats.first_boot_contrast`, on the objective metric). `analysis.first_boot`:
  `drop` leaves each cell's first boot (r0) out of the verdicts, `keep` never does, `auto`
  (default) drops it at a level whose contrast is significant (5 %) when every cell there
  keeps two boots after it, and otherwise keeps it and says so.
- **Machines as blocks**: where a comparison's boots ran on more than one machine (a
  sweep resumed elsewhere, leases on several hosts: summary.csv `machine`) and a machine
  ran both sides, each machine is a block (`stats.blocked_contrast`): the sides' difference
  on each such machine, weighted, with the scatter of the boots about their own (cell,
  machine) mean; a machine's effect cancels instead of sitting in the Δ or the scatter.
  Boots on a machine that ran one side only are named in `excluded`.
- **Families**: the primary family is the objective metric (`analysis.objective`, or the
  hunt's) across the counted levels: Holm over those comparisons of one variant against
  its reference. Every other comparison (latency percentiles, the objective at a level not
  counted) is secondary: Holm within its own family; a secondary change never calls a
  variant faster by itself (the report's lines read the primary family).
- A verdict is `faster` / `slower` when its comparison is significant across its family
  (Holm-adjusted p ≤ 0.05) and its estimate is beyond the metric kind's practical margin;
  significant but within it is `no meaningful change`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import NamedTuple, cast

import pandas as pd

from servesweep import stats
from servesweep.results.judge.board import (
    METRICS,
    PRIMARY,
    Board,
    FirstBootLevel,
    Judging,
    Key,
    Metric,
    RequestValues,
    build_board,
    dropped,
    judged_first_boots,
    summary_boots,
    with_percentiles,
)


class Verdict(StrEnum):
    """A comparison's verdict: the words verdicts.csv and the report hold."""

    FASTER = "faster"
    SLOWER = "slower"
    SMALL = "no meaningful change"  # significant, but inside the practical margin
    SAME = "no significant change"
    INCONCLUSIVE = "inconclusive (too few boots)"  # no scatter to judge by


FASTER, SLOWER, SMALL, SAME, INCONCLUSIVE = Verdict
VERDICTS = tuple(Verdict)
ALPHA = stats.ALPHA  # per family of comparisons (Holm)


# ---- comparisons ------------------------------------------------------------------------


class Comparison(NamedTuple):
    """A row of results/verdicts.csv."""

    stack: str
    model: str
    variant: str
    level: object
    metric: str
    kind: str  # variant (vs the baseline) | stack (vs the reference stack's same variant)
    compared_stack: str
    compared_variant: str
    n: int
    n_ref: int
    mean: float | None  # geometric mean of the boots' values (capacity: None without one)
    mean_ref: float | None
    cv: float  # each side's own: std of its boots' logs
    cv_ref: float
    within_boot_cv: float
    delta_pct: float | None  # ratio of geometric means - 1, in % (capacity: None likewise)
    delta_lo: float  # its 95 % interval (a ratio interval: never below -100 %)
    delta_hi: float
    verdict: str
    noisy: bool  # a side's own CV above analysis.noise_cv
    repeats_needed: int | None  # boots per side (every cell) that would settle it
    excluded: str
    p_value: float = math.nan  # two-sided, of this comparison alone
    p_holm: float = math.nan  # Holm-adjusted over the comparison's family
    margin_pct: float = math.nan  # the practical margin applied
    family: str = PRIMARY  # primary (objective at counted levels) | secondary
    df: float = math.nan  # degrees of freedom of the comparison's variance
    variance: str = ""  # pooled | own | none: whose scatter it used
    first_boot: str = ""  # kept | dropped: each cell's r0 at this level
    # Where the boots' scatter at this level and metric comes from (stats.VarianceComponents,
    # pooled over the configurations; the interval above stays on boot means):
    sigma_boot_pct: float = math.nan  # sigma_B, boot to boot (log scale, about a CV in %)
    sigma_within_pct: float = math.nan  # sigma_W, one measurement within a boot
    per_boot: float = math.nan  # measurements in a boot's value (R)
    within_share: float = math.nan  # sigma_W^2 / R over sigma_B^2 + sigma_W^2 / R
    df_boot: float = math.nan
    df_within: float = math.nan
    components_from: str = ""  # in_boot | batches | total (only sigma_B^2 + sigma_W^2 / R)


def verdict_of(
    low: float,
    high: float,
    n: int,
    n_ref: int,
    higher_is_better: bool,
    delta: float = math.nan,
    margin_pct: float = 0.0,
    significant: bool = True,
) -> Verdict:
    """The verdict for an interval of Δ % (variant vs reference): `significant` is False
    where the family's adjustment (Holm) does not reject; a change of at most `margin_pct`
    (by its estimate `delta`, else the interval's bound nearer zero) is no meaningful one."""
    if n < 1 or n_ref < 1 or math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if not (low > 0 or high < 0) or not significant:
        return SAME
    size = abs(delta) if not math.isnan(delta) else min(abs(low), abs(high))
    if size <= margin_pct:
        return SMALL
    return FASTER if (low > 0) == higher_is_better else SLOWER


def _pairs(keys: Iterable[Key], baseline: str, reference: str | None) -> list[tuple]:
    """(kind, key, reference key) for every comparison the sweep allows."""
    pairs = []
    for stack, model, variant, level in keys:
        if variant != baseline and (stack, model, baseline, level) in keys:
            pairs.append(
                ("variant", (stack, model, variant, level), (stack, model, baseline, level))
            )
        if reference and stack != reference and (reference, model, variant, level) in keys:
            pairs.append(
                ("stack", (stack, model, variant, level), (reference, model, variant, level))
            )
    return pairs


def _needed(board: Board, key: Key, c: stats.Contrast, resolve_pct: float, m: int) -> int | None:
    """Boots per side (every cell measured as often) at which this comparison's interval,
    at its family's Bonferroni level, would be no wider than max(±resolve %, half the
    change seen): a change as large as this one would be told from none, and a small one
    pinned within ±resolve. None where it is settled already."""
    if c.variance == "none":
        return None
    iv = c.interval()
    if iv.low > 1 or iv.high < 1:
        return None
    target = max(resolve_pct, abs(math.expm1(abs(c.estimate) / 2)) * 100)
    # An interval on a df near zero runs from 0 to +inf: open, however many boots it has.
    bounded = iv.low > 0 and math.isfinite(iv.high)
    if bounded and (math.log(iv.high) - math.log(iv.low)) / 2 <= math.log1p(target / 100):
        return None
    if c.variance == "pooled":
        pool = board.pools[key[3]]
        n = stats.boots_needed(float(pool.variance), board.pooled[key[3]], target, ALPHA / m)
    else:
        n = stats.boots_needed(c.se**2 * min(c.n, c.n_ref) / 2, 1, target, ALPHA / m)
    return BEYOND if n is None else n


BEYOND = 1001  # repeats_needed past stats.boots_needed's limit


def compare(
    summary: pd.DataFrame,
    analysis: Mapping | Judging,
    stacks: list[str],
    variants: list[str],
    requests: RequestValues | None,
    metrics: dict[str, Metric] = METRICS,
    first: Mapping[object, FirstBootLevel] | None = None,
) -> list[Comparison]:
    """Every variant against the baseline (same stack and model), and every stack's
    variants against the reference stack's (same model), per level and metric, in the
    config's order, judged by family. `first`: the first-boot decisions
    (`judged_first_boots`, computed here when not given)."""
    judging = analysis if isinstance(analysis, Judging) else Judging.of(analysis)
    metrics = judging.metrics(metrics)
    reference = judging.reference_stack or (stacks[0] if stacks else None)
    position = {v: i for i, v in enumerate(variants)} | {s: i for i, s in enumerate(stacks)}
    if first is None:
        first = judged_first_boots(summary, judging)
    out: list[Judged] = []
    for name, metric in metrics.items():
        boots = summary_boots(summary, metric.column)
        if not boots:
            continue
        boots = {k: with_percentiles(b, metric, k[:3], k[3], requests) for k, b in boots.items()}
        board = build_board(dropped(boots, first))
        pairs = sorted(
            _pairs(set(board.boots), judging.baseline, reference),
            key=lambda p: (
                p[0] != "variant",
                position.get(p[1][0], 99),
                p[1][1],
                position.get(p[1][2], 99),
                float(p[1][3]),
            ),
        )
        for kind, key, ref_key in pairs:
            out.append(_comparison(board, judging, name, metric, kind, key, ref_key, first))
    return judge(out, metrics, judging)


# A comparison, with what would tell how many boots settle it (None: no such context).
Judged = tuple["Comparison", tuple[Board, Key, stats.Contrast] | None]


def _comparison(
    board: Board,
    judging: Judging,
    name: str,
    metric: Metric,
    kind: str,
    key: Key,
    ref_key: Key,
    first: Mapping[object, FirstBootLevel],
) -> Judged:
    mine, ref = board.boots[key], board.boots[ref_key]
    blocks = board.blocks(key, ref_key)
    if blocks is not None:  # boots on several machines: each machine a block
        c = stats.blocked_contrast(blocks.mine, blocks.ref, blocks.pool)
    else:
        c = stats.contrast(mine.logs, ref.logs, board.side(key), board.side(ref_key))
    alone = blocks.alone if blocks is not None else []
    iv = c.interval()
    point, low, high = iv.pct()
    sd = [
        math.sqrt(float(s.variance)) if s.df > 0 else math.nan
        for s in (stats.scatter([b.logs], logs=True) for b in (mine, ref))
    ]
    gm = [math.exp(float(b.logs.mean())) if len(b.logs) else math.nan for b in (mine, ref)]
    fb = first.get(key[3])
    vc = board.components.get(key[3])
    return Comparison(
        stack=key[0],
        model=key[1],
        variant=key[2],
        level=key[3],
        metric=name,
        kind=kind,
        compared_stack=ref_key[0],
        compared_variant=ref_key[2],
        n=c.n,
        n_ref=c.n_ref,
        mean=gm[0],
        mean_ref=gm[1],
        cv=sd[0],
        cv_ref=sd[1],
        within_boot_cv=mine.within_boot_cv,
        delta_pct=point,
        delta_lo=low,
        delta_hi=high,
        verdict="",
        noisy=any(s > judging.noise_cv for s in sd if not math.isnan(s)),
        repeats_needed=None,
        excluded="; ".join(
            [x for x in (mine.excluded, ref.excluded) if x]
            + [f"machine {m}: one side's boots only (no difference there)" for m in alone]
        ),
        p_value=c.p,
        margin_pct=judging.margin(metric),
        family=judging.family(name, key[3]),
        df=c.df,
        variance=c.variance,
        first_boot="dropped" if fb is not None and fb.dropped else "kept",
        **(components_columns(vc) if vc is not None else {}),
    ), (board, key, c)


def components_columns(vc: stats.VarianceComponents) -> dict:
    """The Comparison's variance-component columns from a level's components."""

    def pct(variance: float) -> float:
        return 100 * math.sqrt(variance) if variance >= 0 else math.nan

    return {
        "sigma_boot_pct": pct(vc.between),
        "sigma_within_pct": pct(vc.within),
        "per_boot": vc.per_boot,
        "within_share": vc.within_share,
        "df_boot": vc.between_df,
        "df_within": vc.within_df,
        "components_from": vc.source,
    }


def family_of(c: Comparison) -> tuple:
    """The comparisons whose error rate is controlled together: one variant (or stack)
    against its reference, in one family (primary or secondary)."""
    return (c.stack, c.model, c.variant, c.kind, c.compared_stack, c.compared_variant, c.family)


def judge(
    comparisons: Sequence[Judged | Comparison],
    metrics: dict[str, Metric] = METRICS,
    judging: Judging | None = None,
) -> list[Comparison]:
    """Each comparison's verdict, with Holm's adjustment over its family, and the boots
    that would settle the unsettled ones. Takes (Comparison, (board, key, contrast)) pairs
    from compare, or bare Comparisons (capacity rows, tests)."""
    judging = judging or Judging()
    # A Comparison is a NamedTuple, itself a tuple: tell it from a pair by its type.
    rows = [(c, None) if isinstance(c, Comparison) else c for c in comparisons]
    families: dict[tuple, list[int]] = {}
    for i, (c, _) in enumerate(rows):
        families.setdefault(family_of(c), []).append(i)
    adjusted = [math.nan] * len(rows)
    size = [1] * len(rows)
    for members in families.values():
        p_values = stats.holm([rows[i][0].p_value for i in members])
        for i, p in zip(members, p_values, strict=True):
            adjusted[i], size[i] = p, len(members)
    out = []
    for (c, context), p, m in zip(rows, adjusted, size, strict=True):
        metric = metrics.get(c.metric) or Metric(c.metric, not c.metric.endswith("_ms"))
        verdict = verdict_of(
            c.delta_lo,
            c.delta_hi,
            c.n,
            c.n_ref,
            metric.higher_is_better,
            cast(float, c.delta_pct),  # compare's comparisons have one (capacity's are apart)
            c.margin_pct,
            significant=not p > ALPHA,  # nan (no spread to test): the interval decides
        )
        needed = c.repeats_needed
        if context is not None and verdict == SAME:
            needed = _needed(*context, judging.resolve_pct, m)
        out.append(c._replace(p_holm=p, verdict=verdict, repeats_needed=needed))
    return out


def to_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([c._asdict() for c in comparisons], columns=list(Comparison._fields))
