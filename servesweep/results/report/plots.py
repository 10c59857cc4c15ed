"""The report's plots: matplotlib figures as inline base64 PNGs (no files, no network)."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from servesweep.level import level_key, parse_value
from servesweep.results.judge.board import CellStats, FirstBootLevel, Key, summary_cell_stats


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


def _plain(value: float, _pos=None) -> str:
    """A tick label as a plain number: 0.5, 20, 3000 (not 5 × 10^-1)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def log_axis(axis, low: float, high: float) -> None:
    """A readable log axis: labelled major ticks (decades, and 2 and 5 between them where
    the data spans at most three decades), unlabelled minor ticks."""
    decades = math.log10(high / low) if low > 0 and high > low else 0
    subs = (1.0,) if decades > 3 else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_minor_formatter(NullFormatter())


def metric_plot(*args, **kwargs) -> str | None:
    """metric_figure as an inline PNG (None where there is nothing to draw)."""
    fig = metric_figure(*args, **kwargs)
    return None if fig is None else _png(fig)


def metric_figure(
    summary: pd.DataFrame,
    column: str,
    ylabel: str,
    title: str,
    variants: list[str],
    logy: bool = False,
    first: Mapping[object, FirstBootLevel] | None = None,
    board: Mapping[Key, CellStats] | None = None,
) -> Figure | None:
    """One line per stack / model / variant: the geometric mean over valid boots at each
    level, its 95 % interval as a band (a ratio interval from the pooled boot scatter, as
    the verdicts judge it: never below zero), and every boot's own value as a point.
    `first`: the judge's first-boot decisions (first_boots.csv; absent: none dropped).
    `board`: the cells' statistics on `column` where the caller has them already (the
    objective's, verdict_views.objective_cells); else computed here."""
    df = summary[summary["level"].notna() & summary["valid"]].copy()
    if df.empty or column not in df:
        return None
    if board is None:
        board = summary_cell_stats(summary, column, first or {})
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
        for level in sorted(g["level"].unique()):
            s = board.get((stack, model, variant, level))
            if s is None or not s.n:
                continue
            x = level if math.isfinite(level) else at
            levels.append(x)
            means.append(s.mean)
            lows.append(s.mean if math.isnan(s.low) else s.low)
            highs.append(s.mean if math.isnan(s.high) else s.high)
            points += [(x, v) for v in s.values if v > 0]
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
        log_axis(ax.yaxis, *ax.get_ylim())
    else:
        ax.set_ylim(bottom=0)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
