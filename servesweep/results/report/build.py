"""Render results/report.html: one self-contained page (inline CSS, base64 PNG plots).

It opens with what a reviewer decides on: the verdict of every variant against its baseline
(and of every stack against the reference stack), with intervals from repeats across boots,
in a table and in words; then the evidence: plots with each boot's point, latency, boot
cost, stacks side by side, what was kept out of verdicts and why, failures, and per cell
the exact command with links to its records.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import jinja2
import pandas as pd

from servesweep import CLIENT_VERSION, METRICS_VERSION, fmt
from servesweep.bench.metrics import CLIENT_BOUND_RATIO, CLIENT_CPU_SATURATED
from servesweep.correctness import views as correctness_views
from servesweep.hunt.record import HuntRecord
from servesweep.jsonfile import utc_now
from servesweep.level import level_key
from servesweep.records import CellRead, CellRecord, ModelRead, SpecRead
from servesweep.results.collect.cells import load_cells, read_summary
from servesweep.results.collect.validity import GATES
from servesweep.results.judge.board import FIRST_BOOTS_CSV, read_first_boots
from servesweep.results.judge.capacity import capacity_rows
from servesweep.results.judge.verdicts import FASTER, SLOWER, Judging, to_frame
from servesweep.results.report import hunt_views, load_views, verdict_views, views
from servesweep.results.report.pareto import pareto_plot, pareto_points
from servesweep.results.report.plots import metric_plot
from servesweep.results.report.tables import ordered
from servesweep.sweep.analysis import AnalysisSettings

if TYPE_CHECKING:
    from servesweep.sweep.stages import RepeatsRule

TEMPLATE_DIR = Path(__file__).parent / "templates"


class ReportSettings(NamedTuple):
    """What the report needs of the sweep: its order and how it judges."""

    stacks: list[str]
    variants: list[str]
    analysis: AnalysisSettings | Mapping  # the sweep's `analysis:`
    title: str = "servesweep report"
    slo: dict | None = None  # the sweep's `slo:` (goodput is in summary.csv already)
    cost: dict | None = None  # the sweep's `cost:`
    judging: Judging | None = None  # how the verdicts were judged (default: from analysis)
    repeats: RepeatsRule | None = None  # the sweep's boots: staged or fixed (None: fixed)


def _order(names: list[str], found) -> list[str]:
    """The configured order, then anything else the records hold."""
    return [*names, *[x for x in ordered(found) if x not in names]]


def pareto_view(
    df: pd.DataFrame, cells: list[CellRecord], variants: list[str], cost
) -> dict | None:
    gpus = {
        (c["stack"], c["model"], c["variant"]): int(SpecRead.of(CellRead.of(c).spec).gpus or 0)
        for c in cells
    }
    points = pareto_points(df, gpus, cost)
    plot = pareto_plot(points, variants)
    if plot is None:
        return None

    rows = [
        {
            "stack": p.stack,
            "model": p.model,
            "variant": p.variant,
            "level": level_key(p.level),
            "per_user": fmt.number(p.per_user, 1),
            "per_gpu": fmt.number(p.per_gpu, 1),
            "gpus": p.gpus,
            "usd": fmt.number(p.usd_per_mtok, 3),
            "joules": fmt.number(p.joules_per_token, 4),
            "where": "overall" if p.overall else ("variant" if p.frontier else ""),
        }
        for p in points
    ]
    return {
        "plot": plot,
        "points": rows,
        "unit": "GPU" if any(p.gpus for p in points) else "server",
        "priced": any(p.usd_per_mtok is not None for p in points),
    }


def capacity_view(cells: list[CellRecord], variants: list[str], baseline: str) -> list[dict]:
    words: dict[str, str] = {FASTER: "higher", SLOWER: "lower"}

    return [
        {
            "where": f"{r.stack} / {r.model}",
            "variant": r.variant,
            "boots": "; ".join(r.boots),
            "mean": fmt.number(r.mean, 2),
            "delta": "" if r.delta_pct is None else f"{r.delta_pct:+.1f} %",
            "ci": "" if r.ci_low is None else f"[{r.ci_low:+.1f}, {r.ci_high:+.1f}] %",
            "verdict": words.get(r.verdict, r.verdict),
        }
        for r in capacity_rows(cells, variants, baseline)
    ]


def read_verdicts(path: Path) -> pd.DataFrame:
    """verdicts.csv with every column, also when nothing was compared (one variant, or
    nothing valid): the views group it by those columns."""
    empty = to_frame([])
    if not path.exists() or not path.stat().st_size:
        return empty
    verdicts = pd.read_csv(path)
    return empty if verdicts.empty else verdicts


def build_report(
    summary_csv: Path,
    verdicts_csv: Path,
    cell_paths: list[Path],
    out_html: Path,
    settings: ReportSettings,
    current_client_version: str | None = None,
    correctness_csv: Path | None = None,
    hunt: HuntRecord | None = None,
    first_boots_csv: Path | None = None,
) -> None:
    """Write one self-contained HTML report from summary.csv, verdicts.csv, the judge's
    first-boot decisions (`first_boots_csv`, default first_boots.csv beside verdicts.csv)
    and the boots' cell.json; a hunt's results/hunt/hunt.json (`hunt`) opens it."""
    current = current_client_version if current_client_version is not None else CLIENT_VERSION
    df = read_summary(summary_csv)
    df["level"] = pd.to_numeric(df["level"], errors="coerce")
    verdicts = read_verdicts(Path(verdicts_csv))
    first = read_first_boots(first_boots_csv or Path(verdicts_csv).with_name(FIRST_BOOTS_CSV))
    cells = [cell for cell, _ in load_cells(cell_paths)]  # each read once, checked
    stacks = _order(settings.stacks, df["stack"])
    variants = _order(settings.variants, df["variant"])
    analysis = AnalysisSettings.of(settings.analysis)
    baseline = analysis.baseline
    variants = [baseline, *[v for v in variants if v != baseline]]

    judging = settings.judging or Judging.of(analysis)
    on_objective = verdict_views.objective_cells(df, judging, first)
    plots = [
        metric_plot(
            df, "output_throughput", "output tokens / s", "Output throughput", variants,
            first=first,
            board=on_objective if judging.objective == "output_throughput" else None,
        ),
        metric_plot(
            df, "p99_ttft_ms", "TTFT p99 (ms)", "TTFT p99", variants, logy=True, first=first
        ),
        metric_plot(
            df, "median_tpot_ms", "TPOT p50 (ms)", "TPOT p50", variants, logy=True,
            first=first,
        ),
    ]  # fmt: skip
    synthetic = ordered(
        c["model"] for c in cells if ModelRead.of(CellRead.of(c).model_manifest).synthetic
    )
    boots = {(c["stack"], c["model"], c["variant"], CellRead.of(c).repeat): c for c in cells}
    answers = correctness_views.read_rows(correctness_csv)
    flags = correctness_views.flagged_variants(answers)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=True,  # every string from the records is escaped, log tails included
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    html = env.get_template("report.html").render(
        title=settings.title,
        generated=utc_now(),
        baseline=baseline,
        hunt=hunt_views.hunt_view(hunt),
        synthetic=synthetic,
        counts={
            "cells": len({k[:3] for k in boots}),
            "boots": len(boots),
            "ok": sum(c["status"] == "ok" for c in cells),
            "failed": sum(c["status"] == "failed" for c in cells),
            "stale": sum(str(CellRead.of(c).client_version) != str(current) for c in cells),
            "excluded": int((df["level"].notna() & ~df["valid"] & (df["status"] == "ok")).sum()),
            "recomputed": int(df["recomputed_from"].notna().sum()),
        },
        slo=settings.slo,
        load_table=load_views.load_table(df, variants),
        pareto=pareto_view(df, cells, variants, settings.cost),
        capacity=capacity_view(cells, variants, baseline),
        searched=any(
            (SpecRead.of(CellRead.of(c).spec).benchmark or {}).get("search") for c in cells
        ),
        current_client_version=current,
        metrics_version=METRICS_VERSION,
        judging=judging,
        verdict_tables=verdict_views.verdict_tables(
            df,
            verdicts,
            stacks,
            variants,
            judging,
            on_objective,
            flags,
            views.accept_lengths(cells),
        ),
        verdict_lines=verdict_views.verdict_lines(verdicts, flags=flags),
        secondary_lines=verdict_views.secondary_lines(verdicts),
        first_boots=verdict_views.first_boot_rows(first),
        own_scatter=verdict_views.own_scatter(on_objective),
        machines=verdict_views.machine_notes(df),
        correctness=correctness_views.correctness_rows(answers),
        stack_lines=verdict_views.verdict_lines(verdicts, kind="stack"),
        stack_tables=verdict_views.stack_tables(verdicts),
        hints=verdict_views.resolve_hints(verdicts, judging.resolve_pct, settings.repeats),
        repeats_staged=bool(settings.repeats and settings.repeats.staged),
        plots=[p for p in plots if p],
        groups=views.group_tables(df, variants),
        latency_cols=[name for name, _ in views.LATENCY_COLS],
        boot_costs=views.boot_costs(cells, variants),
        validity=views.validity_rows(df),
        gates=GATES,
        gpu_rows=views.gpu_rows(cells),
        failures=views.failures(df, cells),
        setup_failures=views.setup_failures(cells),
        log_text=views.log_text,
        manifests=views.manifests(cells),
        cells=views.cell_views(cells, current),
        limits={
            "client_bound_pct": f"{CLIENT_BOUND_RATIO * 100:g}",
            "client_cpu_saturated_pct": f"{CLIENT_CPU_SATURATED * 100:g}",
        },
    )
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_html.write_text(html)
