"""The one-shot tuner beside the hunt, and the fresh-boot check of both their picks.

The one-shot tuner is what vLLM's auto_tune script and Optuna-style tuners do: every
candidate once on top of the start, one boot each, and the highest objective wins. Here it
is an ordinary servesweep sweep generated from a hunt's sweep file (one source of truth for
the candidates: the two cannot drift), and its pick is read from its results/summary.csv.
The check then boots the start, the tuner's pick and the hunt's final again, fresh and
interleaved, so that the report's verdicts say whether each pick holds.

    python benchmarks/gpu/tuner.py config HUNT.yaml > TUNER.yaml
    python benchmarks/gpu/tuner.py pick TUNER.yaml results/summary.csv [--from-hunt]
    python benchmarks/gpu/tuner.py check HUNT.yaml hunt.json PICK [--repeats 4] > CHECK.yaml
    python benchmarks/gpu/tuner.py table TUNER.yaml TUNER_RESULTS HUNT_RESULTS CHECK_RESULTS
    python benchmarks/gpu/tuner.py minutes RESULTS_DIR...

`config`: the hunt's stack, model, workload, levels and start; each candidate that applies
on the start alone (no `requires`) a variant extending it; `benchmark.repeats: 1`; the
hunt's objective as `analysis.objective` and `analysis.levels`. `pick`: per variant, the
geometric mean over the counted levels of the objective (the mean over a boot's in-boot
measurements), the start included; a variant missing a valid row at a counted level is
out, with why; `--from-hunt` reads a hunt's summary.csv instead (its round-1 first
boots). `check`: the start as `baseline`, `tuner-pick` and `hunt-final` (one variant when
they are the same configuration, none for a pick that is the start), `repeats` boots each
with the first left out (vLLM compiles on first use, as the hunt leaves it out).
`table`: the answer in one table: each method's pick, its own claim (the tuner's one-boot
gain, the hunt's confirm), the check's Δ with its interval and verdict at each counted
level, and the GPU-minutes that found it. `minutes`: each results folder's boots, wall
time x GPUs, in GPU-minutes.
Bad input: one line naming the file or key, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from servesweep.hunt.spec import applicable  # noqa: E402
from servesweep.level import parse_value  # noqa: E402
from servesweep.server.engines import launch_env  # noqa: E402
from servesweep.sweep.config import Sweep, load, read_sweep  # noqa: E402

GENERATED = """\
# Generated from {source} by
#   python benchmarks/gpu/tuner.py {what}
# Do not edit: regenerate{note}.
# docs/vllm-h200.md, "Running the tuner beside the hunt", says how it runs on the H200.
"""
PICK_VARIANT, FINAL_VARIANT = "tuner-pick", "hunt-final"
BOTH_VARIANT = "tuner-pick-hunt-final"


class TunerError(ValueError):
    """Bad input: its message is one line naming the file or key."""


class Score(NamedTuple):
    variant: str
    value: float | None  # geometric mean over the counted levels; None: out
    gain_pct: float | None  # against the start's, in % (the one-shot claim a check tests)
    why: str  # why it is out ('' when scored)


class Pick(NamedTuple):
    variant: str  # the tuner's pick: a candidate, or the start when none beat it
    start: str
    metric: str
    levels: tuple
    higher_is_better: bool
    scores: tuple[Score, ...]  # every variant of the tuner, in the sweep's order


def _hunt_sweep(raw: dict, source: str) -> Sweep:
    try:
        sweep = load(copy.deepcopy(raw))
    except ValueError as exc:
        raise TunerError(f"{source}: {exc}") from None
    if sweep.hunt is None:
        raise TunerError(f"{source}: hunt: missing (the tuner takes a hunt's sweep file)")
    return sweep


def _base(raw: dict, sweep: Sweep) -> dict:
    """The hunt's sweep without its hunt: its stack, model and the start's extends chain;
    the start is the analysis baseline, the hunt's objective the primary verdicts'."""
    hunt = sweep.hunt
    start = hunt.spec.start.name
    out = {k: copy.deepcopy(v) for k, v in raw.items() if k != "hunt"}
    out["stacks"] = {hunt.stack: copy.deepcopy(raw["stacks"][hunt.stack])}
    out["models"] = {hunt.model: copy.deepcopy(raw["models"][hunt.model])}
    chain = sweep.variants[start]["chain"]
    out["variants"] = {name: copy.deepcopy(raw["variants"][name]) for name in chain}
    objective = raw["hunt"].get("objective") or {}
    analysis = dict(out.get("analysis") or {})
    analysis["baseline"] = start
    analysis["objective"] = hunt.metric
    if objective.get("levels"):
        analysis["levels"] = list(objective["levels"])
    out["analysis"] = analysis
    return out


def _fragment(start: str, description: str, candidates: list[dict]) -> dict:
    """A variant extending the start with the candidates' flags and env merged in order (a
    later one wins; null removes an inherited flag), as the hunt composes them."""
    flags: dict = {}
    env: dict = {}
    for c in candidates:
        flags.update(c.get("flags") or {})
        env.update(c.get("env") or {})
    out: dict = {"extends": start, "description": description}
    if flags:
        out["flags"] = flags
    if env:
        out["env"] = env
    return out


def _one_stack(raw: dict, sweep: Sweep, names, source: str) -> None:
    for name in names:
        stack = raw["hunt"]["candidates"][name].get("stack")
        if stack is not None and stack != sweep.hunt.stack:
            raise TunerError(
                f"{source}: hunt.candidates.{name}.stack: {stack!r}, not the start's "
                f"{sweep.hunt.stack!r}: the tuner and the check run one stack"
            )


def tuner_config(raw: dict, source: str = "hunt config") -> dict:
    """The one-shot tuner's sweep from a hunt's sweep file (a mapping, as read)."""
    sweep = _hunt_sweep(raw, source)
    start = sweep.hunt.spec.start.name
    names = applicable(sweep.hunt.spec, (), ())
    _one_stack(raw, sweep, names, source)
    out = _base(raw, sweep)
    for name in names:
        c = raw["hunt"]["candidates"][name]
        described = c.get("description") or name
        out["variants"][name] = _fragment(start, f"{described} (one boot)", [c])
    out["benchmark"] = {**out["benchmark"], "repeats": 1}
    out["analysis"]["first_boot"] = "keep"  # one boot each: nothing to leave out
    _validated(out, f"the tuner generated from {source}")
    return out


def _validated(config: dict, what: str) -> Sweep:
    try:
        return load(copy.deepcopy(config))
    except ValueError as exc:  # a bug here, not the user's input: say where it came from
        raise TunerError(f"{what}: {exc}") from None


def _truthy(text: str | None) -> bool:
    return (text or "").strip().lower() in ("true", "1", "yes")


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def score_rows(sweep: Sweep, rows: list[dict]) -> Pick:
    """The tuner's pick from summary.csv's rows: per variant the geometric mean over the
    counted levels of the mean of its valid rows' objective; the best wins."""
    analysis = sweep.analysis
    metric = analysis.objective
    measured = [lv.value for lv in sweep.levels]
    levels = tuple(parse_value(v) for v in analysis.levels or measured)
    higher = not metric.endswith("_ms")
    scores = []
    for variant in sweep.variants:
        mine = [r for r in rows if r.get("variant") == variant]
        logs, why = [], ""
        for level in levels:
            at = [r for r in mine if parse_value(r.get("level") or "nan") == level]
            values = [v for r in at if _truthy(r.get("valid")) and (v := _float(r.get(metric)))]
            if values:
                logs.append(math.log(sum(values) / len(values)))
                continue
            failed = next((r for r in mine if r.get("cell_status") == "failed"), None)
            if not mine:
                why = "not measured"
            elif failed:
                cause, stage = failed.get("failure_cause"), failed.get("failure_stage")
                why = f"failed: {cause or '?'} ({stage or '?'})"
            else:
                reasons = "; ".join(sorted({r.get("invalid_reasons") or "no value" for r in at}))
                why = f"level {level}: {reasons or 'no row'}"
            break
        scores.append((variant, math.exp(sum(logs) / len(logs)) if not why else None, why))
    scored = [(v, value) for v, value, _ in scores if value is not None]
    if not scored:
        raise TunerError("summary.csv: no variant has a valid value at every counted level")
    best = (max if higher else min)(scored, key=lambda s: s[1])[0]
    start = analysis.baseline
    ref = dict(scored).get(start)
    out = tuple(
        Score(v, value, None if value is None or ref is None else 100 * (value / ref - 1), why)
        for v, value, why in scores
    )
    return Pick(best, start, metric, levels, higher, out)


def hunt_first_boots(sweep: Sweep, rows: list[dict]) -> list[dict]:
    """A hunt's summary.csv rows as the tuner's: the first boot (r0) of the start and of
    each round-1 arm `<start>+<candidate>`, named as the tuner names it. Each is one boot of
    the same launch as the tuner's variant, booted first as the tuner boots it (every
    configuration's r0 before any r1), and left out of the hunt's own decisions on an engine
    that compiles on first use: the one-shot tuner's data at no extra boot."""
    start = sweep.analysis.baseline
    names = {start: start, **{f"{start}+{v}": v for v in sweep.variants if v != start}}
    out = []
    for row in rows:
        if row.get("variant") in names and str(row.get("repeat")) == "0":
            out.append({**row, "variant": names[row["variant"]]})
    return out


def read_summary(path: Path) -> list[dict]:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise TunerError(f"{path}: cannot read ({exc.strerror})") from None
    if rows and "variant" not in rows[0]:
        raise TunerError(f"{path}: no 'variant' column (not a results/summary.csv)")
    return rows


def _final_members(raw: dict, sweep: Sweep, hunt_json: dict, source: str) -> tuple[str, ...]:
    """The hunt's final as candidate names, checked against the hunt config's composition."""
    start = sweep.hunt.spec.start.name
    if hunt_json.get("start") != start:
        raise TunerError(
            f"{source}: start: {hunt_json.get('start')!r}, the hunt config's is {start!r}"
        )
    final = hunt_json.get("final") or {}
    name = final.get("variant")
    if not isinstance(name, str):
        raise TunerError(f"{source}: final.variant: missing")
    if name == start:
        return ()
    try:
        members = sweep.hunt.members(name)
    except KeyError:
        raise TunerError(
            f"{source}: final.variant: {name!r} is no composition of this hunt"
        ) from None
    # As the hunt writes them (servesweep.hunt_run.steps.launch): the cell spec's flags and
    # the env the server gets, through JSON.
    spec = sweep.spec(sweep.hunt.stack_of(name), sweep.hunt.model, name)
    expected = json.loads(json.dumps({"flags": spec["flags"], "env": launch_env(spec)}))
    if {k: final.get(k) for k in ("flags", "env")} != expected:
        raise TunerError(
            f"{source}: final.flags/env differ from {name} composed by the hunt config "
            "(was the hunt run with another sweep file?)"
        )
    return members


def check_config(
    raw: dict, hunt_json: dict, pick: str, repeats: int = 4, source: str = "hunt config"
) -> dict:
    """The fresh-boot check: the start, the tuner's pick and the hunt's final, `repeats`
    interleaved boots each (the first left out of the verdicts)."""
    if repeats < 3:
        raise TunerError(f"--repeats: {repeats}; an interval needs 2 counted boots after the first")
    sweep = _hunt_sweep(raw, source)
    start = sweep.hunt.spec.start.name
    candidates = raw["hunt"]["candidates"]
    if pick != start and pick not in candidates:
        raise TunerError(f"pick: {pick!r} is neither the start nor a candidate of {source}")
    members = _final_members(raw, sweep, hunt_json, "hunt.json")
    picked = () if pick == start else (pick,)
    _one_stack(raw, sweep, (*picked, *members), source)
    out = _base(raw, sweep)
    both = picked == members
    described = {m: candidates[m].get("description") or m for m in (*picked, *members)}
    if picked:
        name = BOTH_VARIANT if both else PICK_VARIANT
        what = "the tuner's pick and the hunt's final" if both else "the tuner's pick"
        out["variants"][name] = _fragment(start, f"{what}: {described[pick]}", [candidates[pick]])
    if members and not both:
        text = "; ".join(described[m] for m in members)
        out["variants"][FINAL_VARIANT] = _fragment(
            start, f"the hunt's final: {text}", [candidates[m] for m in members]
        )
    out["benchmark"] = {**out["benchmark"], "repeats": repeats}
    out["analysis"]["first_boot"] = "drop"
    _validated(out, f"the check generated from {source}")
    return out


class Minutes(NamedTuple):
    folder: str
    boots: int
    wall_min: float
    gpu_min: float


def gpu_minutes(results: Path) -> Minutes:
    """Every boot under results/cells: wall time (started_at to finished_at) x GPUs."""
    boots, wall, gpu = 0, 0.0, 0.0
    for path in sorted(results.glob("cells/*/*/*/r*/cell.json")):
        cell = json.loads(path.read_text())
        try:
            start = dt.datetime.fromisoformat(cell["started_at"])
            end = dt.datetime.fromisoformat(cell["finished_at"])
        except (KeyError, TypeError, ValueError):
            continue
        seconds = max((end - start).total_seconds(), 0.0)
        boots += 1
        wall += seconds / 60
        gpu += seconds / 60 * int((cell.get("spec") or {}).get("gpus") or 0)
    return Minutes(str(results), boots, round(wall, 2), round(gpu, 2))


class Held(NamedTuple):
    """One pick in the issue's table: what its own boots claimed, what fresh boots say."""

    method: str  # tuner | hunt
    pick: str  # the configuration, as candidates on the start
    claimed: str  # its own evidence: the tuner's one-boot gain, the hunt's confirm
    check: tuple[str, ...]  # per counted level: "Δ % [low, high] verdict" from the check
    gpu_min: float  # what finding the pick cost (its own sweep's boots)


def _confirm(hunt_json: dict) -> str:
    for rnd in hunt_json.get("rounds") or ():
        for arm in rnd.get("arms") or ():
            if arm.get("role") == "confirm":
                gain, lo, hi = (arm.get(k) for k in ("gain_pct", "low_pct", "high_pct"))
                if not all(isinstance(x, int | float) for x in (gain, lo, hi)):
                    return f"confirm: {arm.get('verdict')}"
                where = f" at {arm.get('level')}" if arm.get("level") is not None else ""
                return f"{gain:+.1f} % [{lo:+.1f}, {hi:+.1f}]{where}, {arm.get('verdict')}"
    return "no confirm"


def _verdicts(path: Path, variant: str, metric: str, levels: tuple) -> tuple[str, ...]:
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise TunerError(f"{path}: cannot read ({exc.strerror})") from None
    out = []
    for level in levels:
        row = next(
            (
                r
                for r in rows
                if r.get("variant") == variant
                and r.get("kind") == "variant"
                and r.get("metric") == metric
                and r.get("level") not in (None, "")
                and parse_value(r["level"]) == level
            ),
            None,
        )
        if row is None:
            out.append("not in the check")
            continue
        numbers = [_number(row.get(k)) for k in ("delta_pct", "delta_lo", "delta_hi")]
        if None in numbers:
            out.append(row.get("verdict") or "?")
        else:
            d, lo, hi = numbers
            out.append(f"{d:+.1f} % [{lo:+.1f}, {hi:+.1f}] {row.get('verdict')}")
    return tuple(out)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def held_table(
    tuner_sweep: Sweep, tuner_results: Path, hunt_results: Path, check_results: Path
) -> tuple[list[Held], Minutes, tuple]:
    """The issue's table: each method's pick, its own claim, the check's verdicts at the
    counted levels against the start, and the GPU-minutes that found it."""
    pick = score_rows(tuner_sweep, read_summary(tuner_results / "summary.csv"))
    try:
        hunt_json = json.loads((hunt_results / "hunt" / "hunt.json").read_text())
    except (OSError, ValueError) as exc:
        raise TunerError(f"{hunt_results}/hunt/hunt.json: cannot read ({exc})") from None
    start = pick.start
    final = (hunt_json.get("final") or {}).get("variant") or start
    members = final.split("+")[1:]
    same = members == ([pick.variant] if pick.variant != start else [])
    names = {
        "tuner": BOTH_VARIANT if same else PICK_VARIANT,
        "hunt": BOTH_VARIANT if same else FINAL_VARIANT,
    }
    claim = next(s for s in pick.scores if s.variant == pick.variant)
    rows = []
    for method, shown, claimed in (
        ("tuner", pick.variant, f"{claim.gain_pct or 0:+.1f} % (one boot, geometric mean)"),
        ("hunt", " + ".join(members) or start, _confirm(hunt_json)),
    ):
        if shown == start:
            check = tuple("the start: nothing to check" for _ in pick.levels)
        else:
            check = _verdicts(
                check_results / "verdicts.csv", names[method], pick.metric, pick.levels
            )
        found = tuner_results if method == "tuner" else hunt_results
        rows.append(Held(method, shown, claimed, check, gpu_minutes(found).gpu_min))
    return rows, gpu_minutes(check_results), pick.levels


def _held_text(rows: list[Held], check: Minutes, levels: tuple) -> str:
    heads = " | ".join(f"check at {lv}" for lv in levels)
    lines = [f"| method | pick | its own claim | {heads} | GPU-min to pick |"]
    lines.append("|" + "---|" * (4 + len(levels)))
    for r in rows:
        cells = " | ".join(r.check)
        lines.append(f"| {r.method} | {r.pick} | {r.claimed} | {cells} | {r.gpu_min:.1f} |")
    lines.append(f"\nthe check: {check.boots} boots, {check.gpu_min:.1f} GPU-min")
    return "\n".join(lines)


def _read_yaml(path: str) -> dict:
    try:
        return read_sweep(path)
    except ValueError as exc:
        raise TunerError(str(exc)) from None


def _dump(config: dict, what: str, source: str, note: str = "") -> str:
    head = GENERATED.format(what=what, source=source, note=note)
    return head + yaml.safe_dump(config, sort_keys=False)


def _pick_text(pick: Pick) -> str:
    word = "highest" if pick.higher_is_better else "lowest"
    levels = ", ".join(str(lv) for lv in pick.levels)
    lines = [f"{pick.metric} at {levels} (geometric mean, one boot), the {word} wins:"]
    for s in sorted(pick.scores, key=lambda s: (s.value is None, -(s.value or 0))):
        shown = f"{s.value:,.1f}" if s.value is not None else f"out: {s.why}"
        if s.gain_pct is not None and s.variant != pick.start:
            shown += f"  ({s.gain_pct:+.1f} % against {pick.start})"
        lines.append(f"  {s.variant:<24} {shown}")
    lines.append(f"pick: {pick.variant}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("config", help="the tuner's sweep from a hunt's, on stdout")
    p.add_argument("hunt_config")
    p = sub.add_parser("pick", help="the tuner's pick from its summary.csv")
    p.add_argument("tuner_config")
    p.add_argument("summary")
    p.add_argument("--json", action="store_true", help="the scores as JSON")
    p.add_argument(
        "--from-hunt", action="store_true", help="SUMMARY is a hunt's: its round-1 first boots"
    )
    p = sub.add_parser("check", help="the fresh-boot check's sweep, on stdout")
    p.add_argument("hunt_config")
    p.add_argument("hunt_json")
    p.add_argument("pick")
    p.add_argument("--repeats", type=int, default=4)
    p = sub.add_parser("table", help="each pick, its claim, the check's verdicts, the cost")
    p.add_argument("tuner_config")
    p.add_argument("tuner_results")
    p.add_argument("hunt_results")
    p.add_argument("check_results")
    p = sub.add_parser("minutes", help="GPU-minutes of each results folder")
    p.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "config":
            raw = _read_yaml(args.hunt_config)
            out = tuner_config(raw, args.hunt_config)
            drift = " (tests/benchmarks/test_tuner.py fails when it drifts)"
            print(_dump(out, f"config {args.hunt_config}", args.hunt_config, drift), end="")
        elif args.cmd == "pick":
            sweep = _validated(_read_yaml(args.tuner_config), args.tuner_config)
            rows = read_summary(Path(args.summary))
            pick = score_rows(sweep, hunt_first_boots(sweep, rows) if args.from_hunt else rows)
            print(json.dumps(pick._asdict(), indent=1) if args.json else _pick_text(pick))
        elif args.cmd == "check":
            raw = _read_yaml(args.hunt_config)
            try:
                hunt_json = json.loads(Path(args.hunt_json).read_text())
            except (OSError, ValueError) as exc:
                raise TunerError(f"{args.hunt_json}: cannot read as JSON ({exc})") from None
            out = check_config(raw, hunt_json, args.pick, args.repeats, args.hunt_config)
            what = f"check {args.hunt_config} {args.hunt_json} {args.pick} --repeats {args.repeats}"
            print(_dump(out, what, args.hunt_config), end="")
        elif args.cmd == "table":
            sweep = _validated(_read_yaml(args.tuner_config), args.tuner_config)
            paths = [Path(p) for p in (args.tuner_results, args.hunt_results, args.check_results)]
            print(_held_text(*held_table(sweep, *paths)))
        else:
            print("| results | boots | wall min | GPU-min |\n|---|---|---|---|")
            for m in (gpu_minutes(Path(r)) for r in args.results):
                print(f"| {m.folder} | {m.boots} | {m.wall_min:.1f} | {m.gpu_min:.1f} |")
    except TunerError as exc:
        print(f"tuner: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
