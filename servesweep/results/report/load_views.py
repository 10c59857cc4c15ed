"""The report's load section: per level, the rate the client delivered against its target,
goodput under the SLO, the prefix-cache hit rate, and the Pareto points."""

from __future__ import annotations

import pandas as pd

from servesweep import fmt
from servesweep.level import level_key

# (column in summary.csv, heading, digits)
COLUMNS = [
    ("target_rate", "target req/s", 2),
    ("achieved_rate", "achieved req/s", 2),
    ("achieved_ratio", "achieved / scheduled", 3),
    ("send_lag_p99_ms", "send lag p99 ms", 2),
    ("late_requests", "late", 0),
    ("held_requests", "held by cap", 0),
    ("achieved_concurrency", "mean in flight", 1),
    ("request_throughput", "req/s done", 2),
    ("output_throughput", "output tok/s", 1),
    ("median_ttft_ms", "TTFT p50 ms", 1),
    ("median_tpot_ms", "TPOT p50 ms", 2),
    ("slo_met_share", "met SLO", 3),
    ("goodput_request_rate", "goodput req/s", 2),
    ("goodput_output_throughput", "goodput tok/s", 1),
    ("prefix_cache_hit_rate", "prefix-cache hits", 3),
]


def load_table(summary: pd.DataFrame, variants: list[str]) -> dict | None:
    """Columns present in this sweep and one row per stack / model / variant / level (the
    mean over its valid boots; a level any boot fell short at says so). None when the
    sweep has neither rate levels, an SLO, nor hit rates."""
    df = summary[summary["level"].notna() & (summary["status"] == "ok")]
    cols = [
        c for c in COLUMNS if c[0] in df and pd.to_numeric(df[c[0]], errors="coerce").notna().any()
    ]
    wanted = {"target_rate", "slo_met_share", "prefix_cache_hit_rate", "achieved_rate"}
    if df.empty or not wanted & {c[0] for c in cols}:
        return None
    order = {v: i for i, v in enumerate(variants)}
    rows = []
    groups = df.groupby(["stack", "model", "variant", "level"], sort=False)
    for (stack, model, variant, level), g in sorted(
        groups, key=lambda kv: (kv[0][0], kv[0][1], order.get(kv[0][2], 99), kv[0][3])
    ):
        valid = g[g["valid"]]
        use = valid if len(valid) else g
        short = "rate_short" in g and g["rate_short"].astype(str).str.lower().eq("true").any()
        cells = [fmt.number(pd.to_numeric(use[c], errors="coerce").mean(), d) for c, _, d in cols]
        rows.append(
            {
                "where": f"{stack} / {model}",
                "variant": variant,
                "level": level_key(level),
                "boots": f"{len(valid)}/{len(g)}",
                "values": cells,
                "flag": "rate short" if short else ("not valid" if not len(valid) else ""),
            }
        )
    return {"headings": [h for _, h, _ in cols], "rows": rows}
