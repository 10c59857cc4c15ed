"""The plan as people and tools read it: text with tabulate tables, and JSON."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from servesweep import CLIENT_VERSION
from servesweep.server.env import MULTICAST_OFF
from servesweep.server.machine import elsewhere_note, machine_facts
from servesweep.stats import PRACTICAL_MAX_BOOTS
from servesweep.sweep.analysis import AnalysisSettings
from servesweep.sweep.config import Sweep
from servesweep.sweep.layout import Paths
from servesweep.sweep.plan import (
    DEFAULT_RATES,
    LEVEL_OVERHEAD_S,
    RUN,
    AssumedRates,
    PlannedCell,
    Resolve,
    StagedCost,
    earlier_records,
    plan_sweep,
    resolve_suggestion,
    staged_costs,
)
from servesweep.sweep.scatter_advice import scatter_advice, stated_rule, verdict_rows


def duration(seconds: float) -> str:
    """1 h 05 min, 12 min 30 s, 45 s."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def totals(planned: list[PlannedCell]) -> dict:
    to_run = [p for p in planned if p.action == RUN]
    states = {s: sum(p.state == s for p in planned) for s in ("new", "current", "stale", "failed")}
    return {
        "jobs": len(planned),
        "cells": len({(p.stack, p.model, p.variant) for p in planned}),
        "to_run": len(to_run),
        "states": states,
        "wall_s": round(sum(p.estimate_s for p in to_run), 1),
        "gpu_hours": round(sum(p.estimate_s * p.gpus for p in to_run) / 3600, 2),
        "whole_sweep_wall_s": round(sum(p.estimate_s for p in planned), 1),
        "whole_sweep_gpu_hours": round(sum(p.estimate_s * p.gpus for p in planned) / 3600, 2),
    }


def render(
    planned: list[PlannedCell],
    sweep_files: list[str],
    is_default: bool,
    resolve: Resolve | None = None,
    resolve_pct: float = AnalysisSettings().resolve_pct,
    order: str = "every cell's first boot, then every cell's second, ...",
    staged: Sequence[StagedCost] = (),
    advice: Sequence[str] = (),
    assumed: AssumedRates = DEFAULT_RATES,
) -> str:
    """The plan as text: a header, the job table in the order the jobs run (`order` says
    which), then each cell's command and env (the same for all its boots)."""
    t = totals(planned)
    fallback = "the sweep's plan_rates" if assumed.stated else "defaults"
    source = ", ".join(sweep_files) + (" (the default sweep)" if is_default else "")
    boots = t["jobs"] // t["cells"] if t["cells"] else 0
    lines = [
        f"servesweep plan - sweep: {source}",
        f"{t['cells']} cells x {boots} boots = {t['jobs']} run_cell jobs: {t['to_run']} will "
        "run; " + ", ".join(f"{n} {s}" for s, n in t["states"].items() if n),
        f"to run: about {duration(t['wall_s'])} one job at a time, "
        f"{t['gpu_hours']:g} GPU-hours (whole sweep: {duration(t['whole_sweep_wall_s'])}, "
        f"{t['whole_sweep_gpu_hours']:g} GPU-hours)",
        f"estimates from the cells' own records, else the same engine's, else "
        f"{fallback} (without records: {assumed.text()})",
        f"jobs run in this order: {order}",
        "",
    ]
    rows = [
        [
            p.order,
            p.stack,
            p.model,
            p.variant,
            f"r{p.repeat}",
            p.state,
            p.action,
            p.gpus,
            duration(p.estimate_s),
            p.estimate_from,
            p.why,
        ]
        for p in planned
    ]
    headers = ["#", "stack", "model", "variant", "boot", "state", "action", "GPUs", "est."]
    headers += ["from", "why"]
    lines.append(tabulate(rows, headers=headers, tablefmt="simple"))
    lines += staged_text(staged)
    if resolve is not None:
        unresolved = (
            f"The last verdicts: {resolve.comparisons} comparisons are not resolved to "
            f"±{resolve_pct:g} %."
        )
        if resolve.staged:  # a fixed count would give every cell as many
            todo = (
                f" Raise benchmark.repeats max to {resolve.repeats} (now {resolve.cap}) to "
                "settle them; the stages add boots only to the variants still open (at most "
                f"about {duration(resolve.extra_wall_s)} more)."
            )
        else:
            todo = (
                f" Set benchmark.repeats: {resolve.repeats} to settle them; only the new boots "
                f"run (about {duration(resolve.extra_wall_s)} more)."
            )
        lines += ["", unresolved + todo]
        if resolve.repeats > PRACTICAL_MAX_BOOTS:
            lines.append(
                f"More than {PRACTICAL_MAX_BOOTS} boots a cell means the boots scatter more than "
                "repeats can cure: see the comparisons flagged noisy in the report (CV across "
                "boots); quieter boots, or a wider analysis.resolve_pct, settle them sooner."
            )
    lines += advice
    lines += [
        "",
        "Launch commands (port <auto>: a free port picked at launch). Every server also gets "
        "CUDA_VISIBLE_DEVICES of the GPUs its cell holds and, unless its env sets them, "
        + " ".join(f"{k}={v}" for k, v in MULTICAST_OFF.items())
        + " (NVLink multicast off):",
    ]
    seen = set()
    for p in planned:
        if (p.stack, p.model, p.variant) in seen:
            continue
        seen.add((p.stack, p.model, p.variant))
        lines.append(f"  {p.stack} / {p.model} / {p.variant}")
        lines.append(f"     $ {' '.join(_quote(a) for a in p.command)}")
        if p.env:
            lines.append("     env: " + " ".join(f"{k}={_quote(v)}" for k, v in p.env.items()))
    return "\n".join(lines) + "\n"


def _cost(c: StagedCost, boots: float) -> str:
    """Boots, their wall time one at a time, and their GPU-hours."""
    gpu_h = boots * c.boot_s * c.gpus / 3600
    return f"{boots:.1f} ({duration(boots * c.boot_s)}, {gpu_h:.2g} GPU-h)"


def staged_text(staged: Sequence[StagedCost]) -> list[str]:
    """`repeats: auto`: the jobs above are the first stage; what the later ones may add."""
    if not staged:
        return []
    lines = [
        "",
        "benchmark.repeats is staged: the jobs above are the first stage; later stages add "
        "boots only to variants whose primary verdict is still open (and to the baseline "
        "beside them), up to max:",
    ]
    rows = []
    for c in staged:
        rows.append(
            [
                f"{c.stack} / {c.model}",
                c.variants,
                _cost(c, c.first),
                _cost(c, c.expected_big),
                _cost(c, c.expected),
                _cost(c, c.worst),
                f"{100 * c.cv:.1f} % ({c.cv_from})",
            ]
        )
    headers = ["group", "variants", "first stage", "expected, all +50 %", "expected, no change"]
    headers += ["worst case", "boot CV assumed"]
    lines.append(tabulate(rows, headers=headers, tablefmt="simple"))
    return lines


def _quote(arg) -> str:
    text = str(arg)
    return text if text == "<auto>" else shlex.quote(text)


def plan_json(
    planned: list[PlannedCell],
    sweep_files: list[str],
    is_default: bool,
    resolve: Resolve | None = None,
    staged: Sequence[StagedCost] = (),
    assumed: AssumedRates = DEFAULT_RATES,
) -> dict:
    return {
        "resolve": resolve._asdict() if resolve else None,
        "stages": [c._asdict() for c in staged],
        "sweep_files": sweep_files,
        "is_default": is_default,
        "client_version": CLIENT_VERSION,
        "defaults": assumed._asdict() | {"level_overhead_s": LEVEL_OVERHEAD_S},
        "totals": totals(planned),
        "cells": [p._asdict() for p in planned],
    }


def write_plan(
    sweep: Sweep, paths: Paths, sweep_files: list[str], is_default: bool, out_txt, out_json
) -> str:
    """Write the plan as text and JSON; return the text. (A hunt's plan is
    servesweep.hunt_run.plan.write_hunt_plan, on top of this module.)"""
    planned = plan_sweep(sweep, paths)
    assumed = AssumedRates.of(sweep)
    resolve = resolve_suggestion(sweep, paths, planned)
    staged = staged_costs(sweep, paths, planned)
    records = earlier_records(paths)  # read once: the advice's costs and the machines
    advice = scatter_advice(verdict_rows(paths), records, stated_rule(sweep.benchmark))
    text = render(
        planned,
        sweep_files,
        is_default,
        resolve,
        sweep.analysis.resolve_pct,
        staged=staged,
        advice=advice,
        assumed=assumed,
    )
    data = plan_json(planned, sweep_files, is_default, resolve, staged, assumed)
    elsewhere = elsewhere_note(records, machine_facts())
    if elsewhere:
        text += f"\nMachines: {elsewhere}\n"
    data["machines"] = elsewhere
    return write_text_and_json(text, data, out_txt, out_json)


def write_text_and_json(text: str, data: dict, out_txt, out_json) -> str:
    for path, content in ((out_txt, text), (out_json, json.dumps(data, indent=2) + "\n")):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(content)
    return text
