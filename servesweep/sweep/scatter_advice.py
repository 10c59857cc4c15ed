"""What the last verdicts say about where to spend the next minutes: per level of the
objective, the boots' scatter split into boot to boot (σ_B) and a boot's own measurements
(σ_W / √R), from verdicts.csv's variance-component columns (`servesweep.stats.
VarianceComponents`), and which is cheaper to add: more measurements in a boot (requests,
or in-boot repeats) or more boots, by Kalibera & Jones' r = √(c_boot / c_meas × σ_W² / σ_B²)
(`sizing.cost_optimal_per_boot`) with the costs from the earlier records (the boots'
`boot_s`, a level's seconds a request or a measurement). The plan prints it."""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from servesweep.level import Level, parse_value
from servesweep.sizing import Precision, cost_optimal_per_boot
from servesweep.sweep.benchmark import BenchmarkSettings

# The levels' σ_B differ by more than this factor (max / min): the advice is a per-level
# `boot_cv_pct` map rather than their median.
SPREAD_FOR_A_MAP = 2.0
# The σ_B measured here and the one the sweep states (`precision.boot_cv_pct`) differ by
# more than this factor: the plan says so. Two boots of one configuration on one H100
# differed by 23 % at one stream where another H100's four boots had σ_B 1.5 %
# (docs/sglang-h200.md, leases C and D): a σ_B carried from another machine can be off by
# an order of magnitude.
STATED_OFF_BY = 2.0


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def verdict_rows(paths) -> list[dict]:
    """The last verdicts' primary rows (results/verdicts.csv), none before any."""
    try:
        with open(Path(paths.results) / "verdicts.csv", newline="") as f:
            return [r for r in csv.DictReader(f) if r.get("family") == "primary"]
    except OSError:
        return []


def level_costs(records: Iterable[dict]) -> tuple[float, dict]:
    """(median seconds a boot takes to come up, {level: median (seconds a level, its
    requests)}) from earlier cell records; nan / absent where none say."""
    boots: list[float] = []
    levels: dict[Any, list] = {}
    for cell in records:
        if _num(cell.get("boot_s")) > 0:
            boots.append(_num(cell["boot_s"]))
        for lv in cell.get("levels") or []:
            d, n = _num(lv.get("duration_s")), _num(lv.get("num_prompts"))
            if d > 0 and n > 0 and lv.get("level") is not None:
                levels.setdefault(parse_value(lv["level"]), []).append((d, n))
    per_level = {
        k: (statistics.median(d for d, _ in v), statistics.median(n for _, n in v))
        for k, v in levels.items()
    }
    return (statistics.median(boots) if boots else math.nan), per_level


def scatter_advice(
    rows: Iterable[dict], records: Iterable[dict] = (), stated: Precision | None = None
) -> list[str]:
    """Lines for the plan: `rows` are verdicts.csv's primary rows (any per level: the
    components are the level's), `records` earlier cell records for the costs, `stated`
    the sweep's `num_prompts: auto` rule (None: fixed requests), whose σ_B is compared
    with the one measured."""
    by_level: dict = {}
    for r in rows:
        if r.get("components_from"):
            by_level.setdefault(parse_value(r["level"]), r)
    if not by_level:
        return []
    boot_s, costs = level_costs(records)
    lines = ["", "Where the last verdicts' boot scatter comes from (objective, each level):"]
    # What num_prompts: auto's cost-optimal stop takes (sizing.target_rse): σ_B where the
    # components are split, else the boots' total scatter, which also holds the requests'
    # sampling (so it overstates σ_B: shorter levels than the optimum).
    ordered = sorted(by_level.items(), key=lambda kv: float(kv[0]))
    sigmas = {lv: _num(r.get("sigma_boot_pct")) for lv, r in ordered}
    positive = {lv: b for lv, b in sigmas.items() if b > 0}
    is_split = all(r["components_from"] != "total" for r in by_level.values())
    if positive:
        what = "σ_B" if is_split else "boot scatter, requests' sampling included: above σ_B"
        key = "num_prompts: auto can size each level from it: benchmark.precision.boot_cv_pct:"
        if max(positive.values()) > SPREAD_FOR_A_MAP * min(positive.values()):
            # One number would stop the quiet levels early or run the scattered ones to the cap
            # (docs/sglang-h200.md: σ_B 1 % at levels 1 and 10, 6-9 % at 256). A level whose
            # σ_B came out 0 (its boots scatter no more than their own requests explain) gets
            # the smallest of the others: the map needs every level (check_precision), and
            # a smaller σ_B errs long (a longer level), never short.
            floor = min(positive.values())
            each = ", ".join(f"{lv}: {positive.get(lv, floor):.1f}" for lv in sigmas)
            unseen = [str(lv) for lv in sigmas if lv not in positive]
            filled = (
                f"; level {', '.join(unseen)}: σ_B 0 here (no scatter beyond its requests'), "
                f"given the smallest other level's {floor:.1f}"
                if unseen
                else ""
            )
            lines.append(
                f"  {key} {{{each}}} (each level's {what}: they differ more than "
                f"{SPREAD_FOR_A_MAP:g}x, so one each{filled}; every level of benchmark.levels "
                "needs one; servesweep/sizing.py)"
            )
        else:
            lines.append(
                f"  {key} {statistics.median(positive.values()):.1f} (the levels' median {what}; "
                "servesweep/sizing.py)"
            )
    for level in sorted(by_level, key=float):
        r = by_level[level]
        b, w = _num(r.get("sigma_boot_pct")), _num(r.get("sigma_within_pct"))
        per_boot, share = _num(r.get("per_boot")), _num(r.get("within_share"))
        if r["components_from"] == "total" or math.isnan(w):
            lines.append(
                f"  level {level}: boot scatter {b:.1f} %, not split: one measurement a boot "
                "(benchmark.repeats_in_boot: 2, or num_prompts: auto, measures the split)"
            )
            continue
        unit = "in-boot repeats" if r["components_from"] == "in_boot" else "requests"
        text = (
            f"  level {level}: σ_B {b:.1f} %, σ_W/√R {w / math.sqrt(per_boot):.1f} % "
            f"(R {per_boot:.0f} {unit}): {100 * share:.0f} % of a boot's scatter is its own "
            "measurements'"
        )
        seconds, requests = costs.get(level, (math.nan, math.nan))
        c_meas = seconds / requests if unit == "requests" else seconds
        r_opt = cost_optimal_per_boot((b / 100) ** 2, (w / 100) ** 2, boot_s, c_meas)
        if math.isfinite(r_opt) and r_opt >= 1.5 * per_boot:
            text += f"; cheaper: about {r_opt:.0f} {unit} a boot before more boots"
        elif math.isfinite(r_opt) and r_opt <= per_boot / 1.5:
            text += f"; cheaper: more boots (about {max(1, round(r_opt))} {unit} a boot do)"
        elif share >= 0.5:
            text += "; more measurements a boot would cut it more than more boots"
        lines.append(text)
        gap = stated_gap(level, b, stated)
        if gap:
            lines.append(gap)
    return lines


def stated_rule(bench: BenchmarkSettings) -> Precision | None:
    """The `num_prompts: auto` rule a sweep states (None: fixed requests), for
    `scatter_advice`'s `stated`."""
    return bench.precision if bench.is_auto else None


def stated_gap(level, measured: float, stated: Precision | None) -> str | None:
    """A line when the σ_B measured at a level (split from the requests' sampling) and the
    σ_B the sweep states for `num_prompts: auto` differ more than STATED_OFF_BY times. The
    verdicts stay honest either way (they use the boots' own scatter); the cost does not:
    `auto` sizes a level for its stated σ_B (sizing.target_rse), so a σ_B stated too small
    runs levels longer than their optimum, too large stops them short and leaves the
    precision to more boots."""
    if stated is None or stated.boot_cv_pct is None:
        return None
    if not (math.isfinite(measured) and measured > 0):  # σ_B 0 or not estimated
        return None
    given = stated.boot_cv(Level.parse(level))
    if not given:
        return None
    if measured > STATED_OFF_BY * given:
        what = f"{measured / given:.1f}x the {given:g} % stated"
        cost = "num_prompts: auto ran it longer than its cost optimum (sized for a quieter machine)"
    elif measured < given / STATED_OFF_BY:
        what = f"{given / measured:.1f}x under the {given:g} % stated"
        cost = "num_prompts: auto stopped it short of its cost optimum (boots pay for the rest)"
    else:
        return None
    return (
        f"    level {level}: σ_B {measured:.1f} % here, {what} (benchmark.precision.boot_cv_pct): "
        f"{cost}; the value above is this machine's"
    )
