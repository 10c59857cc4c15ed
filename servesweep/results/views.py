"""What the report's template shows: plain dicts and strings built from the tables and the
cell records (no HTML here; the template escapes everything)."""

from __future__ import annotations

import json
import math

import pandas as pd

from servesweep.results.collect import STACK_FIELDS
from servesweep.results.tables import KEY, ordered, variant_order

# The manifest fields shown side by side: all collected ones but the stack's name, its
# interpreter path and the (long) topology matrix.
STACK_ROWS = [f for f in STACK_FIELDS if f not in ("stack", "python", "topology")]


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
    names = ordered(f"{g.get('name')} ({g.get('memory_total_mib')} MiB)" for g in gpus)
    return ", ".join(f"{len(gpus)} × {n}" if len(names) == 1 else n for n in names)


def manifests(cells: list[dict]) -> dict:
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


def failures(df: pd.DataFrame, cells: list[dict]) -> list[dict]:
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


def gpu_rows(cells: list[dict]) -> list[dict]:
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


def log_text(tail) -> str | None:
    if tail is None:
        return None
    return "\n".join(tail) if isinstance(tail, list) else str(tail)


def cell_view(c: dict, current: str) -> dict:
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


def group_views(df, tput, steady, means, baseline: str, current: str) -> list[dict]:
    """Per stack x model: the headline, steady, latency and client-health tables."""
    cells = df.drop_duplicates(KEY).set_index(KEY)
    lat_metrics = [m for _, m in LATENCY_COLS]
    groups = []
    for stack, model in df[["stack", "model"]].drop_duplicates().itertuples(index=False):
        sub = df[(df["stack"] == stack) & (df["model"] == model)]
        variants = variant_order(sub["variant"], baseline)
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
