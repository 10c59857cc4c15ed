"""Max load within the SLO (the capacity search's result, `cell.json` → `capacity`)
compared with the baseline like any other metric: per boot its value, across boots the
mean, and against the baseline an interval of the difference as a percentage of the
baseline's mean, with a verdict (higher is better).

A boot's capacity is only known to lie in its bracket [highest level that met the SLO, lowest
that did not), so the interval is the hull of two: Welch's 95 % interval over the boots'
values, and the range the brackets allow (lowest low over highest high, and the other way
round). Boots that all stop in the same bracket give Welch no spread at all; the brackets
still say how far apart the two capacities may be."""

from __future__ import annotations

import math
from typing import NamedTuple

from servesweep import fmt, stats
from servesweep.level import level_key, parse_value
from servesweep.records import CapacityRecord, CellRecord
from servesweep.results.judge.verdicts import Comparison, verdict_of


class CapacityRow(NamedTuple):
    stack: str
    model: str
    variant: str
    boots: list[str]  # "r0: 11.3 [11.3, 16)" per boot
    mean: float | None
    n: int
    delta_pct: float | None  # against the baseline of the same stack and model
    ci_low: float | None
    ci_high: float | None
    verdict: str
    values: tuple[float, ...] = ()  # the boots' capacities (finite ones)


def _boot_text(repeat: int, cap: CapacityRecord) -> str:
    low = fmt.MISSING if cap.get("low") is None else level_key(cap["low"])
    high = "∞" if cap.get("high") is None else level_key(cap["high"])
    value = "none" if cap.get("value") is None else level_key(cap["value"])
    unsure = cap.get("client_bound_levels") or []
    note = f" (client-bound at {', '.join(level_key(v) for v in unsure)})" if unsure else ""
    return f"r{repeat}: {value} [{low}, {high}){note}"


def bracket_range(
    mine: list[tuple[int, CapacityRecord]], ref: list[tuple[int, CapacityRecord]]
) -> tuple[float, float]:
    """Δ % between two capacities that the boots' brackets allow: (lowest of mine / highest
    of the baseline's, highest of mine / lowest of the baseline's) - 1; a bracket open at the
    top (every level met the SLO) allows any increase."""

    def bounds(boots: list[tuple[int, CapacityRecord]]) -> tuple[float, float]:
        lows = [float(parse_value(c["low"])) for _, c in boots if c.get("low") is not None]
        highs = [c.get("high") for _, c in boots]
        top = math.inf if None in highs else max(float(parse_value(h)) for h in highs)
        return (min(lows) if lows else 0.0), top

    low, high = bounds(mine)
    ref_low, ref_high = bounds(ref)
    lo = (low / ref_high - 1) * 100 if math.isfinite(ref_high) else -100.0
    hi = (high / ref_low - 1) * 100 if ref_low > 0 and math.isfinite(high) else math.inf
    return lo, hi


def capacity_rows(cells: list[CellRecord], variants: list[str], baseline: str) -> list[CapacityRow]:
    found: dict[tuple[str, str, str], list[tuple[int, CapacityRecord]]] = {}
    for c in cells:
        cap = c.get("capacity")
        if c.get("status") == "ok" and isinstance(cap, dict):
            key = (c["stack"], c["model"], c["variant"])
            found.setdefault(key, []).append((c.get("repeat", 0), cap))
    values = {
        key: [
            float(parse_value(cap["value"]))
            for _, cap in boots
            if cap.get("value") is not None and math.isfinite(float(parse_value(cap["value"])))
        ]
        for key, boots in found.items()
    }
    order = {v: i for i, v in enumerate(variants)}
    rows = []
    for key in sorted(found, key=lambda k: (k[0], k[1], order.get(k[2], 99))):
        mine = values[key]
        ref = values.get((key[0], key[1], baseline), [])
        mean = sum(mine) / len(mine) if mine else None
        delta = low = high = None
        verdict = ""
        if key[2] != baseline and mine and ref and mean is not None:
            ref_mean = sum(ref) / len(ref)
            delta = (mean / ref_mean - 1) * 100
            w = stats.welch(mine, ref) if len(mine) > 1 and len(ref) > 1 else None
            if w is not None:
                low, high = w.ci_low / ref_mean * 100, w.ci_high / ref_mean * 100
                b_low, b_high = bracket_range(found[key], found[(key[0], key[1], baseline)])
                low, high = min(low, b_low), max(high, b_high)
            verdict = verdict_of(
                math.nan if low is None else low,
                math.nan if high is None else high,
                len(mine),
                len(ref),
                higher_is_better=True,
            )
        rows.append(
            CapacityRow(
                *key,
                [_boot_text(r, cap) for r, cap in sorted(found[key], key=lambda x: x[0])],
                mean,
                len(mine),
                delta,
                low,
                high,
                verdict,
                tuple(mine),
            )
        )
    return rows


CAPACITY_METRIC = "max_load_within_slo"


def capacity_comparisons(rows: list[CapacityRow], baseline: str, noise_cv: float) -> list:
    """The capacity rows as verdicts.csv rows (metric `max_load_within_slo`, no level): a
    variant's max load within the SLO against its baseline's, like any other metric."""
    ref = {(r.stack, r.model): r for r in rows if r.variant == baseline}
    out = []
    for r in rows:
        base = ref.get((r.stack, r.model))
        if r.variant == baseline or base is None or not r.values or not base.values:
            continue
        cv, cv_ref = stats.describe(r.values).cv, stats.describe(base.values).cv
        noisy = any(c > noise_cv for c in (cv, cv_ref) if not math.isnan(c))
        nan = math.nan
        out.append(
            Comparison(
                r.stack,
                r.model,
                r.variant,
                "",
                CAPACITY_METRIC,
                "variant",
                r.stack,
                baseline,
                r.n,
                base.n,
                r.mean,
                base.mean,
                cv,
                cv_ref,
                nan,
                r.delta_pct,
                nan if r.ci_low is None else r.ci_low,
                nan if r.ci_high is None else r.ci_high,
                r.verdict,
                noisy,
                None,
                "",
            )
        )
    return out
