"""The report's plots: matplotlib figures as inline base64 PNGs (no files, no network)."""

from __future__ import annotations

import base64
import io

import pandas as pd
from matplotlib.figure import Figure

from servesweep.results.tables import KEY


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def line_plot(table: pd.DataFrame, ylabel: str, title: str, logy=False) -> str | None:
    """One line per stack/model/variant over the ok levels; CI band when there is one."""
    ok = table[table["status"] == "ok"]
    if ok.empty:
        return None
    several = ok[["stack", "model"]].drop_duplicates().shape[0] > 1
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    for (stack, model, variant), g in ok.groupby(KEY, sort=False):
        g = g.sort_values("level")
        label = f"{stack} / {model} / {variant}" if several else variant
        (line,) = ax.plot(g["level"], g["mean"], marker="o", label=label)
        if g["ci"].notna().any():
            ci = g["ci"].fillna(0)
            ax.fill_between(
                g["level"], g["mean"] - ci, g["mean"] + ci, color=line.get_color(), alpha=0.2
            )
    levels = sorted(ok["level"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(lv) for lv in levels])
    ax.minorticks_off()
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("concurrency (target in-flight requests)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)
