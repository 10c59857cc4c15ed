"""The report's plots: matplotlib figures as inline base64 PNGs (no files, no network)."""

from __future__ import annotations

import base64
import io
import math

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from servesweep.level import level_key, parse_value
from servesweep.results.judge.verdicts import level_stats


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def inf_position(levels) -> float:
    """Where an `inf` rate is drawn on a log axis: twice the largest finite level."""
    finite = [lv for lv in levels if math.isfinite(lv)]
    return 2.0 * max(finite) if finite else 1.0


def _levels_axis(ax, levels: list, rate: bool = False) -> None:
    ax.set_xscale("log", base=2)
    at = inf_position(levels)
    ax.set_xticks(
        [lv if math.isfinite(lv) else at for lv in levels],
        [level_key(lv) for lv in levels],
    )
    ax.minorticks_off()
    ax.set_xlabel(
        "request rate (requests / s)" if rate else "concurrency (target in-flight requests)"
    )
    ax.grid(True, alpha=0.3)


def metric_plot(
    summary: pd.DataFrame,
    column: str,
    ylabel: str,
    title: str,
    variants: list[str],
    logy: bool = False,
) -> str | None:
    """One line per stack / model / variant: the mean over valid boots at each level, its
    95 % interval as a band, and every boot's own value as a point."""
    df = summary[summary["level"].notna() & summary["valid"]].copy()
    if df.empty or column not in df:
        return None
    df["level"] = df["level"].map(parse_value)
    rate = "load" in df and (df["load"] == "rate").any()
    at = inf_position(df["level"].unique())
    several = df[["stack", "model"]].drop_duplicates().shape[0] > 1
    order = {v: i for i, v in enumerate(variants)}
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    groups = df.groupby(["stack", "model", "variant"], sort=False)
    for (stack, model, variant), g in sorted(groups, key=lambda kv: order.get(kv[0][2], 99)):
        levels, means, lows, highs, points = [], [], [], [], []
        for level, rows in g.groupby("level"):
            s = level_stats(rows, column)
            if not s.n:
                continue
            level = level if math.isfinite(level) else at
            levels.append(level)
            means.append(s.mean)
            lows.append(s.mean if math.isnan(s.ci_low) else s.ci_low)
            highs.append(s.mean if math.isnan(s.ci_high) else s.ci_high)
            points += [(level, v) for v in s.values]
        if not levels:
            continue
        label = f"{stack} / {model} / {variant}" if several else variant
        (line,) = ax.plot(levels, means, marker="o", label=label)
        ax.fill_between(levels, lows, highs, color=line.get_color(), alpha=0.2)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.scatter(xs, ys, color=line.get_color(), s=14, marker="x", alpha=0.8)
    # Ticks at the configured levels; capacity-search probes (per variant, in between)
    # are drawn but not labelled, so their labels do not overlap.
    probe = df["probe"].astype(str).str.lower().eq("true") if "probe" in df else None
    ticked = df["level"] if probe is None or probe.all() else df.loc[~probe, "level"]
    _levels_axis(ax, sorted(ticked.unique()), rate)
    if logy:
        ax.set_yscale("log")
        # Plain numbers on a log axis (not 6 × 10^0).
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)
