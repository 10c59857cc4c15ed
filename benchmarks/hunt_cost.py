"""What the hunt costs and how often it ends at the true best, against fixed-repeat searches,
on the simulator (servesweep.hunt.simulate: known truth, lognormal boot noise).

    PYTHONPATH=. python benchmarks/hunt_cost.py [--seeds 500] [--cv 0.02] [--drift 0.0]
        [--set boots_min=2 alpha_spending=pocock ...]

Each seed draws a world of 5 candidates over 2 counted levels: two winners (+5..12 % at one
or both levels), one null (0 %), one loser (-3..-10 %), one crasher; in half the worlds the
two winners are redundant (together only as good as the better one). The true best is the
valid set with the largest true geometric-mean gain over the levels, worse at no level
(fewest members on a tie). A method "ends at the true best" when its final set's true value
is within --tolerance-pct (1 %) of that best value (two winners of 6.3 and 6.8 % are the
same to any search at CV 2 %); also reported: the exact best value, and exactly the minimal
best set (no zero-effect member). Compared, on the same world and the same noise model:
- hunt: the defaults of servesweep.hunt.spec.HuntSpec, confirm and ablation included;
- grid: every combination, 5 boots each (a crashing one costs 1 boot), best mean;
- greedy: rounds like the hunt's (fresh incumbent + every remaining candidate on top, 5
  boots each), adopt the best mean if it beats the incumbent's, stop when none does;
- one-pass greedy (the by-hand style): each candidate once in list order, 5 boots, kept if
  its mean beats the incumbent's (whose boots are the last kept arm's).
"Mean" is the mean over levels of the mean log value. Writes
benchmarks/results/hunt_cost.json and prints a table.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record import write_result  # noqa: E402

from servesweep.hunt import spec as hs  # noqa: E402
from servesweep.hunt.simulate import Noise, Truth, measure, run  # noqa: E402

LEVELS = (1, 256)
BASE = {1: 9.0, 256: 350.0}
NAMES = ("w1", "w2", "null", "lose", "crash")
FIXED = 5  # boots per arm of the fixed-repeat searches
GPU_HOURS_PER_BOOT = 8 * 0.25  # 8 GPUs, 15 min a boot (launch, warm-up, levels)
TOLERANCE_PCT = 1.0  # "ends at the true best": within this of the best reachable true value


def world(rng: np.random.Generator) -> Truth:
    effects = {}
    for w in ("w1", "w2"):
        gain = rng.uniform(0.05, 0.12)
        both = rng.random() < 0.5
        effects[w] = {LEVELS[0]: 1 + gain, LEVELS[1]: 1 + gain if both else 1.0}
    effects["null"] = 1.0
    effects["lose"] = 1 - rng.uniform(0.03, 0.10)
    interactions = {}
    if rng.random() < 0.5:  # redundant winners: together as good as the better alone
        interactions[frozenset({"w1", "w2"})] = {
            lv: 1 / min(effects["w1"][lv], effects["w2"][lv]) for lv in LEVELS
        }
    return _Truth(BASE, effects, interactions, frozenset({"crash"}))


class _Truth(Truth):
    def factor(self, members, level):  # interactions per level
        have = set(members)
        f = 1.0
        for name in have:
            e = self.effects.get(name, 1.0)
            f *= e.get(level, 1.0) if isinstance(e, dict) else e
        for group, extra in self.interactions.items():
            if group <= have:
                f *= extra[level]
        return f


def score(truth: Truth, members) -> float:
    return float(np.mean([math.log(truth.factor(members, lv)) for lv in LEVELS]))


def true_best(truth: Truth) -> tuple[float, frozenset]:
    best = (-math.inf, frozenset())
    valid = [n for n in NAMES if n not in truth.crashers]
    for k in range(len(valid) + 1):
        for combo in itertools.combinations(valid, k):
            if any(truth.factor(combo, lv) < 1 - 1e-12 for lv in LEVELS):
                continue
            s = score(truth, combo)
            if s > best[0] + 1e-12:
                best = (s, frozenset(combo))
    return best


def fixed_mean(truth, noise, members, rng) -> tuple[float | None, int]:
    """Mean over levels of the mean log value of FIXED boots; None when it crashes (1 boot)."""
    boots = [measure(truth, noise, members, LEVELS, rng) for _ in range(FIXED)]
    if boots[0].failure:
        return None, 1
    return float(np.mean([[math.log(b.values[lv]) for lv in LEVELS] for b in boots])), FIXED


def grid(truth, noise, rng):
    best, spent = (-math.inf, frozenset()), 0
    for k in range(len(NAMES) + 1):
        for combo in itertools.combinations(NAMES, k):
            m, n = fixed_mean(truth, noise, combo, rng)
            spent += n
            if m is not None and m > best[0]:
                best = (m, frozenset(combo))
    return best[1], spent


def greedy(truth, noise, rng):
    have, left, spent = frozenset(), list(NAMES), 0
    while left:
        ref, n = fixed_mean(truth, noise, have, rng)
        spent += n
        means = {}
        for c in list(left):
            m, n = fixed_mean(truth, noise, have | {c}, rng)
            spent += n
            if m is None:
                left.remove(c)
            else:
                means[c] = m
        if not means or max(means.values()) <= ref:
            break
        pick = max(means, key=means.get)
        have, left = have | {pick}, [c for c in left if c != pick]
    return have, spent


def one_pass(truth, noise, rng):
    have = frozenset()
    ref, spent = fixed_mean(truth, noise, have, rng)
    for c in NAMES:
        m, n = fixed_mean(truth, noise, have | {c}, rng)
        spent += n
        if m is not None and m > ref:
            have, ref = have | {c}, m
    return have, spent


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=500)
    ap.add_argument("--cv", type=float, default=0.02)
    ap.add_argument("--drift", type=float, default=0.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--set", nargs="*", default=[], help="HuntSpec overrides, key=value (Python literals)"
    )
    ap.add_argument("--tolerance-pct", type=float, default=TOLERANCE_PCT)
    args = ap.parse_args()
    overrides = dict(parse_override(kv) for kv in args.set)
    spec, noise = hunt_spec(**overrides), Noise(args.cv, args.drift)
    rows = {
        m: {"boots": [], "best": [], "near": [], "exact": []}
        for m in ("hunt", "grid", "greedy", "one_pass")
    }
    near = math.log1p(-args.tolerance_pct / 100)
    search_boots, confirmed = [], []
    t0 = time.perf_counter()
    for seed in range(args.seeds):
        truth = world(np.random.default_rng([seed, 0]))
        best_score, best_set = true_best(truth)
        sim = run(spec, truth, noise, seed)
        st = sim.state
        ends = {"hunt": (frozenset(st.incumbent), st.spent.boots)}
        search_boots.append(
            sum(
                len(r.reference_boots) + sum(len(a.boots) for a in r.arms)
                for r in st.rounds
                if r.kind == "search"
            )
        )
        confirmed += [
            a.verdict == "confirmed" for r in st.rounds for a in r.arms if a.role == "confirm"
        ]
        for name, method in (("grid", grid), ("greedy", greedy), ("one_pass", one_pass)):
            ends[name] = method(truth, noise, np.random.default_rng([seed, 1]))
        for name, (final, boots) in ends.items():
            rows[name]["boots"].append(boots)
            rows[name]["best"].append(score(truth, final) >= best_score - 1e-9)
            rows[name]["near"].append(score(truth, final) >= best_score + near - 1e-9)
            rows[name]["exact"].append(final == best_set)
    seconds = time.perf_counter() - t0
    summary = {}
    for name, r in rows.items():
        b = np.asarray(r["boots"])
        summary[name] = {
            "boots_mean": float(b.mean()),
            "boots_p90": float(np.percentile(b, 90)),
            "gpu_hours_mean": float(b.mean() * GPU_HOURS_PER_BOOT),
            "true_best_rate": float(np.mean(r["near"])),
            "exact_best_value_rate": float(np.mean(r["best"])),
            "exact_best_set_rate": float(np.mean(r["exact"])),
        }
    summary["hunt"]["search_boots_mean"] = float(np.mean(search_boots))
    summary["hunt"]["confirm_rate"] = float(np.mean(confirmed)) if confirmed else None
    ratios = {
        f"hunt_boots_over_{m}": summary["hunt"]["boots_mean"] / summary[m]["boots_mean"]
        for m in ("grid", "greedy", "one_pass")
    }
    target = {
        "greedy": summary["hunt"]["true_best_rate"] >= summary["greedy"]["true_best_rate"]
        and ratios["hunt_boots_over_greedy"] <= 0.5,
        "one_pass": summary["hunt"]["true_best_rate"] >= summary["one_pass"]["true_best_rate"]
        and ratios["hunt_boots_over_one_pass"] <= 0.5,
    }
    d = hs.design(spec)
    data = {
        "seeds": args.seeds,
        "hunt_overrides": overrides,
        "cv": args.cv,
        "drift_cv": args.drift,
        "fixed_boots_per_arm": FIXED,
        "gpu_hours_per_boot": GPU_HOURS_PER_BOOT,
        "hunt_design": {
            "looks": d.looks,
            "alpha": d.alpha,
            "power": 1 - d.beta,
            "min_effect_pct": spec.min_effect_pct,
            "levels": d.levels,
        },
        "methods": summary,
        "ratios": ratios,
        "true_best_tolerance_pct": args.tolerance_pct,
        "target_met": target,
        "seconds": seconds,
    }
    path = write_result("hunt_cost", data, args.out)
    print(
        f"{'method':<10} {'boots':>7} {'p90':>6} {'GPU-h':>7} {'best±tol':>9} {'best':>6}"
        f" {'exact set':>10}"
    )
    for name, s in summary.items():
        print(
            f"{name:<10} {s['boots_mean']:7.1f} {s['boots_p90']:6.0f} {s['gpu_hours_mean']:7.1f}"
            f" {s['true_best_rate']:9.3f} {s['exact_best_value_rate']:6.3f}"
            f" {s['exact_best_set_rate']:10.3f}"
        )
    print(f"hunt search-only boots {summary['hunt']['search_boots_mean']:.1f}; ratios {ratios}")
    print(f"target met: {target}; {seconds:.0f} s; {path}")


if __name__ == "__main__":
    main()
