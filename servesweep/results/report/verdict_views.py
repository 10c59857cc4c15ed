"""The report's top: the verdict tables, the lines that say them in words, the first-boot
contrast and what more boots would settle.

Plain dicts and strings for the template (which escapes everything); the numbers come from
`servesweep.results.judge.verdicts` (the same board the verdicts were judged on).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from servesweep import fmt
from servesweep.level import parse_value
from servesweep.results.judge.board import (
    PRIMARY,
    CellStats,
    FirstBootLevel,
    Judging,
    Key,
    summary_cell_stats,
)
from servesweep.results.judge.verdicts import FASTER, INCONCLUSIVE, SAME, SLOWER, SMALL
from servesweep.stats import PRACTICAL_MAX_BOOTS

if TYPE_CHECKING:
    from servesweep.sweep.stages import RepeatsRule

# A boot's failure stages that come before any level (records.Failure.stage).
EARLY_STAGES = ("launch", "boot", "stack", "model")

# Template classes per verdict (colour).
VERDICT_CLASS = {
    FASTER: "faster",
    SLOWER: "slower",
    SMALL: "same",
    SAME: "same",
    INCONCLUSIVE: "inconclusive",
}


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _pct(v: float) -> str:
    return fmt.MISSING if math.isnan(v) else f"{v:+.1f} %"


def _objective(verdicts: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The primary family's rows of one kind (the objective at its counted levels)."""
    if "family" not in verdicts:
        return verdicts.iloc[0:0]
    return verdicts[(verdicts["family"] == PRIMARY) & (verdicts["kind"] == kind)]


def holm_note(c) -> str:
    """Beside an interval that excludes zero on its own but whose verdict is no significant
    change: the family (the objective over the counted levels, Holm) did not reject it."""
    low, high = _num(c.delta_lo), _num(c.delta_hi)
    if c.verdict == SAME and (low > 0 or high < 0):
        return f"not significant across the family's levels (Holm p {_num(c.p_holm):.2f})"
    return ""


def basis(c) -> str:
    """What a verdict stands on: "2 / 2 boots, df 6, pooled scatter"."""
    df = _num(c.df)
    if math.isnan(df):
        return f"{int(c.n)} / {int(c.n_ref)} boots, no scatter to judge by"
    used = {
        "pooled": "pooled scatter",
        "own": "a side's own scatter",
        "blocked": "each machine a block",
    }.get(str(c.variance), "")
    return f"{int(c.n)} / {int(c.n_ref)} boots, df {df:.0f}, {used}"


def mean_text(s: CellStats | None) -> str:
    """A cell's geometric mean with its 95 % ratio interval: "3,033 [2,710, 3,394]"."""
    if s is None or math.isnan(s.mean):
        return fmt.MISSING
    if math.isnan(s.low):
        return f"{s.mean:,.1f}"
    return f"{s.mean:,.1f} [{s.low:,.1f}, {s.high:,.1f}]"


def components_text(c) -> str:
    """Where a level's boot scatter comes from (a verdict row's variance components):
    "σ_B 3.1 % · σ_W/√R 1.2 % (14 % of it within boots, R 20; df 6 / 40)"; the total
    alone where a boot measured the level once and knows no sampling error."""
    if c is None or not str(getattr(c, "components_from", "") or ""):
        return ""
    b, w, r = _num(c.sigma_boot_pct), _num(c.sigma_within_pct), _num(c.per_boot)
    if c.components_from == "total":
        return "" if math.isnan(b) else f"boot scatter {b:.1f} % (within a boot: not measured)"
    what = "in-boot repeats" if c.components_from == "in_boot" else "requests"
    share = _num(c.within_share)
    return (
        f"σ_B {b:.1f} % · σ_W/√R {w / math.sqrt(r):.1f} % ({100 * share:.0f} % within "
        f"boots; R {r:.0f} {what}; df {_num(c.df_boot):.0f} / {_num(c.df_within):.0f})"
    )


def _level_cell(s: CellStats | None, rows: pd.DataFrame) -> dict:
    """The facts of one (cell, level): mean and interval over valid boots, its own CV, or
    why there is none."""
    n = s.n if s else 0
    cell = {"text": mean_text(s), "n": n, "boots": s.boots if s else 0}
    cell["cv"] = None if s is None or math.isnan(s.cv) else f"CV {100 * s.cv:.1f} %"
    cell["noisy_cv"] = None if s is None or math.isnan(s.cv) else s.cv
    if n == 0:
        statuses = rows["status"].fillna("not_run")
        failed = rows[statuses == "failed"]
        # A cell whose server never came up (or whose stack or model could not be had)
        # measured no level: it failed before them, which "not run" would hide.
        early = rows[rows["failure_stage"].isin(EARLY_STAGES)]
        if len(failed):
            causes = ", ".join(failed["cause"].dropna().unique()) or "unknown"
            cell["text"] = f"failed ({causes})"
        elif len(early) and not statuses.eq("ok").any():
            stages = " / ".join(early["failure_stage"].dropna().unique())
            causes = ", ".join(early["failure_cause"].dropna().unique()) or "unknown"
            cell["text"] = f"failed at {stages} ({causes})"
        else:
            cell["text"] = "excluded" if statuses.eq("ok").any() else "not run"
        cell["excluded"] = s.excluded if s else ""
    return cell


def verdict_tables(
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    stacks: list[str],
    variants: list[str],
    judging: Judging,
    stats_of: Mapping[Key, CellStats],
    flags: dict | None = None,
    accept: dict | None = None,
) -> list[dict]:
    """Per stack × model: variant × level of the objective, Δ % vs the baseline with its
    interval and what it stands on, and the verdict (`stats_of`: the objective's cells,
    `objective_cells`)."""
    df = summary[summary["level"].notna()].copy()
    df["level"] = df["level"].map(parse_value)
    v = _objective(verdicts, "variant")
    v = v[v["metric"] == judging.objective]
    by = {(r.stack, r.model, r.variant, parse_value(r.level)): r for r in v.itertuples(index=False)}
    tables = []
    for stack in stacks:
        for model in df.loc[df["stack"] == stack, "model"].drop_duplicates():
            sub = df[(df["stack"] == stack) & (df["model"] == model)]
            levels = sorted(sub["level"].unique())
            rows = []
            for variant in [x for x in variants if x in set(sub["variant"])]:
                cells = []
                for level in levels:
                    here = sub[(sub["variant"] == variant) & (sub["level"] == level)]
                    key = (stack, model, variant, level)
                    if len(here):
                        cell = _level_cell(stats_of.get(key), here)
                    else:
                        cell = {"text": fmt.MISSING, "n": 0}
                    cell["noisy"] = (cell.get("noisy_cv") or 0) > judging.noise_cv
                    length = (accept or {}).get(key)
                    cell["accept"] = None if length is None else f"{length:.2f}"
                    c = by.get(key)
                    if c is not None:
                        cell.update(
                            delta=_pct(_num(c.delta_pct)),
                            interval=(
                                ""
                                if math.isnan(_num(c.delta_lo))
                                else f"[{_num(c.delta_lo):+.1f}, {_num(c.delta_hi):+.1f}] %"
                            ),
                            verdict=c.verdict,
                            note=holm_note(c),
                            basis=basis(c),
                            cls=VERDICT_CLASS.get(c.verdict, ""),
                            repeats_needed=None
                            if pd.isna(c.repeats_needed)
                            else int(c.repeats_needed),
                        )
                    cells.append(cell)
                flag = (flags or {}).get((stack, model, variant))
                rows.append({"variant": variant, "cells": cells, "flag": flag})
            components = [
                components_text(
                    next((c for k, c in by.items() if k[:2] == (stack, model) and k[3] == lv), None)
                )
                for lv in levels
            ]
            tables.append(
                {
                    "stack": stack,
                    "model": model,
                    "levels": levels,
                    "rows": rows,
                    "components": components if any(components) else [],
                }
            )
    return tables


def _ranges(levels: list, measured: list) -> str:
    """Levels as runs of the measured ones: [10, 256, 1024] of [1, 10, 256, 1024] ->
    "10–1024"; [1, 1024] of the same -> "1, 1024" (10 and 256 lie between: a range would
    claim them); [1] -> "1"."""
    runs: list[list] = []
    for level in levels:
        if runs and measured.index(level) == measured.index(runs[-1][-1]) + 1:
            runs[-1].append(level)
        else:
            runs.append([level])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def verdict_lines(
    verdicts: pd.DataFrame, kind: str = "variant", flags: dict | None = None
) -> list[str]:
    """One line per compared variant (or stack) in words, from the primary family alone
    (a latency change never calls a variant faster by itself): "continuous-batching: +240 %
    at 10–1024 (faster), no significant change at 1"."""
    v = _objective(verdicts, kind)
    lines = []
    keys = ["stack", "model", "variant"]
    for (stack, model, variant), rows in v.groupby(keys, sort=False):
        parts = []
        measured = sorted({parse_value(x) for x in rows["level"]})
        for verdict in (FASTER, SLOWER, SMALL, SAME, INCONCLUSIVE):
            hit = rows[rows["verdict"] == verdict].sort_values("level")
            if hit.empty:
                continue
            levels = [parse_value(x) for x in hit["level"]]
            deltas = [_num(x) for x in hit["delta_pct"]]
            if verdict in (FASTER, SLOWER):
                lo, hi = min(deltas), max(deltas)
                size = f"{lo:+.0f} %" if round(lo) == round(hi) else f"{lo:+.0f} to {hi:+.0f} %"
                parts.append(f"{size} at {_ranges(levels, measured)} ({verdict})")
            else:
                parts.append(f"{verdict} at {', '.join(map(str, levels))}")
        against = rows["compared_stack"].iloc[0] if kind == "stack" else None
        who = f"{stack} vs {against} / {variant}" if against else variant
        where = f" ({stack} / {model})" if kind == "variant" else f" ({model})"
        flag = (flags or {}).get((stack, model, variant))
        lines.append(f"{who}{where}: " + "; ".join(parts) + (f"; but it {flag}" if flag else ""))
    return lines


def secondary_lines(verdicts: pd.DataFrame) -> list[str]:
    """The secondary family's decided changes (latency percentiles, uncounted levels), one
    line per variant: "ngram-spec: median TPOT −75 % at 1024 (faster)"."""
    if "family" not in verdicts:
        return []
    v = verdicts[
        (verdicts["family"] != PRIMARY)
        & (verdicts["kind"] == "variant")
        & verdicts["verdict"].isin([FASTER, SLOWER])
    ]
    lines = []
    for (stack, model, variant), rows in v.groupby(["stack", "model", "variant"], sort=False):
        parts = [
            f"{r.metric} {_num(r.delta_pct):+.0f} % at {parse_value(r.level)} ({r.verdict})"
            for r in rows.itertuples(index=False)
        ]
        lines.append(f"{variant} ({stack} / {model}): " + "; ".join(parts))
    return lines


def stack_tables(verdicts: pd.DataFrame) -> list[dict]:
    """Same variant on each stack vs the reference stack, per level (primary family)."""
    v = _objective(verdicts, "stack")
    out = []
    for (stack, ref, model), rows in v.groupby(["stack", "compared_stack", "model"], sort=False):
        levels = sorted(parse_value(x) for x in rows["level"].unique())
        table = []
        for variant, vrows in rows.groupby("variant", sort=False):
            by = {parse_value(r.level): r for r in vrows.itertuples(index=False)}
            cells = []
            for level in levels:
                r = by.get(level)
                if r is None:
                    cells.append({"text": fmt.MISSING, "cls": ""})
                    continue
                interval = (
                    ""
                    if math.isnan(_num(r.delta_lo))
                    else f" [{_num(r.delta_lo):+.1f}, {_num(r.delta_hi):+.1f}]"
                )
                cells.append(
                    {
                        "text": f"{_pct(_num(r.delta_pct))}{interval}",
                        "verdict": r.verdict,
                        "cls": VERDICT_CLASS.get(r.verdict, ""),
                    }
                )
            table.append({"variant": variant, "cells": cells})
        out.append(
            {"stack": stack, "reference": ref, "model": model, "levels": levels, "rows": table}
        )
    return out


def resolve_hints(
    verdicts: pd.DataFrame, resolve_pct: float, repeats: RepeatsRule | None = None
) -> list[str]:
    """For every unsettled comparison of the primary family: the boots a side it needs,
    from the pooled scatter, or that no practical number (at most PRACTICAL_MAX_BOOTS, as
    the plan says) would do. Under staged repeats (`repeats`, its max above its min) the
    setting to raise is the stages' max, not a fixed count for every cell."""
    v = _objective(verdicts, "variant")
    v = v[v["verdict"] == SAME]
    hints = []
    for r in v.itertuples(index=False):
        where = (
            f"{r.stack} / {r.model} / {r.variant} vs {r.compared_variant} at {parse_value(r.level)}"
        )
        if math.isnan(_num(r.df)):
            hints.append(f"{where}: no boot scatter to judge by: set benchmark.repeats: 2 or more")
            continue
        if pd.isna(r.repeats_needed):
            continue  # settled: no change larger than ±resolve_pct, or told from none
        spread = (
            f"own CV {100 * _num(r.cv):.1f} % / {100 * _num(r.cv_ref):.1f} %, "
            f"{int(r.n)} / {int(r.n_ref)} boots, {r.variance} scatter"
        )
        target = max(resolve_pct, abs(_num(r.delta_pct)) / 2)
        if int(r.repeats_needed) > PRACTICAL_MAX_BOOTS:
            hints.append(
                f"{where}: more than {PRACTICAL_MAX_BOOTS} boots a side to settle ±{target:.0f} % "
                f"({spread}): the boots scatter too much for repeats to cure; quieten the host"
            )
        elif repeats is not None and repeats.staged:
            needed = int(r.repeats_needed)
            if needed > repeats.max:
                hints.append(
                    f"{where}: raise benchmark.repeats max to {needed} (now {repeats.max}) to "
                    f"settle ±{target:.0f} % ({spread})"
                )
            else:
                outcome = getattr(r, "stage_outcome", None)
                why = f"the stages stopped it: {outcome}" if isinstance(outcome, str) else ""
                hints.append(
                    f"{where}: {needed} boots a side would settle ±{target:.0f} % ({spread}), "
                    f"within repeats max {repeats.max}; {why or 'the stages stopped it'}"
                )
        else:
            hints.append(
                f"{where}: set benchmark.repeats: {int(r.repeats_needed)} to settle "
                f"±{target:.0f} % ({spread})"
            )
    return hints


def first_boot_rows(first: Mapping[object, FirstBootLevel]) -> list[dict]:
    """Per level: first boots against later ones of the same configurations (pooled, on
    the objective), and whether they were left out of the verdicts: the judge's decisions
    as first_boots.csv holds them."""
    rows = []
    for level, fb in first.items():
        c = fb.contrast
        if c is None:
            text, interval = "no configuration has a first and a later boot", ""
        else:
            text = f"{(c.ratio - 1) * 100:+.1f} %"
            interval = f"[{(c.low - 1) * 100:+.1f}, {(c.high - 1) * 100:+.1f}] %"
        rows.append(
            {
                "level": level,
                "delta": text,
                "interval": interval,
                "p": "" if c is None else f"{c.p:.3f}",
                "cells": 0 if c is None else c.cells,
                "action": "left out" if fb.dropped else "kept",
                "why": fb.why,
            }
        )
    return rows


def objective_cells(
    summary: pd.DataFrame, judging: Judging, first: Mapping[object, FirstBootLevel]
) -> dict[Key, CellStats]:
    """Every cell's statistics on the objective, with the judge's first-boot decisions
    (`first`: first_boots.csv): what the verdict tables and the own-scatter list show."""
    return summary_cell_stats(summary, judging.objective, first)


def own_scatter(cells: Mapping[Key, CellStats]) -> list[str]:
    """The configurations the guard judged by their own scatter (on the objective: `cells`
    from `objective_cells`): their boots scatter more than the rest's, so the premise does
    not hold for them."""
    flagged = dict.fromkeys(k[:3] for k, s in cells.items() if s.variance == "own")
    return [f"{variant} ({stack} / {model})" for stack, model, variant in flagged]


def machine_notes(summary: pd.DataFrame) -> list[str]:
    """Each (stack, model) whose boots ran on more than one machine (summary.csv `machine`,
    servesweep.server.machine): "cpu / synthetic: 2 machines (4f1c…: 3 boots, 9a0b…: 2)".
    A machine's effect then sits in the boot scatter, or in a Δ where a variant's boots
    share one machine; the report says so beside the verdicts."""
    if "machine" not in summary.columns:
        return []
    boots = summary.dropna(subset=["machine"]).drop_duplicates(
        ["stack", "model", "variant", "repeat"]
    )
    notes = []
    for (stack, model), rows in boots.groupby(["stack", "model"], sort=False):
        counts = rows["machine"].value_counts()
        if len(counts) > 1:
            each = ", ".join(f"{key}: {n} boot{'s' if n > 1 else ''}" for key, n in counts.items())
            notes.append(f"{stack} / {model}: {len(counts)} machines ({each})")
    return notes
