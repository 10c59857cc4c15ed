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

import csv
import hashlib
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from servesweep import CLIENT_VERSION
from servesweep.jsonfile import read_json
from servesweep.level import INF, level_key
from servesweep.records import (
    CellRead,
    CellRecord,
    CellSpec,
    FailureRead,
    LevelRead,
    ModelRead,
    Read,
    StackRead,
    TeardownRead,
)
from servesweep.resources.identity import spec_identity
from servesweep.resources.models import model_path
from servesweep.resources.stacks import stack_python
from servesweep.server.engines import launch_command, launch_env
from servesweep.sizing import level_requests
from servesweep.sweep import resume
from servesweep.sweep.benchmark import BenchmarkSettings
from servesweep.sweep.config import Sweep, next_attempt, spec_hash
from servesweep.sweep.layout import Paths
from servesweep.sweep.stages import simulate_boots

# Used where no earlier record says better (each is stated in the plan's output).
DEFAULT_BOOT_S = 60.0  # launch -> ready
DEFAULT_TEARDOWN_S = 5.0
DEFAULT_STREAM_TOK_S = 20.0  # output tokens/s one stream gets
DEFAULT_CELL_TOK_S = 2000.0  # ...and a server in all
LEVEL_OVERHEAD_S = 1.0  # liveness probe, cache flush and records around each level
DEFAULT_OUTPUT_TOKENS = 256  # a sharegpt workload that takes the reply's own length


class AssumedRates(NamedTuple):
    """What the plan assumes where no earlier record says better: the defaults above (a
    CPU server's), or the sweep's own `plan_rates:` (a GPU sweep states what its engines
    measured: config/examples/h200-*.yaml)."""

    boot_s: float = DEFAULT_BOOT_S
    teardown_s: float = DEFAULT_TEARDOWN_S
    stream_tok_s: float = DEFAULT_STREAM_TOK_S
    cell_tok_s: float = DEFAULT_CELL_TOK_S
    stated: bool = False  # from the sweep's plan_rates

    @classmethod
    def of(cls, sweep: Sweep) -> AssumedRates:
        given = {k: float(v) for k, v in (sweep.raw.get("plan_rates") or {}).items()}
        if "server_tok_s" in given:  # the sweep file's name for a server's (a cell's) rate
            given["cell_tok_s"] = given.pop("server_tok_s")
        return cls(**given, stated=True) if given else DEFAULT_RATES

    @property
    def source(self) -> str:
        """The estimate_from of a job these rates priced."""
        return "plan_rates" if self.stated else "default rates"

    def text(self) -> str:
        return (
            f"boot {self.boot_s:g} s, teardown {self.teardown_s:g} s, {self.stream_tok_s:g} "
            f"output tok/s per stream up to {self.cell_tok_s:g} tok/s per server, "
            f"{LEVEL_OVERHEAD_S:g} s around each level"
        )


DEFAULT_RATES = AssumedRates()

RUN, KEEP = "run", "keep"


class PlannedCell(NamedTuple):
    """One run_cell job: one boot of a cell."""

    order: int  # 1-based position in the plan: the order the jobs run in
    stack: str
    model: str
    variant: str
    repeat: int  # which boot of the cell
    state: str  # new | current | stale | failed
    action: str  # run | keep
    why: str
    command: list[str]
    env: dict[str, str]
    gpus: int
    estimate_s: float  # wall time of this boot
    estimate_from: str  # "this cell's records", "<engine> records", "plan_rates", "default rates"


def changed_keys(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
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
    previous: CellRecord | None,
    spec: CellSpec,
    attempt: int,
    retries: dict,
    inputs_missing: list[str],
    setups_failed: Sequence[str] = (),
    resources_changed: tuple[list[str], bool] = ([], False),
) -> tuple[str, str, str]:
    """(state, action, why) of one cell, as Snakemake's rerun rule decides it. A stack or
    model whose setup failed is set up again first (servesweep.resources.setup), and its
    cells after it. `resources_changed`: why the boot no longer stands for its stack or
    model (servesweep.sweep.resume) and whether Snakemake reruns it for that now (a
    manifest newer than the boot, or its setup job running); a boot that stands is kept
    while a missing manifest is built (it is compared once it is)."""
    if previous is None:
        return "new", RUN, "not measured yet"
    prev = CellRead.of(previous)
    if prev.spec_hash != spec_hash(spec):
        keys = changed_keys(prev.spec or {}, spec)
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        return "stale", RUN, f"spec changed: {shown or 'its hash'}"
    failure = FailureRead.of(prev.failure)
    failed = prev.status == "failed"
    where = f"failed at {failure.stage} ({failure.cause})"
    if attempt != int(prev.attempt):
        return (
            "failed",
            RUN,
            f"{where}; retried: attempt {attempt + 1} of {retries['max_attempts']}",
        )
    if setups_failed:
        state = "failed" if failed else "current"
        return state, RUN, f"{'; '.join(setups_failed)}: set up again first, then this cell"
    changed, rerun = resources_changed
    if changed:
        why = "; ".join(changed)
        if rerun:
            return "stale", RUN, why
        return "stale", KEEP, f"{why}; not rerun by itself: delete its cell.json to measure again"
    state, action, why = _kept(prev, failed, where, retries)
    if inputs_missing:
        verb = "is" if len(inputs_missing) == 1 else "are"
        why += f"; kept while {' and '.join(inputs_missing)} {verb} rebuilt (compared then)"
    return state, action, why


def _kept(prev: Read[CellRecord], failed: bool, where: str, retries: dict) -> tuple[str, str, str]:
    """A measured boot Snakemake keeps: failed for good, stale by its client, or current."""
    if failed:
        if not retries["failed_cells"]:
            return "failed", KEEP, f"{where}; final (retries.failed_cells is off)"
        return "failed", KEEP, f"{where}; final ({retries['max_attempts']} attempts used)"
    measured = prev.client_version
    if str(measured) != str(CLIENT_VERSION):
        return (
            "stale",
            KEEP,
            f"measured by client v{measured} (now v{CLIENT_VERSION}); not rerun by itself: "
            "delete its cell.json to measure again",
        )
    return "current", KEEP, f"measured {prev.finished_at or ''}".strip()


ONE_STREAM = level_key(1)  # the correctness pass's rate: its prompts go one at a time


class Rates:
    """What earlier records say about speed: per cell, and per engine."""

    def __init__(self, cells: Iterable[dict], assumed: AssumedRates = DEFAULT_RATES):
        self.assumed = assumed
        self.by_cell: dict[tuple, dict] = {}
        self.boot: dict[str, list[float]] = defaultdict(list)
        self.teardown: dict[str, list[float]] = defaultdict(list)
        # Keyed by (engine, level key): "1" is one stream, what the correctness pass asks for.
        self.tput: dict[tuple[str, str], list[float]] = defaultdict(list)
        for cell in map(CellRead.of, cells):
            engine = cell.engine or "?"
            own: dict[str, Any] = {"boot": cell.boot_s, "teardown": None, "tput": {}}
            if isinstance(cell.teardown, dict):
                own["teardown"] = TeardownRead.of(cell.teardown).seconds
            for lev in map(LevelRead.of, cell.levels or []):
                rate = lev.output_throughput
                if lev.status == "ok" and rate:
                    key = level_key(lev.level)
                    own["tput"].setdefault(key, []).append(float(rate))
                    self.tput[(engine, key)].append(float(rate))
            if own["boot"]:
                self.boot[engine].append(float(own["boot"]))
            if own["teardown"] is not None:
                self.teardown[engine].append(float(own["teardown"]))
            self.by_cell[(cell.stack, cell.model, cell.variant)] = own

    def estimate(self, key: tuple, spec: CellSpec) -> tuple[float, str]:
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
            sources.append(self.assumed.source)
            return default

        bench = BenchmarkSettings.of(spec["benchmark"])
        out_tokens = bench.workload.output_tokens or DEFAULT_OUTPUT_TOKENS
        assumed = self.assumed
        total = pick(own["boot"], self.boot.get(engine), assumed.boot_s)
        total += pick(own["teardown"], self.teardown.get(engine), assumed.teardown_s)
        for level in bench.levels:
            lkey = level.key
            requests = level_requests(bench, level).requests
            mine = own["tput"].get(lkey)
            # A rate level's in-flight count is the server's to decide: assume it keeps up.
            streams = requests if level.is_rate else min(level.value, requests)
            rate = pick(
                statistics.median(mine) if mine else None,
                self.tput.get((engine, lkey)),
                min(streams * assumed.stream_tok_s, assumed.cell_tok_s),
            )
            seconds = requests * out_tokens / rate
            if bench.is_auto:  # sends until precise enough: at most its time cap
                seconds = min(seconds, bench.precision.max_s)
            if level.is_rate and level.value != INF:
                seconds = max(seconds, requests / level.value)  # the arrivals take this long
            # Each in-boot measurement (repeats_in_boot) sends its own warm-up and requests.
            total += bench.repeats_in_boot * (seconds + LEVEL_OVERHEAD_S)
        total += self._correctness_s(own, spec)
        # The weakest source used is the one to state (the correctness pass rides on the
        # level-1 rate, so it adds no source of its own).
        for source in (assumed.source, f"{engine} records", "this cell's records"):
            if source in sources:
                return total, source
        return total, assumed.source

    def _correctness_s(self, own: dict, spec: CellSpec) -> float:
        """The correctness pass: its prompts one at a time at the one-stream rate, then all
        together (about half that again, as batches are faster)."""
        pass_config = cast(dict[str, Any], spec["correctness"])  # settings, or False (off)
        if not pass_config:
            return 0.0
        one = own["tput"].get(ONE_STREAM) or self.tput.get((spec["engine"], ONE_STREAM))
        rate = statistics.median(one) if one else self.assumed.stream_tok_s
        return 1.5 * pass_config["prompts"] * pass_config["max_tokens"] / rate


def earlier_records(paths: Paths) -> list[dict]:
    """Every boot's cell.json under results/cells (any sweep's: all evidence of speed)."""
    return [cell for cell in map(read_json, paths.cell_records()) if cell is not None]


def plan_sweep(sweep: Sweep, paths: Paths, jobs: list | None = None) -> list[PlannedCell]:
    """Every run_cell job of the sweep (or `jobs`, e.g. a hunt's next boots), in the order
    they run (Sweep.jobs), with its state and estimate."""
    rates = Rates(earlier_records(paths), AssumedRates.of(sweep))
    manifests = {("stack", s): read_json(paths.stack_manifest(s)) for s in sweep.stacks} | {
        ("model", m): read_json(paths.model_manifest(m)) for m in sweep.models
    }
    planned = []
    for order, (stack, model, variant, repeat) in enumerate(
        sweep.jobs if jobs is None else jobs, start=1
    ):
        spec = sweep.spec(stack, model, variant)
        stack_manifest = manifests[("stack", stack)]
        model_manifest = manifests[("model", model)]
        python = StackRead.of(stack_manifest).python or str(
            stack_python(stack, sweep.stacks[stack], paths.stacks)
        )
        model_dir = ModelRead.of(model_manifest).path or str(
            model_path(model, sweep.models[model], paths.models)
        )
        server = sweep.server  # the spec's `server:`, as the sweep reads it
        port = "<auto>" if server.auto_port else server.port
        command = launch_command(spec, python, model_dir, server.host, port)
        missing = [f"stack {stack}'s manifest"] if stack_manifest is None else []
        missing += [f"model {model}'s manifest"] if model_manifest is None else []
        setups_failed = [
            f"{kind} {name} failed to set up ({FailureRead.of(m.failure).cause})"
            for kind, name, m in (
                ("stack", stack, StackRead.of(stack_manifest)),
                ("model", model, ModelRead.of(model_manifest)),
            )
            if m.status == "failed"
        ]
        cell_json = paths.cell_json(stack, model, variant, repeat)
        previous = read_json(cell_json)
        attempt = next_attempt(cell_json, sweep.retries)
        state, action, why = cell_state(
            cast("CellRecord | None", previous),
            spec,
            attempt,
            sweep.retries,
            missing,
            setups_failed,
            resources_changed(sweep, paths, stack, model, previous, cell_json),
        )
        estimate, source = rates.estimate((stack, model, variant), spec)
        planned.append(
            PlannedCell(
                order,
                stack,
                model,
                variant,
                repeat,
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


def resources_changed(
    sweep: Sweep, paths: Paths, stack: str, model: str, previous: dict | None, cell_json
) -> tuple[list[str], bool]:
    """Why a boot no longer stands for its stack or model, and whether Snakemake reruns it
    for that in this invocation: a changed manifest newer than the boot (its mtime trigger),
    or one to be built (its setup job runs)."""
    manifests = {"stack": paths.stack_manifest(stack), "model": paths.model_manifest(model)}
    now = resume.standing(
        previous,
        {kind: read_json(path) for kind, path in manifests.items()},
        {"stack": spec_identity(sweep.stacks[stack]), "model": spec_identity(sweep.models[model])},
        {"stack": stack, "model": model},
    )
    if not now.changed:
        return [], False
    try:
        measured = cell_json.stat().st_mtime
        newer = any(p.exists() and p.stat().st_mtime > measured for p in manifests.values())
    except OSError:
        newer = True
    return now.changed, newer or now.respec or bool(now.missing)


def state_digest(sweep: Sweep, paths: Paths) -> str:
    """Changes whenever the plan would: the cells' specs and attempts, the rates it assumes
    without records (`plan_rates`: in no spec), and the files the plan reads (cell
    records, manifests), by size and modification time. A Snakemake param of the plan
    rule, so the plan is rebuilt exactly when it would say something else."""
    parts = [CLIENT_VERSION, repr(sweep.hunt.spec) if sweep.hunt else ""]
    parts.append(repr(AssumedRates.of(sweep)))
    specs = {cell: spec_hash(sweep.spec(*cell)) for cell in sweep.cells}
    for stack, model, variant, repeat in sweep.jobs:
        cell_json = paths.cell_json(stack, model, variant, repeat)
        parts.append(specs[(stack, model, variant)])
        parts.append(str(next_attempt(cell_json, sweep.retries)))
    files = paths.cell_records() + [paths.results / "verdicts.csv"]
    files += [paths.stack_manifest(s) for s in sweep.stacks]
    files += [paths.model_manifest(m) for m in sweep.models]
    for path in files:
        try:
            st = path.stat()
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:-")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class Resolve(NamedTuple):
    """What the last verdicts ask for: boots per cell that would settle every unresolved
    comparison of the headline metric to ±analysis.resolve_pct."""

    repeats: int  # benchmark.repeats to set (staged: its max)
    comparisons: int  # how many comparisons asked for more
    extra_wall_s: float  # estimated time of the boots that would be added (staged: at most)
    staged: bool = False  # repeats are staged: the max is what to raise
    cap: int = 0  # the boots a cell gets now at most (fixed: all of them)


def _primary(row: dict) -> bool:
    """A verdicts.csv row of the primary family (before families: the throughput rows)."""
    if "family" in row:
        return row["family"] == "primary"
    return row.get("metric") == "output_throughput"


def resolve_suggestion(sweep: Sweep, paths: Paths, planned: list[PlannedCell]) -> Resolve | None:
    """None when there are no verdicts yet, or none asks for more boots."""

    try:
        with open(paths.results / "verdicts.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("repeats_needed") and _primary(r)]
    except OSError:
        return None
    needed = [int(float(r["repeats_needed"])) for r in rows]
    rule = sweep.repeats_rule
    if not needed or max(needed) <= rule.max:
        return None
    per_boot: dict[tuple, float] = {}
    for p in planned:
        per_boot.setdefault((p.stack, p.model, p.variant), p.estimate_s)
    extra = (max(needed) - rule.max) * sum(per_boot.values())
    return Resolve(max(needed), len(needed), round(extra, 1), rule.staged, rule.max)


DEFAULT_BOOT_CV = 0.05  # a `repeats: auto` plan's boot scatter where no verdicts say better


class StagedCost(NamedTuple):
    """What `repeats: auto` would spend on one stack × model group, before it launches."""

    stack: str
    model: str
    variants: int  # compared with the baseline
    first: int  # boots of the first stage (every cell's min)
    expected: float  # boots expected if no variant changes (the costly case)
    expected_big: float  # ... if every variant changes by +50 % at every counted level
    worst: int  # every cell to max
    boot_s: float  # a boot's estimated wall time (the group's mean)
    gpus: float  # GPUs a boot holds (the group's mean)
    cv: float  # the boot scatter assumed
    cv_from: str  # "the last verdicts" or "default"


def boot_cv(paths: Paths) -> float | None:
    """The median boot scatter (each side's CV) of the last verdicts' primary rows."""
    try:
        with open(paths.results / "verdicts.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if _primary(r)]
    except OSError:
        return None
    cvs = [float(r[k]) for r in rows for k in ("cv", "cv_ref") if r.get(k) not in (None, "")]
    cvs = [c for c in cvs if c == c and c > 0]
    return statistics.median(cvs) if cvs else None


def staged_costs(sweep: Sweep, paths: Paths, planned: list[PlannedCell]) -> list[StagedCost]:
    """Per stack × model: the first stage's boots, the expected (simulated at the boot
    scatter of the last verdicts, else DEFAULT_BOOT_CV) and the worst case (every cell to
    max). Empty when repeats are fixed."""
    rule = sweep.repeats_rule
    if not rule.staged or sweep.hunt is not None:
        return []
    known = boot_cv(paths)
    cv = known if known is not None else DEFAULT_BOOT_CV
    a = sweep.analysis
    margin = a.margin_latency_pct if a.objective.endswith("_ms") else a.margin_throughput_pct
    counted = a.levels
    levels = len(counted) if counted else len(sweep.levels)
    variants = len(sweep.variants) - 1
    out = []
    for stack in sweep.stacks:
        for model in sweep.models:
            mine = [p for p in planned if (p.stack, p.model) == (stack, model)]
            boot_s = statistics.mean(p.estimate_s for p in mine) if mine else 0.0
            gpus = statistics.mean(p.gpus for p in mine) if mine else 0.0
            null = simulate_boots(rule, variants, levels, cv, draws=50, margin_pct=margin)
            big = simulate_boots(
                rule, variants, levels, cv, [0.5] * variants, draws=50, margin_pct=margin
            )
            out.append(
                StagedCost(
                    stack,
                    model,
                    variants,
                    null.fixed_min,
                    null.expected,
                    big.expected,
                    null.worst,
                    boot_s,
                    gpus,
                    cv,
                    "the last verdicts" if known is not None else "default",
                )
            )
    return out
