"""Tables over summary.csv: per (stack, model, variant, level) across repeats."""

from __future__ import annotations

import math

import pandas as pd

from servesweep.results.stats import delta_ci, mean_ci

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


def _ok_values(rows: pd.DataFrame, metric: str) -> list[float]:
    ok = rows[rows["status"] == "ok"]
    return [float(v) for v in ok[metric] if pd.notna(v)]


def status_of(rows: pd.DataFrame) -> tuple[str, str | None]:
    """(ok|failed|not_run, cause) of one variant x level across its repeats."""
    if (rows["status"] == "ok").any():
        return "ok", None
    failed = rows[rows["status"] == "failed"]
    if len(failed):
        causes = ordered(failed["cause"]) or ordered(failed["failure_cause"])
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
    groups = {k: g for k, g in level_groups(df)}
    rows = []
    for (stack, model, variant, level), g in groups.items():
        vals = _ok_values(g, metric)
        m, ci = mean_ci(vals)
        status, cause = status_of(g)
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
                dci = delta_ci(vals, bvals)
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


def level_means(df: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per (stack, model, variant, level): status, cause and the mean of each metric over
    the ok repeats (percentiles averaged across repeats: simple, good enough to read)."""
    rows = []
    for (stack, model, variant, level), g in level_groups(df):
        status, cause = status_of(g)
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
