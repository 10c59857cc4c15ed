"""What the report's template shows below the verdicts: plain dicts and strings built from
summary.csv and the boots' cell records (no HTML here; the template escapes everything)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from servesweep.fmt import MISSING
from servesweep.fmt import size as fmt_bytes
from servesweep.fmt import value as fmt
from servesweep.level import parse_value
from servesweep.records import (
    CellRead,
    CellRecord,
    FailureRead,
    FileRead,
    LevelRead,
    ModelRead,
    StackRead,
    SummaryRow,
)
from servesweep.resources.setup import STAGES as SETUP_STAGES
from servesweep.results.collect.cells import STACK_FIELDS
from servesweep.results.report.gpu_views import link_rows
from servesweep.results.report.tables import KEY, level_means, ordered
from servesweep.stats import describe
from servesweep.sweep.layout import CELL_DIR

# The manifest fields shown side by side: all collected ones but the stack's name, its
# interpreter path and the (long) topology matrix.
STACK_ROWS = [f for f in STACK_FIELDS if f not in ("stack", "python", "topology")]

LATENCY_COLS = [
    ("TTFT p50", "median_ttft_ms"),
    ("TTFT p90", "p90_ttft_ms"),
    ("TTFT p99", "p99_ttft_ms"),
    ("TPOT p50", "median_tpot_ms"),
    ("TPOT p90", "p90_tpot_ms"),
    ("TPOT p99", "p99_tpot_ms"),
    ("ITL p50", "median_itl_ms"),
    ("ITL p90", "p90_itl_ms"),
    ("ITL p99", "p99_itl_ms"),
]


def where(c) -> str:
    return f"{c['stack']} / {c['model']} / {c['variant']}"


def _key(c) -> tuple:
    return tuple(c[k] for k in KEY)


def group_tables(df: pd.DataFrame, variants: list[str]) -> list[dict]:
    """Per stack × model: latency percentiles and client health per variant and level
    (means over the level's ok measurements, all boots)."""
    extra = ["achieved_concurrency", "client_cpu_s", "num_prompts"]
    means = level_means(df, [m for _, m in LATENCY_COLS] + extra)
    groups: list[dict] = []
    if means.empty:
        return groups
    for stack, model in means[["stack", "model"]].drop_duplicates().itertuples(index=False):
        m = means[(means["stack"] == stack) & (means["model"] == model)]
        lat, health = [], []
        for v in [x for x in variants if x in set(m["variant"])]:
            for r in m[m["variant"] == v].sort_values("level").to_dict("records"):
                ok = r["status"] == "ok"
                state = (
                    "" if ok else (f"failed ({r['cause']})" if r["status"] == "failed" else MISSING)
                )
                values = [fmt(r[k]) if ok else "" for k in (c for _, c in LATENCY_COLS)]
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
                        "mismatch": r["usage_mismatch_sum"],
                    }
                )
        groups.append({"stack": stack, "model": model, "latency": lat, "health": health})
    return groups


def boot_costs(cells: list[CellRecord], variants: list[str]) -> list[dict]:
    """Per cell: launch -> ready over its boots (mean ± 95 % interval), what the engine's
    log said the boot cost (CUDA-graph capture) and left (KV-cache tokens), and each boot
    on its own (`per_boot`: time, compile time and whether the compile cache was reused)."""
    by: dict[tuple, list[CellRecord]] = {}
    for c in cells:
        by.setdefault((c["stack"], c["model"], c["variant"]), []).append(c)
    order = {v: i for i, v in enumerate(variants)}
    rows = []
    for key in sorted(by, key=lambda k: (k[0], k[1], order.get(k[2], 99))):
        boots = by[key]
        reads = [CellRead.of(c) for c in boots]
        d = describe([c.boot_s for c in reads if c.boot_s is not None])
        facts = [c.boot_facts or {} for c in reads]
        capture = describe([f["graph_capture_s"] for f in facts if "graph_capture_s" in f])
        kv = ordered(int(f["kv_cache_tokens"]) for f in facts if "kv_cache_tokens" in f)
        rows.append(
            {
                "where": " / ".join(key),
                "boots": len(boots),
                "ok": sum(c.status == "ok" for c in reads),
                "boot": _mean_pm(d),
                "capture": MISSING if not capture.n else f"{capture.mean:.1f}",
                "kv_tokens": ", ".join(f"{k:,}" for k in kv) or "—",
                "per_boot": "; ".join(_boot_line(c) for c in sorted(boots, key=_repeat)),
            }
        )
    return rows


def _repeat(cell: CellRecord) -> int:
    return int(CellRead.of(cell).repeat or 0)


def _boot_line(cell: CellRecord) -> str:
    """One boot, so that a first boot's cold compile is never averaged out of sight:
    `r0 146.2 s (compile 24.6 s, cache miss; init 57.7 s)`."""
    c = CellRead.of(cell)
    f = c.boot_facts or {}
    boot = c.boot_s
    head = f"r{_repeat(cell)} " + (f"{boot:.1f} s" if boot is not None else str(c.status))
    parts = []
    if "compile_s" in f:
        parts.append(f"compile {f['compile_s']:.1f} s")
    if "compile_cache" in f:
        parts.append(f"cache {f['compile_cache']}")
    if "engine_init_s" in f:
        parts.append(f"init {f['engine_init_s']:.1f} s")
    return head + (f" ({', '.join(parts)})" if parts else "")


def _mean_pm(d) -> str:
    if not d.n:
        return MISSING
    return f"{d.mean:.1f}" + (f" ± {d.half_width:.1f}" if d.n > 1 else "")


def validity_rows(df: pd.DataFrame) -> list[dict]:
    """Every measured level kept out of verdicts, and why; and every recomputed one."""
    rows = []
    for row in df[df["level"].notna()].to_dict("records"):
        r = SummaryRow.of(row)
        reasons, recomputed = r.invalid_reasons, r.recomputed_from
        if r.status == "not_run" or not (isinstance(reasons, str) or pd.notna(recomputed)):
            continue
        rows.append(
            {
                "where": where(row),
                "boot": f"r{int(row['repeat'])}",
                "level": parse_value(row["level"]),
                "in_boot": int(r.in_boot) if pd.notna(r.in_boot) else 0,
                "reasons": reasons if isinstance(reasons, str) else "",
                "recomputed": f"from metrics v{recomputed}" if pd.notna(recomputed) else "",
            }
        )
    return rows


def _gpus_text(gpus) -> str:
    if isinstance(gpus, str):
        try:
            gpus = json.loads(gpus)
        except ValueError:
            return gpus
    if not gpus:
        return MISSING
    names = ordered(f"{g.get('name')} ({g.get('memory_total_mib')} MiB)" for g in gpus)
    return ", ".join(f"{len(gpus)} × {n}" if len(names) == 1 else n for n in names)


def manifests(cells: list[CellRecord]) -> dict:
    stacks: dict[str, dict] = {}
    for c in cells:
        stacks.setdefault(c["stack"], CellRead.of(c).stack_manifest or {})
    names = list(stacks)
    status = [StackRead.of(stacks[s]).status or "ok" for s in names]
    rows = [{"field": "status", "values": status, "differs": len(set(status)) > 1}]
    for field in STACK_ROWS:
        vals = []
        for s in names:
            v = stacks[s].get(field)
            vals.append(_gpus_text(v) if field == "gpus" else fmt(v, 1))
        rows.append({"field": field, "values": vals, "differs": len(set(vals)) > 1})
    rows += link_rows(names, stacks, cells)
    topo = [StackRead.of(stacks[s]).topology or "—" for s in names]
    return {"stacks": names, "rows": rows, "topology": topo}


def failures(df: pd.DataFrame, cells: list[CellRecord]) -> list[dict]:
    """Failed boots (stage, cause, log tail), then failed levels a boot's own failure
    does not already cover (e.g. http_errors)."""
    out, seen = [], set()
    for cell in cells:
        c = CellRead.of(cell)
        if c.status != "failed" and not c.failure:
            continue
        f = FailureRead.of(c.failure)
        inherited = f.stage in SETUP_STAGES  # its setup's log is shown once, above
        out.append(
            {
                "where": where(cell),
                "boot": f"r{c.repeat}",
                "stage": f.stage,
                "cause": f.cause,
                "level": f.level,
                "message": f.message,
                "log_tail": None if inherited else f.log_tail,
            }
        )
        seen.add((*_key(cell), c.repeat, f.level))
    for r in df[df["status"] == "failed"].to_dict("records"):
        read = SummaryRow.of(r)
        lv = parse_value(r["level"]) if pd.notna(r["level"]) else None
        if (*_key(r), int(r["repeat"]), lv) in seen:
            continue
        out.append(
            {
                "where": where(r),
                "boot": f"r{int(r['repeat'])}",
                "stage": "level",
                "cause": read.cause if pd.notna(read.cause) else "unknown",
                "level": lv,
                "message": f"errors: {read.errors}" if pd.notna(read.errors) else None,
                "log_tail": None,
            }
        )
    return out


def setup_failures(cells: list[CellRecord]) -> list[dict]:
    """Every stack and model that could not be set up, once (from the manifests the cells
    carry), with how many boots it cost: what the report says first."""
    found: dict[tuple[str, str], dict] = {}
    for c in cells:
        for stage in SETUP_STAGES:
            reader = StackRead if stage == "stack" else ModelRead
            manifest = reader.of(getattr(CellRead.of(c), f"{stage}_manifest"))
            if manifest.status != "failed":
                continue
            f = FailureRead.of(manifest.failure)
            raw: Mapping[str, Any] = c
            entry = found.setdefault(
                (stage, raw[stage]),
                {
                    "stage": stage,
                    "name": raw[stage],
                    "cause": f.cause or "unknown",
                    "message": f.message or "",
                    "log_tail": f.log_tail,
                    "attempt": manifest.attempt,
                    "boots": 0,
                },
            )
            entry["boots"] += 1
    return list(found.values())


def gpu_rows(cells: list[CellRecord]) -> list[dict]:
    """One row per (boot, level, GPU) with NVML telemetry, and the engine's own KV-cache
    usage at its peak during the level (in %, where its engine reports one); none without
    NVML."""
    rows = []
    for c in cells:
        for lev in map(LevelRead.of, CellRead.of(c).levels or []):
            gpu = lev.gpu or {}
            if not gpu.get("available"):
                continue
            kv = ((lev.server_peaks or {}).get("peaks") or {}).get("kv_cache_usage")
            for g in gpu.get("gpus") or []:
                rows.append(
                    {
                        "where": where(c),
                        "boot": f"r{CellRead.of(c).repeat}",
                        "level": lev.level,
                        "gpu": f"{g.get('index')} {g.get('name') or ''}".strip(),
                        "mem_start": fmt(g.get("memory_used_start_mib"), 0),
                        "mem_peak": fmt(g.get("memory_used_peak_mib"), 0),
                        "power": fmt(g.get("power_mean_w")),
                        "energy": fmt(g.get("energy_j")),
                        "j_per_token": fmt(lev.joules_per_output_token, 3),
                        "kv_peak": fmt(100 * kv if kv is not None else None, 2),
                    }
                )
    return rows


def accept_lengths(cells: list[CellRecord]) -> dict[tuple[str, str, str, int], float]:
    """Speculative decoding's mean accept length per (stack, model, variant, level), from the
    engine's snapshot after each level (servesweep.server.engines.base.HEADLINE_KEYS)."""
    found: dict[tuple, list[float]] = {}
    for c in cells:
        for lev in CellRead.of(c).levels or []:
            after = (LevelRead.of(lev).server_after or {}).get("headline") or {}
            value = after.get("spec_accept_length")
            if isinstance(value, int | float) and LevelRead.of(lev).status == "ok":
                found.setdefault((*_key(c), lev["level"]), []).append(float(value))
    return {k: sum(v) / len(v) for k, v in found.items()}


def log_text(tail) -> str | None:
    if tail is None:
        return None
    return "\n".join(tail) if isinstance(tail, list) else str(tail)


def cell_views(cells: list[CellRecord], current: str) -> list[dict]:
    """Per cell: what every boot of it shares (command, env, spec, model) and each boot's
    status with links to its records (relative to results/report.html)."""
    by: dict[tuple, list[CellRecord]] = {}
    for c in cells:
        by.setdefault(_key(c), []).append(c)
    views = []
    for key, boots in by.items():
        first = CellRead.of(boots[0])
        mm = ModelRead.of(first.model_manifest, model=first.model)
        files = [FileRead.of(f) for f in mm.files or []]
        boot_rows = []
        for b in sorted(map(CellRead.of, boots), key=lambda b: b.repeat):
            cv = b.client_version
            directory = CELL_DIR.format(
                stack=key[0], model=key[1], variant=key[2], repeat=b.repeat
            ).removeprefix("results/")
            boot_rows.append(
                {
                    "boot": f"r{b.repeat}",
                    "status": b.status,
                    "stale": cv is not None and str(cv) != str(current),
                    "client_version": cv,
                    "spec_hash": b.spec_hash,
                    "ran": f"{b.started_at or '—'} → {b.finished_at or '—'}",
                    "port": b.port,
                    "links": [
                        ("cell.json", f"{directory}/cell.json"),
                        ("levels", f"{directory}/levels/"),
                        ("server.log", f"{directory}/server.log"),
                    ],
                }
            )
        source = json.dumps(mm.source, sort_keys=True) if mm.source else "—"
        views.append(
            {
                "where": " / ".join(key),
                "engine": first.engine,
                "command_str": first.command_str
                or " ".join(map(str, first.command or []))
                or "(not launched)",
                "env": sorted((first.env or {}).items()),
                "boots": boot_rows,
                "model": {
                    "name": mm.model,
                    "source": source,
                    "path": mm.path,
                    "synthetic": bool(mm.synthetic),
                    "n_files": len(files),
                    "total_bytes": fmt_bytes(mm.total_bytes),
                    "files": [(f.path, fmt_bytes(f.size), f.sha256) for f in files],
                },
            }
        )
    return views
