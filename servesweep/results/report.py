"""Render results/report.html: one self-contained page (inline CSS, base64 PNG plots)."""

from __future__ import annotations

import math
from pathlib import Path

import jinja2
import pandas as pd

from servesweep import CLIENT_VERSION
from servesweep.bench.metrics import CLIENT_BOUND_RATIO, CLIENT_CPU_SATURATED
from servesweep.jsonfile import utc_now
from servesweep.results.collect import load_cell, read_summary
from servesweep.results.plots import line_plot
from servesweep.results.tables import KEY, level_means, ordered, throughput_table
from servesweep.results.views import (
    LATENCY_COLS,
    cell_view,
    failures,
    fmt,
    gpu_rows,
    group_views,
    log_text,
    manifests,
)

TEMPLATE_DIR = Path(__file__).parent / "templates"


def build_report(
    summary_csv: Path,
    cell_paths: list[Path],
    out_html: Path,
    baseline: str = "baseline",
    title: str = "servesweep report",
    current_client_version: str | None = None,
) -> None:
    """Write one self-contained HTML report from summary.csv plus the cells' cell.json."""
    current = current_client_version if current_client_version is not None else CLIENT_VERSION
    df = read_summary(summary_csv)
    df["level"] = pd.to_numeric(df["level"], errors="coerce")
    cells = [load_cell(p) for p in cell_paths]

    tput = throughput_table(df, baseline, "output_throughput")
    steady = throughput_table(df, baseline, "steady_output_throughput")
    extra = ["achieved_concurrency", "client_cpu_s", "num_prompts"]
    means = level_means(df, [m for _, m in LATENCY_COLS] + extra)

    plots = [line_plot(tput, "output tokens / s", "Output throughput vs concurrency")]
    if len(means):
        ttft = means.rename(columns={"p99_ttft_ms": "mean"}).assign(ci=math.nan)
        plots.append(line_plot(ttft, "TTFT p99 (ms)", "TTFT p99 vs concurrency", logy=True))

    # Cell-level facts come from summary.csv, so every collected cell is counted.
    cell_rows = df.drop_duplicates(KEY).to_dict("records")
    boots = [
        {
            "where": f"{r['stack']} / {r['model']} / {r['variant']}",
            "engine": r["engine"] if pd.notna(r["engine"]) else "—",
            "status": r["cell_status"],
            "boot_s": fmt(r["boot_s"]),
        }
        for r in cell_rows
    ]
    synthetic = ordered(
        c["model"] for c in cells if (c.get("model_manifest") or {}).get("synthetic")
    )
    cell_views = [cell_view(c, current) for c in cells]

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=True,  # every string from the records is escaped, log tails included
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    html = env.get_template("report.html").render(
        title=title,
        generated=utc_now(),
        baseline=baseline,
        synthetic=synthetic,
        n_cells=len(cell_rows),
        n_ok=sum(r["cell_status"] == "ok" for r in cell_rows),
        n_failed=sum(r["cell_status"] == "failed" for r in cell_rows),
        n_stale=sum(v["stale"] for v in cell_views),
        current_client_version=current,
        groups=group_views(df, tput, steady, means, baseline, current),
        latency_cols=[name for name, _ in LATENCY_COLS],
        plots=[p for p in plots if p],
        boots=boots,
        gpu_rows=gpu_rows(cells),
        failures=failures(df, cells),
        log_text=log_text,
        manifests=manifests(cells),
        cells=cell_views,
        limits={
            "client_bound_pct": f"{CLIENT_BOUND_RATIO * 100:g}",
            "client_cpu_saturated_pct": f"{CLIENT_CPU_SATURATED * 100:g}",
        },
    )
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_html.write_text(html)
