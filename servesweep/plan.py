"""The plan: what a sweep would do before any GPU hour is spent.

For every cell: its state (new, measured and current, stale and why, failed and whether
it will be retried), the exact launch command and environment, the GPUs it holds and an
estimated wall time; then the totals. Nothing is launched: it reads the sweep, the stack and
model manifests where they exist and the cells' earlier records.

The state follows Snakemake's own rerun rule for `run_cell` (params = the cell's spec and
attempt; a missing stack or model manifest means its setup job runs first, and the cell
after it), so "run" here is what `snakemake` would run.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from tabulate import tabulate

from servesweep import CLIENT_VERSION
from servesweep.config import Sweep, next_attempt, spec_hash
from servesweep.engines import launch_command, launch_env
from servesweep.jsonfile import read_json
from servesweep.models import model_path
from servesweep.stacks import stack_python

# Used where no earlier record says better (each is stated in the plan's output).
DEFAULT_BOOT_S = 60.0  # launch -> ready
DEFAULT_TEARDOWN_S = 5.0
DEFAULT_STREAM_TOK_S = 20.0  # output tokens/s one stream gets
DEFAULT_CELL_TOK_S = 2000.0  # ...and a server in all
LEVEL_OVERHEAD_S = 1.0  # liveness probe, cache flush and records around each level
DEFAULT_OUTPUT_TOKENS = 256  # a sharegpt workload that takes the reply's own length

RUN, KEEP = "run", "keep"


class PlannedCell(NamedTuple):
    order: int  # 1-based position in the plan
    stack: str
    model: str
    variant: str
    state: str  # new | current | stale | failed
    action: str  # run | keep
    why: str
    command: list[str]
    env: dict[str, str]
    gpus: int
    estimate_s: float  # wall time of one measurement of the cell
    estimate_from: str  # "this cell's records", "<engine> records", "default rates"


class Paths(NamedTuple):
    results: Path  # results/
    stacks: Path  # resources/stacks/
    models: Path  # resources/models/

    @classmethod
    def under(cls, root: Path) -> Paths:
        root = Path(root)
        return cls(root / "results", root / "resources" / "stacks", root / "resources" / "models")

    def cell_json(self, stack: str, model: str, variant: str) -> Path:
        return self.results / "cells" / stack / model / variant / "cell.json"

    def stack_manifest(self, stack: str) -> Path:
        return self.stacks / stack / "manifest.json"

    def model_manifest(self, model: str) -> Path:
        return self.models / model / "manifest.json"


def changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two specs (mappings compared key by key)."""
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_keys(a, b, name + ".")
        elif a != b:
            out.append(name)
    return out


def cell_state(
    previous: dict | None, spec: dict, attempt: int, retries: dict, inputs_missing: list[str]
) -> tuple[str, str, str]:
    """(state, action, why) of one cell, as Snakemake's rerun rule decides it."""
    if previous is None:
        return "new", RUN, "not measured yet"
    if previous.get("spec_hash") != spec_hash(spec):
        keys = changed_keys(previous.get("spec") or {}, spec)
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        return "stale", RUN, f"spec changed: {shown or 'its hash'}"
    failure = previous.get("failure") or {}
    failed = previous.get("status") == "failed"
    where = f"failed at {failure.get('stage')} ({failure.get('cause')})"
    if attempt != int(previous.get("attempt", 0)):
        return (
            "failed",
            RUN,
            f"{where}; retried: attempt {attempt + 1} of {retries['max_attempts']}",
        )
    if inputs_missing:
        state = "failed" if failed else "current"
        return state, RUN, f"{' and '.join(inputs_missing)} missing: rebuilt first, then this cell"
    if failed:
        if not retries["failed_cells"]:
            return "failed", KEEP, f"{where}; final (retries.failed_cells is off)"
        return "failed", KEEP, f"{where}; final ({retries['max_attempts']} attempts used)"
    measured = previous.get("client_version")
    if str(measured) != str(CLIENT_VERSION):
        return (
            "stale",
            KEEP,
            f"measured by client v{measured} (now v{CLIENT_VERSION}); not rerun by itself: "
            "delete its cell.json to measure again",
        )
    return "current", KEEP, f"measured {previous.get('finished_at') or ''}".strip()


class Rates:
    """What earlier records say about speed: per cell, and per engine."""

    def __init__(self, cells: Iterable[dict]):
        self.by_cell: dict[tuple, dict] = {}
        self.boot: dict[str, list[float]] = defaultdict(list)
        self.teardown: dict[str, list[float]] = defaultdict(list)
        self.tput: dict[tuple[str, int], list[float]] = defaultdict(list)
        for cell in cells:
            engine = cell.get("engine") or "?"
            own = {"boot": cell.get("boot_s"), "teardown": None, "tput": {}}
            if isinstance(cell.get("teardown"), dict):
                own["teardown"] = cell["teardown"].get("seconds")
            for lev in cell.get("levels") or []:
                rate = lev.get("output_throughput")
                if lev.get("status") == "ok" and rate:
                    own["tput"].setdefault(lev["level"], []).append(float(rate))
                    self.tput[(engine, lev["level"])].append(float(rate))
            if own["boot"]:
                self.boot[engine].append(float(own["boot"]))
            if own["teardown"] is not None:
                self.teardown[engine].append(float(own["teardown"]))
            self.by_cell[(cell.get("stack"), cell.get("model"), cell.get("variant"))] = own

    def estimate(self, key: tuple, spec: dict) -> tuple[float, str]:
        """Seconds one measurement of the cell takes, and where the rates came from."""
        engine = spec["engine"]
        own = self.by_cell.get(key) or {"boot": None, "teardown": None, "tput": {}}
        sources = []

        def pick(mine, engine_values, default):
            if mine:
                sources.append("this cell's records")
                return float(mine)
            if engine_values:
                sources.append(f"{engine} records")
                return statistics.median(engine_values)
            sources.append("default rates")
            return default

        bench = spec["benchmark"]
        out_tokens = bench["workload"].get("output_tokens") or DEFAULT_OUTPUT_TOKENS
        total = pick(own["boot"], self.boot.get(engine), DEFAULT_BOOT_S)
        total += pick(own["teardown"], self.teardown.get(engine), DEFAULT_TEARDOWN_S)
        for level in bench["levels"]:
            requests = bench["warmup"] + bench["num_prompts_per_level"][str(level)]
            mine = own["tput"].get(level)
            default = min(level, requests) * DEFAULT_STREAM_TOK_S
            rate = pick(
                statistics.median(mine) if mine else None,
                self.tput.get((engine, level)),
                min(default, DEFAULT_CELL_TOK_S),
            )
            total += requests * out_tokens / rate + LEVEL_OVERHEAD_S
        # The weakest source used is the one to state.
        for source in ("default rates", f"{engine} records", "this cell's records"):
            if source in sources:
                return total * bench["repeats"], source
        return total * bench["repeats"], "default rates"


def earlier_records(results: Path) -> list[dict]:
    """Every cell.json under results/cells (any sweep's: they are all evidence of speed)."""
    cells = []
    for path in sorted((Path(results) / "cells").glob("**/cell.json")):
        cell = read_json(path)
        if cell is not None:
            cells.append(cell)
    return cells


def plan_sweep(sweep: Sweep, paths: Paths) -> list[PlannedCell]:
    """Every cell of the sweep, in the order of the config, with its state and estimate."""
    rates = Rates(earlier_records(paths.results))
    manifests = {("stack", s): read_json(paths.stack_manifest(s)) for s in sweep.stacks} | {
        ("model", m): read_json(paths.model_manifest(m)) for m in sweep.models
    }
    planned = []
    for order, (stack, model, variant) in enumerate(sweep.cells, start=1):
        spec = sweep.spec(stack, model, variant)
        stack_manifest = manifests[("stack", stack)]
        model_manifest = manifests[("model", model)]
        python = (stack_manifest or {}).get("python") or str(
            stack_python(stack, sweep.stacks[stack], paths.stacks)
        )
        model_dir = (model_manifest or {}).get("path") or str(
            model_path(model, sweep.models[model], paths.models)
        )
        port = spec["server"]["port"]
        command = launch_command(spec, python, model_dir, "<auto>" if port == "auto" else port)
        missing = [f"stack {stack}'s manifest"] if stack_manifest is None else []
        missing += [f"model {model}'s manifest"] if model_manifest is None else []
        cell_json = paths.cell_json(stack, model, variant)
        previous = read_json(cell_json)
        attempt = next_attempt(cell_json, sweep.retries)
        state, action, why = cell_state(previous, spec, attempt, sweep.retries, missing)
        estimate, source = rates.estimate((stack, model, variant), spec)
        planned.append(
            PlannedCell(
                order,
                stack,
                model,
                variant,
                state,
                action,
                why,
                command,
                launch_env(spec),
                spec["gpus"],
                round(estimate, 1),
                source,
            )
        )
    return planned


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
        "cells": len(planned),
        "to_run": len(to_run),
        "states": states,
        "wall_s": round(sum(p.estimate_s for p in to_run), 1),
        "gpu_hours": round(sum(p.estimate_s * p.gpus for p in to_run) / 3600, 2),
        "whole_sweep_wall_s": round(sum(p.estimate_s for p in planned), 1),
        "whole_sweep_gpu_hours": round(sum(p.estimate_s * p.gpus for p in planned) / 3600, 2),
    }


def defaults_text() -> str:
    return (
        f"without records: boot {DEFAULT_BOOT_S:g} s, teardown {DEFAULT_TEARDOWN_S:g} s, "
        f"{DEFAULT_STREAM_TOK_S:g} output tok/s per stream up to {DEFAULT_CELL_TOK_S:g} tok/s "
        f"per server, {LEVEL_OVERHEAD_S:g} s around each level"
    )


def render(planned: list[PlannedCell], sweep_files: list[str], is_default: bool) -> str:
    """The plan as text: a header, the cell table, then each cell's command and env."""
    t = totals(planned)
    source = ", ".join(sweep_files) + (" (the default sweep)" if is_default else "")
    lines = [
        f"servesweep plan - sweep: {source}",
        f"{t['cells']} cells: {t['to_run']} will run; "
        + ", ".join(f"{n} {s}" for s, n in t["states"].items() if n),
        f"to run: about {duration(t['wall_s'])} one cell at a time, "
        f"{t['gpu_hours']:g} GPU-hours (whole sweep: {duration(t['whole_sweep_wall_s'])}, "
        f"{t['whole_sweep_gpu_hours']:g} GPU-hours)",
        f"estimates from the cells' own records, else the same engine's, else defaults "
        f"({defaults_text()})",
        "",
    ]
    rows = [
        [
            p.order,
            p.stack,
            p.model,
            p.variant,
            p.state,
            p.action,
            p.gpus,
            duration(p.estimate_s),
            p.estimate_from,
            p.why,
        ]
        for p in planned
    ]
    headers = ["#", "stack", "model", "variant", "state", "action", "GPUs", "est."]
    headers += ["from", "why"]
    lines.append(tabulate(rows, headers=headers, tablefmt="simple"))
    lines += ["", "Launch commands (port <auto>: a free port picked at launch):"]
    for p in planned:
        lines.append(f"{p.order:>3}  {p.stack} / {p.model} / {p.variant}")
        lines.append(f"     $ {' '.join(_quote(a) for a in p.command)}")
        if p.env:
            lines.append("     env: " + " ".join(f"{k}={_quote(v)}" for k, v in p.env.items()))
    return "\n".join(lines) + "\n"


def _quote(arg) -> str:
    text = str(arg)
    return text if text == "<auto>" else shlex.quote(text)


def plan_json(planned: list[PlannedCell], sweep_files: list[str], is_default: bool) -> dict:
    return {
        "sweep_files": sweep_files,
        "is_default": is_default,
        "client_version": CLIENT_VERSION,
        "defaults": {
            "boot_s": DEFAULT_BOOT_S,
            "teardown_s": DEFAULT_TEARDOWN_S,
            "stream_tok_s": DEFAULT_STREAM_TOK_S,
            "cell_tok_s": DEFAULT_CELL_TOK_S,
            "level_overhead_s": LEVEL_OVERHEAD_S,
        },
        "totals": totals(planned),
        "cells": [p._asdict() for p in planned],
    }


def write_plan(
    sweep: Sweep, paths: Paths, sweep_files: list[str], is_default: bool, out_txt, out_json
) -> str:
    """Write the plan as text and JSON; return the text."""
    planned = plan_sweep(sweep, paths)
    text = render(planned, sweep_files, is_default)
    for path, data in (
        (out_txt, text),
        (out_json, json.dumps(plan_json(planned, sweep_files, is_default), indent=2) + "\n"),
    ):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(data)
    return text


def state_digest(sweep: Sweep, paths: Paths) -> str:
    """Changes whenever the plan would: the cells' specs and attempts, and the files the
    plan reads (cell records, manifests), by size and modification time. A Snakemake
    param of the plan rule, so the plan is rebuilt exactly when it would say something
    else."""
    parts = [CLIENT_VERSION]
    for stack, model, variant in sweep.cells:
        cell_json = paths.cell_json(stack, model, variant)
        parts.append(spec_hash(sweep.spec(stack, model, variant)))
        parts.append(str(next_attempt(cell_json, sweep.retries)))
    files = sorted((paths.results / "cells").glob("**/cell.json"))
    files += [paths.stack_manifest(s) for s in sweep.stacks]
    files += [paths.model_manifest(m) for m in sweep.models]
    for path in files:
        try:
            st = path.stat()
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:-")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
