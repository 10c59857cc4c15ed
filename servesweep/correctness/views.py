"""The report's correctness section: does a variant change the answers? (results/correctness.csv)"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from servesweep import fmt
from servesweep.correctness.compare import CorrectnessRow


def read_rows(path: Path | None) -> pd.DataFrame:
    if path is None or not Path(path).exists() or not Path(path).stat().st_size:
        return pd.DataFrame()
    return pd.read_csv(path)


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _fmt(v, spec: str) -> str:
    x = _num(v)
    return fmt.MISSING if math.isnan(x) else format(x, spec)


def correctness_rows(rows: pd.DataFrame) -> list[dict]:
    """One row per comparison and mode, as the template shows them."""
    out = []
    for r in rows.to_dict("records"):
        row = CorrectnessRow.of(r)
        same_cell = (r["compared_to_variant"], r["compared_to_stack"]) == (r["variant"], r["stack"])
        if same_cell:
            versus = "its own one-at-a-time answers"
        else:
            versus = f"{r['compared_to_stack']} / {r['compared_to_variant']}"
        flagged = str(row.changes_outputs).lower() == "true"
        out.append(
            {
                "where": f"{r['stack']} / {r['model']} / {r['variant']}",
                "versus": versus,
                "mode": str(r["mode"]).replace("_", " "),
                "rate": _fmt(row.exact_match_rate, ".3f"),
                "first_diff": _fmt(row.mean_first_diff, ".1f"),
                "basis": row.token_basis or fmt.MISSING,
                "logprob_delta": _fmt(row.max_abs_logprob_delta, ".3g"),
                "top_k": _fmt(row.baseline_in_top_k_share, ".2f"),
                "threshold": _fmt(row.threshold, ".2f"),
                "must_match": str(row.must_match).lower() == "true",
                "flagged": flagged,
                "note": row.note if isinstance(row.note, str) else "",
            }
        )
    return out


def flagged_variants(rows: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """(stack, model, variant) -> "changes outputs (exact match 0.750, all together)" for
    every variant whose answers differ from its baseline's beyond the threshold."""
    if rows.empty:
        return {}
    out: dict[tuple[str, str, str], str] = {}
    bad = rows[rows["changes_outputs"].astype(str).str.lower() == "true"]
    for r in bad.to_dict("records"):
        if r["compared_to_variant"] == r["variant"] and r["compared_to_stack"] == r["stack"]:
            continue  # a server's own modes: shown in the section, not against the baseline
        key = (r["stack"], r["model"], r["variant"])
        rate = _fmt(CorrectnessRow.of(r).exact_match_rate, ".3f")
        mode = str(r["mode"]).replace("_", " ")
        out.setdefault(key, f"changes outputs (exact match {rate}, {mode})")
    return out
