"""The Pareto view (docs/load_modes.md): per-user output speed against output throughput
per GPU, every level of every variant a point, each variant's frontier and the overall
one; with `cost:` the price of a million output tokens, and J per token where NVML measured.

Per-user speed is 1000 / median TPOT (tok/s one request sees while it decodes); per-GPU
throughput is the level's output throughput over the GPUs the cell holds (a CPU cell, with
none, counts as one server)."""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd
from matplotlib.figure import Figure

from servesweep.level import level_key, parse_value
from servesweep.results.report.plots import _png


class Point(NamedTuple):
    stack: str
    model: str
    variant: str
    level: object
    per_user: float  # output tok/s per request (1000 / median TPOT)
    per_gpu: float  # output tok/s per GPU (or per server without GPUs)
    gpus: int
    usd_per_mtok: float | None
    joules_per_token: float | None
    frontier: bool = False  # on its variant's frontier
    overall: bool = False  # on the overall frontier


def frontier(points: list[tuple[float, float]]) -> set[int]:
    """Indices of the points no other point beats on both axes (higher is better on both)."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    best, keep = -math.inf, set()
    for i in order:
        if points[i][1] > best:
            keep.add(i)
            best = points[i][1]
    return keep


def _mean(rows: pd.DataFrame, column: str) -> float | None:
    if column not in rows:
        return None
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def pareto_points(
    summary: pd.DataFrame, gpus: dict[tuple[str, str, str], int], cost: dict | None
) -> list[Point]:
    """One point per (stack, model, variant, level): the mean over its valid boots."""
    df = summary[summary["level"].notna() & summary["valid"]]
    points: list[Point] = []
    for (stack, model, variant, level), rows in df.groupby(
        ["stack", "model", "variant", "level"], sort=False
    ):
        tpot, tput = _mean(rows, "median_tpot_ms"), _mean(rows, "output_throughput")
        if not tpot or not tput:
            continue
        n = gpus.get((stack, model, variant), 0)
        per_gpu = tput / max(n, 1)
        usd = None
        if cost and n:
            usd = cost["usd_per_gpu_hour"] / 3600 / per_gpu * 1e6
        points.append(
            Point(
                stack,
                model,
                variant,
                parse_value(level),
                1000 / tpot,
                per_gpu,
                n,
                None if usd is None else round(usd, 4),
                _mean(rows, "joules_per_output_token"),
            )
        )
    overall = frontier([(p.per_user, p.per_gpu) for p in points])
    out = []
    for key in dict.fromkeys((p.stack, p.model, p.variant) for p in points):
        idx = [i for i, p in enumerate(points) if (p.stack, p.model, p.variant) == key]
        own = frontier([(points[i].per_user, points[i].per_gpu) for i in idx])
        for j, i in enumerate(idx):
            out.append(points[i]._replace(frontier=j in own, overall=i in overall))
    return out


def pareto_plot(points: list[Point], variants: list[str]) -> str | None:
    if not points:
        return None
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    order = {v: i for i, v in enumerate(variants)}
    keys = sorted(
        dict.fromkeys((p.stack, p.model, p.variant) for p in points),
        key=lambda k: order.get(k[2], 99),
    )
    several = len({k[:2] for k in keys}) > 1
    for key in keys:
        mine = [p for p in points if (p.stack, p.model, p.variant) == key]
        label = " / ".join(key) if several else key[2]
        dots = ax.scatter([p.per_user for p in mine], [p.per_gpu for p in mine], s=24)
        color = dots.get_facecolor()[0]
        front = sorted((p for p in mine if p.frontier), key=lambda p: p.per_user)
        ax.plot([p.per_user for p in front], [p.per_gpu for p in front], color=color, label=label)
        for p in mine:
            ax.annotate(
                level_key(p.level),
                (p.per_user, p.per_gpu),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    best = sorted((p for p in points if p.overall), key=lambda p: p.per_user)
    ax.plot(
        [p.per_user for p in best], [p.per_gpu for p in best], "k--", lw=1, label="overall frontier"
    )
    ax.scatter(
        [p.per_user for p in best],
        [p.per_gpu for p in best],
        s=90,
        facecolors="none",
        edgecolors="k",
    )
    unit = "GPU" if any(p.gpus for p in points) else "server (no GPU)"
    ax.set_xlabel("per-user output speed (tok/s per request, 1000 / median TPOT)")
    ax.set_ylabel(f"output tok/s per {unit}")
    ax.set_title("Per-user speed vs throughput (labels: level)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)
