"""What the hunt's decisions cost and how often it ends at the true best, against every
fixed-repeat search a user could run instead, on the same worlds through one machine model.

    python -m benchmarks.simulation.hunt_cost [--seeds 500] [--jobs 2]
        [--scenarios cv2,cv5,...] [--set boots_max=11 first_boot=drop ...] [--out FILE]

Each seed draws a world of 5 candidates over 2 counted levels: two winners (+5..12 % at one
or both levels), one null (0 %), one loser (-3..-10 %), one crasher; in half the worlds the
two winners are redundant (together only as good as the better one). The true best is the
valid set with the largest true geometric-mean gain over the levels, worse at no level
(fewest members on a tie).

Every method measures through a `Machine` (the same seed gives every method the same world
and the same first-boot penalties, its own draws of boot noise): each boot multiplies the
true value by lognormal noise of the scenario's CV; a crashing set's boot costs a boot.
Scenarios (the noise users have): boot CV 2, 5 and 10 %; first boots (a configuration's
first boot slower by 10-70 % at one level, drawn per configuration, CV 2 %); a noisy arm
(every set with the null candidate scatters 3x, CV 2 %); drift (the machine's speed a
random walk, 2 % a step every 10 boots, CV 2 %); and request noise (`cvC-reqS`, issue 36
item 4): a boot's value at a level is also the mean of its R requests, log noise of
variance σ_W² / R, σ_W² set so that at the default requests (R0 = max(20, level)) they are
S % of a boot value's variance, the boots' own σ_B being C % (as in
benchmarks/simulation/gpu_minutes.py).

Cost in GPU-minutes (`gpu_minutes_mean`): gpu_minutes.py's H200 cost model (SGLang on one
H200: a boot 87 s before and after its levels, a request 0.221 s at level 1 and 0.0180 s at
256, one warm-up wave a level); a crashed boot costs its 87 s. `GPU-h` in the tables is
the older, coarser 2 GPU-hours a boot (8 GPUs, 15 min).

Levels' lengths: every method sends the default requests; its "(auto lengths)" twin sends
what `num_prompts: auto` under `precision.boot_cv_pct` (the scenario's σ_B stated) sends:
the product's stop rule run on simulated batches (gpu_minutes.level_stops), the level
longer where its requests are much of a boot's scatter. The hunt itself reads one value a
boot and level either way: lengthening a level before adding a boot is the level's own
cost-optimal stop, which the hunt's cells inherit from the sweep's `benchmark`.

Methods:
- hunt: servesweep.hunt's defaults (`--set` overrides), its confirm and ablations
  included;
- hunt (screen): the same with `design: screen` (one pass on `boots.screen` boots each,
  kept on point estimates, then the confirm and an ablation of every kept member on fresh
  boots decide what stays);
- round greedy, K boots an arm (K = 2, 3, 5): rounds like the hunt's (fresh incumbent +
  every remaining candidate on top, K boots each), adopt the best mean if it beats the
  incumbent's, stop when none does;
- one-pass greedy, K boots an arm (the by-hand style): each candidate once in list order,
  kept if its mean beats the incumbent's (whose boots are the last kept arm's);
- grid, K boots a set (K = 2, 3, 5): every combination, the best mean;
- tuner: one boot per trial over every combination, the highest single measurement wins
  (what Optuna / auto-tune-style tuners do with one measurement a trial).
"Mean": over levels of the mean log value.

Measures: boots (mean, median, p90), GPU-hours, true best (within 1 %), exact best value,
exactly the minimal best set, a useless member in the final (removing it changes the true
value by under 1 % at every level), a harmful member (removing it raises the true value by
1 % or more at some level), undecided arms (the hunt). Per scenario: whether the hunt is on
the Pareto front of (mean boots, true best) against every fixed-K greedy, and its boots
against the strongest fair comparator: the cheapest fixed-K greedy at least as often at the
true best. Also, on the production path (one round, no checks, `--error-seeds` seeds each,
boot CV 2, 5 and 10 %): the share of rounds of m = 1, 3, 5 identical candidates that adopt
one (the screen design: its whole hunt, checks included, ends with one in the final); the
share adopting a candidate that gains δ at one level (alone, and among 3 identical
ones) against the power the round's plan states, and its estimate when adopted (the
winner's curse); +8 % at one level with -5 % at the other. And other settings of the hunt
on the same worlds (`TRIED`, hunt only). Writes benchmarks/results/hunt_cost.json and
prints a table per scenario.

For a "before" row, run the same module from an older checkout's root with PYTHONPATH at this
one (`cd OLD && PYTHONPATH=THIS python -m benchmarks.simulation.hunt_cost --tried-seeds 0`:
servesweep then comes from OLD; it drives the hunt through `servesweep.hunt.state.replay`,
or `advance` where that is its name): benchmarks/results/hunt_cost_before.json is main at
18f53c1 so.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import itertools
import math
import time
from collections import defaultdict
from multiprocessing import Pool
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks.simulation import gpu_minutes as gm
from benchmarks.support.record import write_result
from servesweep.hunt import spec as hs
from servesweep.hunt import state as hstate

REPLAY = getattr(hstate, "replay", None) or hstate.advance
LEVELS = (1, 256)
BASE = {1: 9.0, 256: 350.0}
NAMES = ("w1", "w2", "null", "lose", "crash")
KS = (2, 3, 5)
GPU_HOURS_PER_BOOT = 8 * 0.25  # 8 GPUs, 15 min a boot (launch, warm-up, levels)
# The H200 cost model of gpu_minutes.py at this benchmark's levels (module doc).
C_REQUEST = {1: gm.C_REQUEST[gm.LEVELS.index(1)], 256: gm.C_REQUEST[gm.LEVELS.index(256)]}
R0 = {lv: max(20, lv) for lv in LEVELS}
AUTO = " (auto lengths)"
TOLERANCE = math.log1p(0.01)  # "true best", "useless", "harmful": 1 %


class Scenario(NamedTuple):
    cv: float
    first_boot: tuple[float, float] | None = None  # r0 slower by U(lo, hi) at one level
    noisy: str | None = None  # this candidate's sets scatter 3x
    drift_cv: float = 0.0  # speed random-walk step every DRIFT_EVERY boots
    request_share: float = 0.0  # of a boot value's variance at R0; cv is then σ_B

    def within(self) -> dict[int, float]:
        """σ_W² a request, per level (0 without request noise)."""
        s = self.request_share
        return {lv: s / (1 - s) * self.cv**2 * R0[lv] for lv in LEVELS}


DRIFT_EVERY = 10
SCENARIOS = {
    "cv2": Scenario(0.02),
    "cv5": Scenario(0.05),
    "cv10": Scenario(0.10),
    "first-boot": Scenario(0.02, first_boot=(0.10, 0.70)),
    "noisy-arm": Scenario(0.02, noisy="null"),
    "drift": Scenario(0.02, drift_cv=0.02),
    **{
        f"cv{round(cv * 100)}-req{round(share * 100)}": Scenario(cv, request_share=share)
        for cv, share in ((0.05, 0.1), (0.02, 0.5), (0.05, 0.5), (0.05, 0.9), (0.10, 0.9))
    },
}


@functools.lru_cache
def lengths(sc: Scenario, auto: bool) -> tuple[dict[int, float], dict[int, float]]:
    """(requests a level a boot is charged for, the requests its sampling variance is
    drawn with): R0 both, or `num_prompts: auto`'s under the scenario's σ_B stated."""
    if not auto:
        return dict(R0), dict(R0)
    within = sc.within()
    sent = gm.level_stops(
        LEVELS,
        [within[lv] for lv in LEVELS],
        [C_REQUEST[lv] for lv in LEVELS],
        sc.cv,
        gm.C_BOOT / len(LEVELS),
    )
    return dict(zip(LEVELS, sent.charged, strict=True)), dict(
        zip(LEVELS, sent.harmonic, strict=True)
    )


def world(rng: np.random.Generator) -> dict:
    """True factor per level of each candidate, and the redundancy of the two winners."""
    effects = {}
    for w in ("w1", "w2"):
        gain = rng.uniform(0.05, 0.12)
        both = rng.random() < 0.5
        effects[w] = {LEVELS[0]: 1 + gain, LEVELS[1]: 1 + gain if both else 1.0}
    effects["null"] = dict.fromkeys(LEVELS, 1.0)
    loss = 1 - rng.uniform(0.03, 0.10)
    effects["lose"] = dict.fromkeys(LEVELS, loss)
    effects["crash"] = dict.fromkeys(LEVELS, 1.0)
    redundant = rng.random() < 0.5
    return {"effects": effects, "redundant": redundant}


def factor(w: dict, members, level) -> float:
    have = set(members)
    f = math.prod(w["effects"][m][level] for m in have)
    if w["redundant"] and {"w1", "w2"} <= have:  # together only as good as the better
        f /= min(w["effects"]["w1"][level], w["effects"]["w2"][level])
    return f


def log_value(w: dict, members) -> float:
    return float(np.mean([math.log(factor(w, members, lv)) for lv in LEVELS]))


def true_best(w: dict) -> tuple[float, frozenset]:
    best = (-math.inf, frozenset())
    valid = [n for n in NAMES if n != "crash"]
    for k in range(len(valid) + 1):
        for combo in itertools.combinations(valid, k):
            if any(factor(w, combo, lv) < 1 - 1e-12 for lv in LEVELS):
                continue
            s = log_value(w, combo)
            if s > best[0] + 1e-12:
                best = (s, frozenset(combo))
    return best


class Boot(NamedTuple):
    values: dict | None
    failure: str | None = None
    answers_changed: bool = False


class Machine:
    """One method's machine: its boots in the order it asks for them."""

    def __init__(self, w: dict, sc: Scenario, seed: int, stream: int, auto: bool = False):
        self.w, self.sc, self.seed = w, sc, seed
        self.rng = np.random.default_rng([seed, stream])
        self.boots, self.speed, self.seconds = 0, 1.0, 0.0
        charged, sampled = lengths(sc, auto) if sc.request_share else (dict(R0), dict(R0))
        self.boot_s = gm.C_BOOT + sum((lv + charged[lv]) * C_REQUEST[lv] for lv in LEVELS)
        within = sc.within()
        self.request_sd = {lv: math.sqrt(within[lv] / sampled[lv]) for lv in LEVELS}
        self.booted: dict[frozenset, int] = defaultdict(int)

    def penalty(self, members: frozenset) -> tuple[object, float]:
        """A configuration's first-boot penalty, the same for every method (by its name)."""
        digest = hashlib.sha256(f"{self.seed}/{sorted(members)}".encode()).digest()
        u = np.random.default_rng(list(digest[:8])).random(2)
        lo, hi = self.sc.first_boot
        return LEVELS[int(u[0] * len(LEVELS))], 1 - (lo + (hi - lo) * u[1])

    def boot(self, members) -> Boot:
        members = frozenset(members)
        first = self.booted[members] == 0
        self.booted[members] += 1
        self.boots += 1
        if self.sc.drift_cv and self.boots % DRIFT_EVERY == 0:
            self.speed *= float(np.exp(self.rng.normal(0, math.log1p(self.sc.drift_cv))))
        if "crash" in members:
            self.seconds += gm.C_BOOT
            return Boot(None, "server exited during startup")
        self.seconds += self.boot_s
        cv = self.sc.cv * (3.0 if self.sc.noisy in members else 1.0)
        sigma = math.sqrt(math.log1p(cv**2))
        values = {}
        for lv in LEVELS:
            v = BASE[lv] * factor(self.w, members, lv) * self.speed
            values[lv] = v * float(np.exp(self.rng.normal(-(sigma**2) / 2, sigma)))
            if self.request_sd[lv]:  # the mean of its requests
                values[lv] *= float(np.exp(self.rng.normal(0, self.request_sd[lv])))
        if first and self.sc.first_boot:
            lv, f = self.penalty(members)
            values[lv] *= f
        return Boot(values)


def mean_of(m: Machine, members, k: int) -> float | None:
    """Mean over levels of the mean log value of k boots; None when it crashes (1 boot)."""
    boots = [m.boot(members)]
    if boots[0].failure:
        return None
    boots += [m.boot(members) for _ in range(k - 1)]
    return float(np.mean([[math.log(b.values[lv]) for lv in LEVELS] for b in boots]))


def grid(m: Machine, k: int):
    best = (-math.inf, frozenset())
    for n in range(len(NAMES) + 1):
        for combo in itertools.combinations(NAMES, n):
            v = mean_of(m, combo, k)
            if v is not None and v > best[0]:
                best = (v, frozenset(combo))
    return best[1]


def greedy(m: Machine, k: int):
    have, left = frozenset(), list(NAMES)
    while left:
        ref = mean_of(m, have, k)
        means = {}
        for c in list(left):
            v = mean_of(m, have | {c}, k)
            if v is None:
                left.remove(c)
            else:
                means[c] = v
        if not means or max(means.values()) <= ref:
            break
        pick = max(means, key=means.get)
        have, left = have | {pick}, [c for c in left if c != pick]
    return have


def one_pass(m: Machine, k: int):
    have = frozenset()
    ref = mean_of(m, have, k)
    for c in NAMES:
        v = mean_of(m, have | {c}, k)
        if v is not None and v > ref:
            have, ref = have | {c}, v
    return have


class HuntEnd(NamedTuple):
    final: frozenset
    undecided: bool
    capped: bool
    adopted_bias: list[float]  # adopted arm's estimate - truth at its level (log)
    confirm_bias: list[float]
    confirmed: bool | None


def hunt(m: Machine, spec: hs.HuntSpec) -> HuntEnd:
    obs: dict = {}
    for _ in range(10_000):
        state = REPLAY(spec, obs)
        if state.done:
            break
        for key in state.needed:
            members = state.members[key.variant]
            obs[key] = hstate.BootResult(*m.boot(members))
    else:
        raise AssertionError("the hunt did not finish")
    adopted_bias, confirm_bias, confirmed = [], [], None
    w = m.w
    for r in state.rounds:
        ref_members = state.members[r.reference]
        for a in r.arms:
            if a.level is None or not math.isfinite(a.gain_pct):
                continue
            est = math.log1p(a.gain_pct / 100)
            arm = state.members[a.variant]
            if r.kind == "search" and a.candidate == r.adopted:
                truth = math.log(factor(w, arm, a.level) / factor(w, ref_members, a.level))
                adopted_bias.append(est - truth)
            if a.role == "confirm":
                truth = math.log(factor(w, ref_members, a.level) / factor(w, arm, a.level))
                confirm_bias.append(est - truth)
                confirmed = a.verdict == "confirmed"
    arms = [a for r in state.rounds for a in r.arms]
    plans = [getattr(r, "plan", None) for r in state.rounds]
    return HuntEnd(
        frozenset(getattr(state, "final", state.incumbent)),
        any(a.verdict == "undecided" for a in arms),
        any(p is not None and p.capped for p in plans),
        adopted_bias,
        confirm_bias,
        confirmed,
    )


def members_flags(w: dict, final: frozenset) -> tuple[bool, bool]:
    """(a useless member, a harmful member) in the final set."""
    useless = harmful = False
    for c in final:
        rest = final - {c}
        diff = [math.log(factor(w, final, lv) / factor(w, rest, lv)) for lv in LEVELS]
        if min(diff) < -TOLERANCE:
            harmful = True
        elif max(diff) < TOLERANCE:
            useless = True
    return useless, harmful


def methods(sc: Scenario | None = None) -> list[str]:
    out = ["hunt", "hunt (screen)"]
    out += [f"round greedy K={k}" for k in KS]
    out += [f"one-pass greedy K={k}" for k in KS]
    out += [f"grid K={k}" for k in KS]
    out.append("tuner (1 boot a trial)")
    if sc is not None and sc.request_share:  # each level's length chosen by `auto`
        out += [f"hunt (screen){AUTO}", f"round greedy K=2{AUTO}", f"one-pass greedy K=2{AUTO}"]
    return out


def one_world(task) -> dict:
    """Every method on one (scenario, seed): per method its final set and boots."""
    name, seed, overrides, only = task
    sc = SCENARIOS[name]
    w = world(np.random.default_rng([seed, 0]))
    spec = hunt_spec(**overrides)
    out = {}
    for i, label in enumerate(methods(sc)):
        if only and label not in only and not any(label.startswith(o) for o in only):
            continue
        method = label.removesuffix(AUTO)
        m = Machine(w, sc, seed, stream=1 + i, auto=label.endswith(AUTO))
        extra = {}
        if method.startswith("hunt"):
            design = "screen" if method == "hunt (screen)" else "sequential"
            end = hunt(m, spec if design == spec.design else hunt_spec(**overrides, design=design))
            final = end.final
            extra = end._asdict()
            extra.pop("final")
        elif method.startswith("round greedy"):
            final = greedy(m, int(method[-1]))
        elif method.startswith("one-pass"):
            final = one_pass(m, int(method[-1]))
        elif method.startswith("grid"):
            final = grid(m, int(method[-1]))
        else:
            final = grid(m, 1)
        out[label] = {"final": sorted(final), "boots": m.boots, "seconds": m.seconds, **extra}
    return {"scenario": name, "seed": seed, "world": w, "methods": out}


def summarise(runs: list[dict]) -> dict:
    rows = defaultdict(lambda: defaultdict(list))
    for run in runs:
        w = run["world"]
        best_value, best_set = true_best(w)
        for method, r in run["methods"].items():
            final = frozenset(r["final"])
            value = log_value(w, final)
            useless, harmful = members_flags(w, final)
            row = rows[method]
            row["boots"].append(r["boots"])
            row["seconds"].append(r.get("seconds", math.nan))
            row["near"].append(value >= best_value - TOLERANCE - 1e-12)
            row["exact"].append(value >= best_value - 1e-12)
            row["minimal"].append(final == best_set)
            row["useless"].append(useless)
            row["harmful"].append(harmful)
            for key in ("undecided", "capped", "confirmed"):
                if key in r and r[key] is not None:
                    row[key].append(bool(r[key]))
            for key in ("adopted_bias", "confirm_bias"):
                row[key] += r.get(key, [])
    out = {}
    for method, r in rows.items():
        b = np.asarray(r["boots"], dtype=float)
        s = {
            "boots_mean": float(b.mean()),
            "boots_median": float(np.median(b)),
            "boots_p90": float(np.percentile(b, 90)),
            "gpu_hours_mean": float(b.mean() * GPU_HOURS_PER_BOOT),
            "gpu_minutes_mean": float(np.mean(r["seconds"]) / 60),
            "true_best_rate": float(np.mean(r["near"])),
            "exact_best_value_rate": float(np.mean(r["exact"])),
            "minimal_set_rate": float(np.mean(r["minimal"])),
            "useless_member_rate": float(np.mean(r["useless"])),
            "harmful_member_rate": float(np.mean(r["harmful"])),
            "useless_or_harmful_rate": float(
                np.mean(np.asarray(r["useless"]) | np.asarray(r["harmful"]))
            ),
        }
        for key in ("undecided", "capped", "confirmed"):
            if r.get(key):
                s[f"{key}_rate"] = float(np.mean(r[key]))
        for key in ("adopted_bias", "confirm_bias"):
            if r.get(key):
                s[f"{key}_pct"] = float(100 * np.mean(r[key]))
        out[method] = s
    return out


def verdict(summary: dict) -> dict:
    """The hunt against every fixed-K greedy: on the Pareto front of (mean boots, true
    best), and its boots over the cheapest one at least as often at the true best."""
    if "hunt" not in summary:  # --methods left it out
        return {}
    h = summary["hunt"]
    greedies = {k: v for k, v in summary.items() if "greedy" in k}
    if not greedies:
        return {}
    dominated_by = [
        k
        for k, g in greedies.items()
        if g["boots_mean"] <= h["boots_mean"]
        and g["true_best_rate"] >= h["true_best_rate"]
        and (g["boots_mean"] < h["boots_mean"] or g["true_best_rate"] > h["true_best_rate"])
    ]
    matching = [k for k, g in greedies.items() if g["true_best_rate"] >= h["true_best_rate"]]
    strongest = min(matching, key=lambda k: greedies[k]["boots_mean"]) if matching else None
    out = {
        "pareto_front": not dominated_by,
        "dominated_by": dominated_by,
        "useless_or_harmful_ok": h["useless_or_harmful_rate"] <= 0.05,
        "strongest_fair_comparator": strongest,
    }
    if strongest:
        g = greedies[strongest]
        out["boots_mean_ratio"] = h["boots_mean"] / g["boots_mean"]
        out["boots_median_ratio"] = h["boots_median"] / g["boots_median"]
    else:
        most = max(greedies, key=lambda k: greedies[k]["true_best_rate"])
        out["most_accurate_greedy"] = most
    out["target_met"] = out["pareto_front"] and out["useless_or_harmful_ok"]
    return out


# ---- the error rates the hunt states: one round on the production path ----------------

ERROR_CVS = (0.02, 0.05, 0.10)


def error_task(task) -> dict:
    """One seed of one error measurement: a single round (no checks) of `kind` at `cv`:
    'null m' (m identical candidates: is one adopted?), 'delta m' (one candidate gaining
    δ at the first level, the other unchanged, among m - 1 identical ones: adopted?),
    'tradeoff' (+8 % at one level, -5 % at the other: adopted?)."""
    kind, cv, seed, overrides = task
    m = int(kind.split()[-1]) if kind[-1].isdigit() else 1
    names = [f"c{i}" for i in range(m)]
    screen = overrides.get("design") == "screen"  # its checks are its gate: kept on
    spec = hs.from_dict(
        {
            "confirm": screen,
            "ablate": screen,
            **overrides,
            "start": {"name": "baseline", "stack": "sgl"},
            "candidates": {n: {"flags": {n: True}} for n in names},
            "objective": {"metric": "output_tok_s", "levels": list(LEVELS)},
        }
    )
    delta = spec.min_effect_pct / 100
    effects = {n: dict.fromkeys(LEVELS, 1.0) for n in names}
    if kind.startswith("delta"):
        effects["c0"][LEVELS[0]] = 1 + delta
    if kind == "tradeoff":
        effects["c0"] = {LEVELS[0]: 1.08, LEVELS[1]: 0.95}
    w = {"effects": {**effects, "crash": dict.fromkeys(LEVELS, 1.0)}, "redundant": False}
    m_ = Machine(w, Scenario(cv), seed, stream=101)
    obs: dict = {}
    while True:
        state = REPLAY(spec, obs)
        if state.done:
            break
        for key in state.needed:
            obs[key] = hstate.BootResult(*m_.boot(state.members[key.variant]))
    r = state.rounds[0]
    c0 = next(a for a in r.arms if a.candidate == "c0")
    plan = getattr(r, "plan", None)
    stated = None
    if plan is not None and hasattr(hs, "power_of"):
        stated = hs.power_of(spec, plan)
    adopted, c0_adopted = r.adopted is not None, c0.verdict == "adopt"
    if screen:  # what the whole hunt ends with: the screen, then its checks
        adopted, c0_adopted = bool(state.final), "c0" in state.final
    return {
        "kind": kind,
        "design": spec.design,
        "cv": cv,
        "adopted": adopted,
        "c0_adopted": c0_adopted,
        "c0_estimate_pct": c0.gain_pct if c0_adopted and not screen else None,
        "boots": m_.boots,
        "stated_power": stated,
        "capped": bool(plan is not None and plan.capped),
    }


def error_summary(rows: list[dict]) -> dict:
    out = {}
    for design, kind in dict.fromkeys((r.get("design", "sequential"), r["kind"]) for r in rows):
        for cv in ERROR_CVS:
            here = [
                r
                for r in rows
                if r["kind"] == kind and r["cv"] == cv and r.get("design", "sequential") == design
            ]
            if not here:
                continue
            rate = float(np.mean([r["c0_adopted" if kind != "null" else "adopted"] for r in here]))
            if kind.startswith("null"):
                rate = float(np.mean([r["adopted"] for r in here]))
            est = [r["c0_estimate_pct"] for r in here if r["c0_estimate_pct"] is not None]
            stated = [r["stated_power"] for r in here if r["stated_power"] is not None]
            label = f"{kind} @ CV {cv:.0%}"
            out[label if design == "sequential" else f"{design}: {label}"] = {
                "rate": rate,
                "se": math.sqrt(max(rate * (1 - rate), 1e-12) / len(here)),
                "seeds": len(here),
                "boots_mean": float(np.mean([r["boots"] for r in here])),
                "adopted_estimate_pct_mean": float(np.mean(est)) if est else None,
                "stated_power_mean": float(np.mean(stated)) if stated else None,
                "capped_rate": float(np.mean([r["capped"] for r in here])),
            }
    return out


ERROR_DESIGNS = {  # the method each error row is the hunt of (--methods picks them too)
    "hunt": {"design": "sequential"},
    "hunt (screen)": {"design": "screen"},
}
ERROR_KINDS = ("null 1", "null 3", "null 5", "delta 1", "delta 4", "tradeoff")
# Other settings of the hunt, on the same worlds (hunt only): what each default costs.
TRIED = {
    "first boots always left out (first_boot: drop)": {"first_boot": "drop"},
    "first boots always counted (first_boot: keep)": {"first_boot": "keep"},
    "margin 5 % (margin_pct: 5)": {"margin_pct": 5},
    "cap 11 (boots.max: 11)": {"boots_max": 11},
    "cap 30 (boots.max: 30)": {"boots_max": 30},
    "δ 5 % (min_effect_pct: 5)": {"min_effect_pct": 5},
    "α 0.10 a round (alpha: 0.1)": {"alpha": 0.1},
}
TRIED_SCENARIOS = ("cv2", "cv5", "first-boot")


def parse_override(text: str) -> tuple[str, object]:
    """`key=value` with a Python literal value (a bare word is a string): no eval."""
    key, sep, raw = text.partition("=")
    if not sep or key not in hs.HuntSpec.__dataclass_fields__:
        raise SystemExit(f"--set {text!r}: expected key=value with a HuntSpec field as key")
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, raw


def hunt_spec(**overrides) -> hs.HuntSpec:
    return hs.from_dict(
        {
            **overrides,
            "start": {"name": "baseline", "stack": "sgl"},
            "candidates": {n: {"flags": {n: True}} for n in NAMES},
            "objective": {"metric": "output_tok_s", "levels": list(LEVELS)},
            "gpu_hours_per_boot": GPU_HOURS_PER_BOOT,
        }
    )


def table(name: str, summary: dict, v: dict) -> str:
    head = (
        f"{'method':<40} {'boots':>6} {'median':>6} {'p90':>5} {'GPU-h':>6} {'H200-min':>8} "
        f"{'best±1%':>8} "
        f"{'exact':>6} {'minimal':>7} {'useless':>7} {'harmful':>7}"
    )
    lines = [f"== {name}", head]
    for method, s in summary.items():
        lines.append(
            f"{method:<40} {s['boots_mean']:6.1f} {s['boots_median']:6.0f} "
            f"{s['boots_p90']:5.0f} {s['gpu_hours_mean']:6.1f} {s['gpu_minutes_mean']:8.1f} "
            f"{s['true_best_rate']:8.3f} "
            f"{s['exact_best_value_rate']:6.3f} {s['minimal_set_rate']:7.3f} "
            f"{s['useless_member_rate']:7.3f} {s['harmful_member_rate']:7.3f}"
        )
    lines.append(f"   {v}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--set", nargs="*", default=[], help="HuntSpec overrides, key=value")
    ap.add_argument("--methods", default="", help="only these (prefixes, comma-separated)")
    ap.add_argument("--error-seeds", type=int, default=1000, help="per error rate and CV")
    ap.add_argument("--tried-seeds", type=int, default=200, help="per setting tried, 0: none")
    args = ap.parse_args()
    overrides = dict(parse_override(kv) for kv in args.set)
    names = args.scenarios.split(",")
    only = [m for m in args.methods.split(",") if m]
    tasks = [(n, seed, overrides, only) for n in names for seed in range(args.seeds)]
    errors = [
        (kind, cv, seed, {**overrides, **design})
        for label, design in ERROR_DESIGNS.items()
        if not only or any(label.startswith(o) for o in only)
        for kind in ERROR_KINDS
        for cv in ERROR_CVS
        for seed in range(args.error_seeds)
        if cv == 0.02 or kind != "tradeoff"
    ]
    tried = [
        (n, seed, {**overrides, **extra}, ["hunt"])
        for extra in TRIED.values()
        for n in TRIED_SCENARIOS
        for seed in range(args.tried_seeds)
    ]
    t0 = time.perf_counter()
    with Pool(args.jobs) as pool:
        runs = pool.map(one_world, tasks, chunksize=4)
        error_rows = pool.map(error_task, errors, chunksize=8)
        tried_runs = pool.map(one_world, tried, chunksize=4)
    seconds = time.perf_counter() - t0
    tried_out = {}
    for label, extra in TRIED.items():
        for n in TRIED_SCENARIOS:
            mine = [
                r
                for r, t in zip(tried_runs, tried, strict=True)
                if t[0] == n and t[2] == {**overrides, **extra}
            ]
            if mine:
                h = summarise(mine)["hunt"]
                tried_out.setdefault(label, {})[n] = h
                print(
                    f"tried {label:<48} {n:<10} boots {h['boots_mean']:6.1f} "
                    f"best {h['true_best_rate']:.3f} "
                    f"useless/harmful {h['useless_or_harmful_rate']:.3f}"
                )
    error_rates = error_summary(error_rows)
    for k, v in error_rates.items():
        stated = v["stated_power_mean"]
        print(
            f"{k:<24} rate {v['rate']:.3f} ± {v['se']:.3f}  boots {v['boots_mean']:.1f}"
            + (f"  stated power {stated:.2f}" if stated is not None else "")
            + (
                f"  adopted Δ {v['adopted_estimate_pct_mean']:+.1f} %"
                if v["adopted_estimate_pct_mean"]
                else ""
            )
        )
    scenarios = {}
    for n in names:
        summary = summarise([r for r in runs if r["scenario"] == n])
        scenarios[n] = {"noise": SCENARIOS[n]._asdict(), "methods": summary,
                        "verdict": verdict(summary)}  # fmt: skip
        print(table(n, summary, scenarios[n]["verdict"]))
    spec = hunt_spec(**overrides)
    data = {
        "seeds": args.seeds,
        "hunt_overrides": overrides,
        "hunt_defaults": {
            k: getattr(spec, k)
            for k in ("min_effect_pct", "boots_min", "boots_max", "stage", "alpha", "power")
        },
        "fixed_boots_per_arm": list(KS),
        "gpu_hours_per_boot": GPU_HOURS_PER_BOOT,
        "scenarios": scenarios,
        "errors": error_rates,
        "error_seeds": args.error_seeds,
        "tried": tried_out,
        "tried_seeds": args.tried_seeds,
        "seconds": seconds,
    }
    path = write_result("hunt_cost", data, args.out)
    print(f"{seconds:.0f} s; {path}")


if __name__ == "__main__":
    main()
