"""Render results/report.html: one self-contained page (inline CSS, base64 PNG plots)."""

from __future__ import annotations

import base64
import io
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import pandas as pd
from matplotlib.figure import Figure

from servesweep import CLIENT_VERSION
from servesweep.collect import STACK_FIELDS, load_cell, read_summary

TEMPLATE_DIR = Path(__file__).parent / "templates"

# Two-sided 95 % Student t quantiles by degrees of freedom; between entries the lower
# df is used (slightly wider, i.e. conservative). Avoids a scipy dependency.
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip

KEY = ["stack", "model", "variant"]

# The manifest fields shown side by side: all collected ones but the stack's name, its
# interpreter path and the (long) topology matrix.
STACK_ROWS = [f for f in STACK_FIELDS if f not in ("stack", "python", "topology")]


def t95(df: float) -> float:
    """0.975 quantile of Student's t with `df` degrees of freedom (table lookup)."""
    for k in sorted(_T95, reverse=True):
        if df >= k:
            return _T95[k]
    return math.nan


def mean_ci(values) -> tuple[float, float | None]:
    """Mean and half-width of its t-based 95 % CI (None with fewer than 2 values)."""
    vals = [float(v) for v in values if pd.notna(v)]
    if not vals:
        return math.nan, None
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return m, None
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
    return m, t95(len(vals) - 1) * sd / math.sqrt(len(vals))


def _delta_ci(v: list[float], b: list[float]) -> tuple[float, float] | None:
    """95 % CI of (mean v / mean b - 1) x 100 from Welch's interval on the difference."""
    if len(v) < 2 or len(b) < 2:
        return None
    mv, mb = sum(v) / len(v), sum(b) / len(b)
    qv = sum((x - mv) ** 2 for x in v) / (len(v) - 1) / len(v)
    qb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    se = math.sqrt(qv + qb)
    if se == 0:
        hw = 0.0
    else:
        dof = se**4 / (qv**2 / (len(v) - 1) + qb**2 / (len(b) - 1))
        hw = t95(dof) * se
    return ((mv - mb - hw) / mb * 100, (mv - mb + hw) / mb * 100)


def _ordered(values) -> list:
    # First-appearance order (the config's order), without duplicates or NaN.
    return list(dict.fromkeys(v for v in values if pd.notna(v)))


def _variant_order(variants, baseline: str) -> list:
    out = _ordered(variants)
    return ([baseline] if baseline in out else []) + [v for v in out if v != baseline]


def _level_groups(df: pd.DataFrame):
    """Yield ((stack, model, variant, level), rows) for rows that have a level."""
    d = df[df["level"].notna()]
    return d.groupby(KEY + ["level"], sort=False)


def _ok_values(rows: pd.DataFrame, metric: str) -> list[float]:
    ok = rows[rows["status"] == "ok"]
    return [float(v) for v in ok[metric] if pd.notna(v)]


def _status_of(rows: pd.DataFrame) -> tuple[str, str | None]:
    """(ok|failed|not_run, cause) of one variant x level across its repeats."""
    if (rows["status"] == "ok").any():
        return "ok", None
    failed = rows[rows["status"] == "failed"]
    if len(failed):
        causes = _ordered(failed["cause"]) or _ordered(failed["failure_cause"])
        return "failed", causes[0] if causes else "unknown"
    return "not_run", None


def throughput_table(df: pd.DataFrame, baseline="baseline", metric="output_throughput"):
    """Variant x level throughput with Δ % vs the baseline variant of the same stack+model.

    One row per (stack, model, variant, level): n (ok repeats), repeats, mean, ci (95 %
    half-width or NaN), baseline_mean, delta_pct, delta_lo/delta_hi (CI of Δ %, needs
    >= 2 repeats on both sides), verdict (faster / slower / no significant change / None),
    status (ok / failed / not_run), cause.
    """
    df = df.copy()
    df["level"] = pd.to_numeric(df["level"], errors="coerce")
    groups = {k: g for k, g in _level_groups(df)}
    rows = []
    for (stack, model, variant, level), g in groups.items():
        vals = _ok_values(g, metric)
        m, ci = mean_ci(vals)
        status, cause = _status_of(g)
        if status == "ok" and not vals:
            status = "not_run"  # ok level without this metric (e.g. an empty steady window)
        row = {
            "stack": stack,
            "model": model,
            "variant": variant,
            "level": int(level),
            "n": len(vals),
            "repeats": len(g),
            "mean": m,
            "ci": math.nan if ci is None else ci,
            "baseline_mean": math.nan,
            "delta_pct": math.nan,
            "delta_lo": math.nan,
            "delta_hi": math.nan,
            "verdict": None,
            "status": status,
            "cause": cause,
        }
        base = groups.get((stack, model, baseline, level))
        bvals = _ok_values(base, metric) if base is not None else []
        if bvals and vals:
            bm = sum(bvals) / len(bvals)
            row["baseline_mean"] = bm
            if variant != baseline and bm > 0:
                row["delta_pct"] = (m / bm - 1) * 100
                dci = _delta_ci(vals, bvals)
                if dci:
                    row["delta_lo"], row["delta_hi"] = dci
                    row["verdict"] = (
                        "faster"
                        if dci[0] > 0
                        else "slower"
                        if dci[1] < 0
                        else "no significant change"
                    )
        rows.append(row)
    cols = ["stack", "model", "variant", "level", "n", "repeats", "mean", "ci", "baseline_mean"]
    cols += ["delta_pct", "delta_lo", "delta_hi", "verdict", "status", "cause"]
    return pd.DataFrame(rows, columns=cols)


# --- formatting -------------------------------------------------------------------------


def fmt(v, nd=1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def fmt_bytes(n) -> str:
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _shade(delta: float, verdict: str | None) -> str:
    # Green for faster, red for slower, stronger for bigger changes; none when the CI
    # says the change is not significant.
    if math.isnan(delta) or verdict == "no significant change":
        return ""
    alpha = 0.12 + min(abs(delta), 100) / 100 * 0.4
    rgb = "46,160,67" if delta > 0 else "214,39,40"
    return f"background: rgba({rgb},{alpha:.2f})"


def _throughput_cell(r) -> dict:
    if r["status"] == "failed":
        return {"text": f"failed ({r['cause']})", "cls": "fail", "style": "", "sub": ""}
    if r["status"] != "ok":
        return {"text": "—", "cls": "na", "style": "", "sub": ""}
    text = fmt(r["mean"])
    if not math.isnan(r["ci"]):
        text += f" ± {fmt(r['ci'])}"
    if not math.isnan(r["delta_pct"]):
        text += f" ({r['delta_pct']:+.1f} %)"
    sub = []
    if isinstance(r["verdict"], str):  # None comes back as NaN from a DataFrame
        sub.append(f"{r['verdict']}; Δ CI {r['delta_lo']:+.1f} … {r['delta_hi']:+.1f} %")
    if r["n"] < r["repeats"]:
        sub.append(f"{r['n']} of {r['repeats']} repeats ok")
    return {
        "text": text,
        "sub": "; ".join(sub),
        "cls": "",
        "style": _shade(r["delta_pct"], r["verdict"]),
    }


def _pivot(table: pd.DataFrame, stack, model, variants, levels) -> list[dict]:
    t = table[(table["stack"] == stack) & (table["model"] == model)]
    by = {(r["variant"], r["level"]): r for r in t.to_dict("records")}
    out = []
    for v in variants:
        cells = []
        for lv in levels:
            r = by.get((v, lv))
            cells.append(
                _throughput_cell(r) if r else {"text": "—", "cls": "na", "style": "", "sub": ""}
            )
        out.append({"variant": v, "cells": cells})
    return out


# --- plots ------------------------------------------------------------------------------


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _line_plot(table: pd.DataFrame, ylabel: str, title: str, logy=False) -> str | None:
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


# --- sections ---------------------------------------------------------------------------


def _level_means(df: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per (stack, model, variant, level): status, cause and the mean of each metric over
    the ok repeats (percentiles averaged across repeats: simple, good enough to read)."""
    rows = []
    for (stack, model, variant, level), g in _level_groups(df):
        status, cause = _status_of(g)
        ok = g[g["status"] == "ok"]
        row = {"stack": stack, "model": model, "variant": variant, "level": int(level)}
        row |= {"status": status, "cause": cause, "n": len(ok), "repeats": len(g)}
        for m in metrics:
            vals = pd.to_numeric(ok[m], errors="coerce") if m in ok else pd.Series([], dtype=float)
            row[m] = float(vals.mean()) if vals.notna().any() else math.nan
        row["client_bound"] = bool(ok["client_bound"].any()) if "client_bound" in ok else False
        for m in ("failed", "retokenized_mismatch"):
            row[m + "_sum"] = (
                int(pd.to_numeric(g[m], errors="coerce").fillna(0).sum()) if m in g else 0
            )
        row["max_lag"] = (
            float(pd.to_numeric(ok["client_max_loop_lag_ms"], errors="coerce").max())
            if "client_max_loop_lag_ms" in ok and len(ok)
            else math.nan
        )
        rows.append(row)
    return pd.DataFrame(rows)


LATENCY_COLS = [
    ("TTFT p50", "median_ttft_ms"),
    ("TTFT p90", "p90_ttft_ms"),
    ("TTFT p99", "p99_ttft_ms"),
    ("TPOT p50", "median_tpot_ms"),
    ("TPOT p90", "p90_tpot_ms"),
    ("TPOT p99", "p99_tpot_ms"),
    ("ITL p50", "median_itl_ms"),
    ("ITL p99", "p99_itl_ms"),
    ("E2E p50", "median_e2el_ms"),
]


def _gpus_text(gpus) -> str:
    if isinstance(gpus, str):
        try:
            gpus = json.loads(gpus)
        except ValueError:
            return gpus
    if not gpus:
        return "—"
    names = _ordered(f"{g.get('name')} ({g.get('memory_total_mib')} MiB)" for g in gpus)
    return ", ".join(f"{len(gpus)} × {n}" if len(names) == 1 else n for n in names)


def _manifests(cells: list[dict]) -> dict:
    stacks: dict[str, dict] = {}
    for c in cells:
        stacks.setdefault(c["stack"], c.get("stack_manifest") or {})
    names = list(stacks)
    rows = []
    for field in STACK_ROWS:
        vals = []
        for s in names:
            v = stacks[s].get(field)
            vals.append(_gpus_text(v) if field == "gpus" else fmt(v, 1))
        rows.append({"field": field, "values": vals, "differs": len(set(vals)) > 1})
    topo = [stacks[s].get("topology") or "—" for s in names]
    return {"stacks": names, "rows": rows, "topology": topo}


def _failures(df: pd.DataFrame, cells: list[dict]) -> list[dict]:
    out = []
    seen = set()
    for c in cells:
        f = c.get("failure")
        if c.get("status") != "failed" and not f:
            continue
        f = f or {}
        out.append(
            {
                "where": f"{c['stack']} / {c['model']} / {c['variant']}",
                "stage": f.get("stage"),
                "cause": f.get("cause"),
                "level": f.get("level"),
                "repeat": f.get("repeat"),
                "message": f.get("message"),
                "log_tail": f.get("log_tail"),
            }
        )
        seen.add((c["stack"], c["model"], c["variant"], f.get("level"), f.get("repeat")))
    # Failed levels the cell's own failure does not already cover (e.g. http_errors).
    bad = df[df["status"] == "failed"]
    for r in bad.to_dict("records"):
        lv = int(r["level"]) if pd.notna(r["level"]) else None
        rep = int(r["repeat"]) if pd.notna(r["repeat"]) else None
        if (r["stack"], r["model"], r["variant"], lv, rep) in seen:
            continue
        out.append(
            {
                "where": f"{r['stack']} / {r['model']} / {r['variant']}",
                "stage": "level",
                "cause": r.get("cause") if pd.notna(r.get("cause")) else "unknown",
                "level": lv,
                "repeat": rep,
                "message": f"errors: {r['errors']}" if pd.notna(r.get("errors")) else None,
                "log_tail": None,
            }
        )
    return out


def _gpu_rows(cells: list[dict]) -> list[dict]:
    """One row per (cell, level, repeat, GPU) with NVML telemetry; none without NVML."""
    rows = []
    for c in cells:
        for lev in c.get("levels") or []:
            gpu = lev.get("gpu") or {}
            if not gpu.get("available"):
                continue
            for g in gpu.get("gpus") or []:
                rows.append(
                    {
                        "where": f"{c['stack']} / {c['model']} / {c['variant']}",
                        "level": lev.get("level"),
                        "repeat": lev.get("repeat"),
                        "gpu": f"{g.get('index')} {g.get('name') or ''}".strip(),
                        "mem_start": fmt(g.get("memory_used_start_mib"), 0),
                        "mem_peak": fmt(g.get("memory_used_peak_mib"), 0),
                        "power": fmt(g.get("power_mean_w")),
                        "energy": fmt(g.get("energy_j")),
                        "j_per_token": fmt(lev.get("joules_per_output_token"), 3),
                    }
                )
    return rows


def _log_text(tail) -> str | None:
    if tail is None:
        return None
    return "\n".join(tail) if isinstance(tail, list) else str(tail)


def _cell_view(c: dict, current: str) -> dict:
    mm = c.get("model_manifest") or {}
    files = mm.get("files") or []
    cv = c.get("client_version")
    return {
        "where": f"{c['stack']} / {c['model']} / {c['variant']}",
        "engine": c.get("engine"),
        "status": c.get("status"),
        "spec_hash": c.get("spec_hash"),
        "client_version": cv,
        "stale": cv is not None and str(cv) != str(current),
        "command_str": c.get("command_str") or " ".join(map(str, c.get("command") or [])),
        "env": sorted((c.get("env") or {}).items()),
        "host": c.get("host"),
        "port": c.get("port"),
        "started_at": c.get("started_at"),
        "finished_at": c.get("finished_at"),
        "model": {
            "name": mm.get("model", c["model"]),
            "source": json.dumps(mm.get("source"), sort_keys=True) if mm.get("source") else "—",
            "path": mm.get("path"),
            "synthetic": bool(mm.get("synthetic")),
            "n_files": len(files),
            "total_bytes": fmt_bytes(mm.get("total_bytes")),
            "files": [(f.get("path"), fmt_bytes(f.get("size")), f.get("sha256")) for f in files],
        },
    }


def _group_views(df, tput, steady, means, baseline: str, current: str) -> list[dict]:
    """Per stack x model: the headline, steady, latency and client-health tables."""
    cells = df.drop_duplicates(KEY).set_index(KEY)
    lat_metrics = [m for _, m in LATENCY_COLS]
    groups = []
    for stack, model in df[["stack", "model"]].drop_duplicates().itertuples(index=False):
        sub = df[(df["stack"] == stack) & (df["model"] == model)]
        variants = _variant_order(sub["variant"], baseline)
        levels = sorted(int(lv) for lv in sub["level"].dropna().unique())
        labels = []
        for v in variants:
            c = cells.loc[(stack, model, v)]
            note = None
            if c["cell_status"] == "failed":
                note = f"failed at {c['failure_stage']} ({c['failure_cause']})"
            stale = pd.notna(c["client_version"]) and str(c["client_version"]) != str(current)
            labels.append({"variant": v, "note": note, "stale": stale})
        lat, health = [], []
        m = means[(means["stack"] == stack) & (means["model"] == model)]
        for v in variants:
            for r in m[m["variant"] == v].sort_values("level").to_dict("records"):
                ok = r["status"] == "ok"
                state = "" if ok else (f"failed ({r['cause']})" if r["status"] == "failed" else "—")
                values = [fmt(r[k]) if ok else "" for k in lat_metrics]
                lat.append({"variant": v, "level": r["level"], "state": state, "values": values})
                target = r["level"]
                if pd.notna(r["num_prompts"]):
                    target = min(target, r["num_prompts"])
                ratio = r["achieved_concurrency"] / target * 100 if ok and target else math.nan
                health.append(
                    {
                        "variant": v,
                        "level": r["level"],
                        "state": state,
                        "target": fmt(target),
                        "achieved": fmt(r["achieved_concurrency"]),
                        "ratio": fmt(ratio, 0),
                        "client_bound": r["client_bound"],
                        "cpu": fmt(r["client_cpu_s"]),
                        "lag": fmt(r["max_lag"]),
                        "failed": r["failed_sum"],
                        "mismatch": r["retokenized_mismatch_sum"],
                    }
                )
        groups.append(
            {
                "stack": stack,
                "model": model,
                "levels": levels,
                "labels": labels,
                "headline": _pivot(tput, stack, model, variants, levels),
                "steady": _pivot(steady, stack, model, variants, levels),
                "latency": lat,
                "health": health,
            }
        )
    return groups


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
    means = _level_means(df, [m for _, m in LATENCY_COLS] + extra)

    plots = [_line_plot(tput, "output tokens / s", "Output throughput vs concurrency")]
    if len(means):
        ttft = means.rename(columns={"p99_ttft_ms": "mean"}).assign(ci=math.nan)
        plots.append(_line_plot(ttft, "TTFT p99 (ms)", "TTFT p99 vs concurrency", logy=True))

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
    synthetic = _ordered(
        c["model"] for c in cells if (c.get("model_manifest") or {}).get("synthetic")
    )
    cell_views = [_cell_view(c, current) for c in cells]

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=True,  # every string from the records is escaped, log tails included
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    html = env.get_template("report.html").render(
        title=title,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        baseline=baseline,
        synthetic=synthetic,
        n_cells=len(cell_rows),
        n_ok=sum(r["cell_status"] == "ok" for r in cell_rows),
        n_failed=sum(r["cell_status"] == "failed" for r in cell_rows),
        n_stale=sum(v["stale"] for v in cell_views),
        current_client_version=current,
        groups=_group_views(df, tput, steady, means, baseline, current),
        latency_cols=[name for name, _ in LATENCY_COLS],
        plots=[p for p in plots if p],
        boots=boots,
        gpu_rows=_gpu_rows(cells),
        failures=_failures(df, cells),
        log_text=_log_text,
        manifests=_manifests(cells),
        cells=cell_views,
    )
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    out_html.write_text(html)
