"""Tables over summary.csv: per (stack, model, variant, level) across its boots."""

from __future__ import annotations

import math

import pandas as pd

from servesweep.level import parse_value

KEY = ["stack", "model", "variant"]


def ordered(values) -> list:
    # First-appearance order (the config's order), without duplicates or NaN.
    return list(dict.fromkeys(v for v in values if pd.notna(v)))


def variant_order(variants, baseline: str) -> list:
    out = ordered(variants)
    return ([baseline] if baseline in out else []) + [v for v in out if v != baseline]


def level_groups(df: pd.DataFrame):
    """Yield ((stack, model, variant, level), rows) for rows that have a level."""
    d = df[df["level"].notna()]
    return d.groupby(KEY + ["level"], sort=False)


def status_of(rows: pd.DataFrame) -> tuple[str, str | None]:
    """(ok|failed|not_run, cause) of one variant x level across its boots."""
    if (rows["status"] == "ok").any():
        return "ok", None
    failed = rows[rows["status"] == "failed"]
    if len(failed):
        causes = ordered(failed["cause"]) or ordered(failed["failure_cause"])
        return "failed", causes[0] if causes else "unknown"
    return "not_run", None


def level_means(df: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per (stack, model, variant, level): status, cause and the mean of each metric over
    its ok measurements, all boots together (percentiles averaged: simple, good enough to
    read; the verdicts resample the requests instead)."""
    rows = []
    for (stack, model, variant, level), g in level_groups(df):
        status, cause = status_of(g)
        ok = g[g["status"] == "ok"]
        row = {"stack": stack, "model": model, "variant": variant, "level": parse_value(level)}
        row |= {"status": status, "cause": cause, "n": len(ok), "repeats": len(g)}
        for m in metrics:
            vals = pd.to_numeric(ok[m], errors="coerce") if m in ok else pd.Series([], dtype=float)
            row[m] = float(vals.mean()) if vals.notna().any() else math.nan
        row["client_bound"] = bool(ok["client_bound"].any()) if "client_bound" in ok else False
        for m in ("failed", "usage_mismatch"):
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
