"""The report's top: the verdict tables and the lines that say them in words.

Plain dicts and strings for the template (which escapes everything); the numbers come from
`servesweep.results.judge.verdicts`.
"""

from __future__ import annotations

import math

import pandas as pd

from servesweep import fmt
from servesweep.level import parse_value
from servesweep.results.judge.verdicts import (
    FASTER,
    HEADLINE_METRIC,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    SMALL,
    level_stats,
)
from servesweep.stats import PRACTICAL_MAX_BOOTS

# Template classes per verdict (colour).
VERDICT_CLASS = {
    FASTER: "faster",
    SLOWER: "slower",
    SMALL: "same",
    SAME: "same",
    INCONCLUSIVE: "inconclusive",
}


def holm_note(c) -> str:
    """Beside an interval that excludes zero on its own but whose verdict is no significant
    change: the variant's family of comparisons (Holm) did not reject it."""
    low, high = _num(c.delta_lo), _num(c.delta_hi)
    if c.verdict == SAME and (low > 0 or high < 0):
        return f"not significant across the variant's comparisons (Holm p {_num(c.p_holm):.2f})"
    return ""


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _pct(v: float) -> str:
    return fmt.MISSING if math.isnan(v) else f"{v:+.1f} %"


def _mean_text(mean: float, low: float, high: float) -> str:
    if math.isnan(mean):
        return fmt.MISSING
    if math.isnan(low):
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {(high - low) / 2:.1f}"


def _level_cell(summary_rows: pd.DataFrame) -> dict:
    """The baseline-side facts of one (cell, level): mean ± CI over valid boots, or why
    there is none."""
    s = level_stats(summary_rows, HEADLINE_METRIC)
    cell = {"text": _mean_text(s.mean, s.ci_low, s.ci_high), "n": s.n, "boots": s.boots}
    cell["noisy_cv"] = None if math.isnan(s.cv) else s.cv
    if s.n == 0:
        statuses = summary_rows["status"].fillna("not_run")
        failed = summary_rows[statuses == "failed"]
        if len(failed):
            causes = ", ".join(failed["cause"].dropna().unique()) or "unknown"
            cell["text"] = f"failed ({causes})"
        else:
            cell["text"] = "excluded" if statuses.eq("ok").any() else "not run"
        cell["excluded"] = s.excluded
    return cell


def verdict_tables(
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    stacks: list[str],
    variants: list[str],
    noise_cv: float,
    flags: dict | None = None,
    accept: dict | None = None,
) -> list[dict]:
    """Per stack × model: variant × level of output tok/s, Δ % vs the baseline with its
    interval, and the verdict."""
    df = summary[summary["level"].notna()].copy()
    df["level"] = df["level"].map(parse_value)
    v = verdicts[(verdicts["metric"] == HEADLINE_METRIC) & (verdicts["kind"] == "variant")]
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
                    cell = _level_cell(here) if len(here) else {"text": fmt.MISSING, "n": 0}
                    cell["noisy"] = (cell.get("noisy_cv") or 0) > noise_cv
                    length = (accept or {}).get((stack, model, variant, parse_value(level)))
                    cell["accept"] = None if length is None else f"{length:.2f}"
                    c = by.get((stack, model, variant, parse_value(level)))
                    if c is not None:
                        cell.update(
                            delta=_pct(_num(c.delta_pct)),
                            interval=(
                                ""
                                if math.isnan(_num(c.delta_lo))
                                else f"[{_num(c.delta_lo):+.1f}, {_num(c.delta_hi):+.1f}] %"
                            ),
                            verdict=c.verdict,
                            note=holm_note(c) if hasattr(c, "p_holm") else "",
                            cls=VERDICT_CLASS.get(c.verdict, ""),
                            repeats_needed=None
                            if pd.isna(c.repeats_needed)
                            else int(c.repeats_needed),
                        )
                    cells.append(cell)
                flag = (flags or {}).get((stack, model, variant))
                rows.append({"variant": variant, "cells": cells, "flag": flag})
            tables.append({"stack": stack, "model": model, "levels": levels, "rows": rows})
    return tables


def _ranges(levels: list[int]) -> str:
    """[10, 256, 1024] -> "10–1024"; [1] -> "1"."""
    if not levels:
        return ""
    return str(levels[0]) if len(levels) == 1 else f"{levels[0]}–{levels[-1]}"


def verdict_lines(
    verdicts: pd.DataFrame, kind: str = "variant", flags: dict | None = None
) -> list[str]:
    """One line per compared variant (or stack) in words, from the headline metric:
    "continuous-batching: +240 % at 10–1024 (faster), no significant change at 1"."""
    v = verdicts[(verdicts["metric"] == HEADLINE_METRIC) & (verdicts["kind"] == kind)]
    lines = []
    keys = ["stack", "model", "variant"]
    for (stack, model, variant), rows in v.groupby(keys, sort=False):
        parts = []
        for verdict in (FASTER, SLOWER, SMALL, SAME, INCONCLUSIVE):
            hit = rows[rows["verdict"] == verdict].sort_values("level")
            if hit.empty:
                continue
            levels = [parse_value(x) for x in hit["level"]]
            deltas = [_num(x) for x in hit["delta_pct"]]
            if verdict in (FASTER, SLOWER):
                lo, hi = min(deltas), max(deltas)
                size = f"{lo:+.0f} %" if round(lo) == round(hi) else f"{lo:+.0f} to {hi:+.0f} %"
                parts.append(f"{size} at {_ranges(levels)} ({verdict})")
            else:
                parts.append(f"{verdict} at {', '.join(map(str, levels))}")
        against = rows["compared_stack"].iloc[0] if kind == "stack" else None
        who = f"{stack} vs {against} / {variant}" if against else variant
        where = f" ({stack} / {model})" if kind == "variant" else f" ({model})"
        flag = (flags or {}).get((stack, model, variant))
        lines.append(f"{who}{where}: " + "; ".join(parts) + (f"; but it {flag}" if flag else ""))
    return lines


def stack_tables(verdicts: pd.DataFrame) -> list[dict]:
    """Same variant on each stack vs the reference stack, per level (headline metric)."""
    v = verdicts[(verdicts["metric"] == HEADLINE_METRIC) & (verdicts["kind"] == "stack")]
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


def resolve_hints(verdicts: pd.DataFrame, resolve_pct: float) -> list[str]:
    """For every unresolved comparison of the headline metric: the boots it needs, or that
    no practical number (at most `PRACTICAL_MAX_BOOTS`, as the plan says) would do: the
    noise must come down first."""
    v = verdicts[(verdicts["metric"] == HEADLINE_METRIC) & (verdicts["verdict"] == SAME)]
    hints = []
    for r in v.itertuples(index=False):
        width = (_num(r.delta_hi) - _num(r.delta_lo)) / 2
        if math.isnan(width) or width <= resolve_pct:
            continue  # resolved: no change larger than ±resolve_pct
        versus = r.compared_variant if r.kind == "variant" else r.compared_stack
        where = f"{r.stack} / {r.model} / {r.variant} vs {versus} at {parse_value(r.level)}"
        spread = f"CV {100 * _num(r.cv):.1f} % / {100 * _num(r.cv_ref):.1f} %, {int(r.n)} boots"
        if pd.isna(r.repeats_needed) or int(r.repeats_needed) > PRACTICAL_MAX_BOOTS:
            hints.append(
                f"{where}: ±{width:.0f} % now; too noisy to resolve ±{resolve_pct:g} % with a "
                f"practical number of boots (at most {PRACTICAL_MAX_BOOTS}; {spread}): "
                "quieten the host first"
            )
        else:
            hints.append(
                f"{where}: {int(r.repeats_needed)} boots per side would resolve "
                f"±{resolve_pct:g} % ({spread})"
            )
    return hints
