"""GPU-minutes to a decision: fixed boots against requests and boots sized by what is
measured (issue 35), by simulation with known truth and an H200 cost model.

    python -m benchmarks.simulation.gpu_minutes [--seeds 100] [--fixed-seeds 2000] [--out FILE]

**Cost model** (docs/sglang-h200.md, SGLang 0.5.17 on one H200, 2026-12-03; 128 output tokens
a request): a boot costs C_BOOT = 87 s before and after its levels (a warm launch to ready
73 s, the median of the seven warm boots' 67-99 s; teardown 6 s; the correctness pass and
the job's own ~8 s: a healthy warm boot's job took 146-168 s, of which the four levels with
their warm-up waves ~70 s); a request at level 1 / 10 / 256 / 1,024 costs 128 tokens over
the baseline's output tok/s there, 579 / 3,592 / 7,100 / 6,130, divided by the level
(0.221 / 0.0356 / 0.0180 / 0.0209 s); a level also sends one warm-up wave (`level`
requests). The cold first boot (163 s) is not modelled. One GPU a server: GPU-minutes are
the sweep's minutes.

**Worlds**: a baseline and four variants, levels 1, 10, 256, 1,024 (the H200 examples'); a
boot's log throughput at a level is truth + b + e, b ~ N(0, σ_B²) per boot and level (boot
CV 2, 5, 10 %), e ~ N(0, σ_W² / R) the sampling of its R requests, with σ_W² set so that at
the default requests (R0 = max(20, level)) the requests are 10, 50 or 90 % of a boot
value's variance; and a world whose first boots are 30-70 % slower at level 10 (drawn per
configuration; CV 5 %, requests 50 %).

**Designs**:
- `fixed-2`, `fixed-3`, `fixed-5`: `repeats` 2 / 3 / 5 at the default requests;
- `auto-boots`: `repeats: auto` (min 2, max 6, stage 1; `servesweep.sweep.stages.
  stage_decisions`: Pocock-type group-sequential bounds from `servesweep.hunt.sequential`,
  futility at the 2 % margin, `out of reach` at 10 %, the cap) at the default requests;
- `auto`: `num_prompts: auto` (`servesweep.sizing.Precision`'s defaults: stop at a
  throughput RSE of 2 %, the estimate after 5 batches of max(10, level) requests past a
  discarded first or its upper 95 % bound after 3, within 120 s and 5,000 requests; the
  product's own `request_stop` run on simulated batches, `stops`) × `repeats: auto`;
- `auto-kj`: `repeats: auto` with R a level from the variance components by Kalibera &
  Jones (`servesweep.sizing.cost_optimal_per_boot`: r = √(C_BOOT / c_request × σ_W² / σ_B²),
  at least R0's batches, capped as `auto`), the components known, as a previous sweep's
  verdicts.csv gives them (the plan's advice): an upper bound of what sizing R can buy;
- `kj-2`, `kj-3`: 2 / 3 boots (fixed) with those requests: the requests' lever alone;
- `kjs-2`, `kjs-3`: 2 / 3 boots with R from the components when one boot serves every
  level (`sweep_requests`: the boot's cost shared, every level sampled alike); and per
  world the ceiling of the requests' lever in this cost model (`requests_bound`);
- `auto-stated`: `repeats: auto` × `num_prompts: auto` under `precision.boot_cv_pct` (the
  product's cost-optimal stop, `servesweep.sizing.target_rse`) stating the world's σ_B, c_b =
  C_BOOT over the boot's 4 levels, run as `auto` is (`stops`);
  `auto-stated-x2`: σ_B stated twice the truth (a prior from a noisier machine);
  `auto-stated-min5`: `auto-stated` without the upper-bound stop (the rule before it: the
  estimate after `min_batches` only), the comparator of that stop;
- `auto-kj-5`: the same as `auto-kj` with the stage rule's margin at 5 % (`stage_decisions(...,
  margin_pct=5)`: a variant stops adding boots once its interval lies within ±5 %, or
  beyond +5 %); the verdict stays the judge's at the 2 % margin. At 2 % the futility bound
  is out of reach in 6 boots at boot CV ≥ 2 %: what stops an unchanged variant early is the
  `out of reach` rule (before it, every one ran to the cap: 29.2-29.9 boots of 30).

Each sweep is judged by the judge's fast path (`tests/fixtures/verdict_sim.judge_fast`,
checked against `verdicts.compare` verdict for verdict, staged sweeps' unequal boots
included) on every boot measured. Measured per world and design: GPU-minutes of the sweep
(A/A draws: nothing changed, the costly case for the stages), A/A (a variant called faster
or slower anywhere in the primary family), and power at +5 / +10 / +30 % (one variant
changed at every level; called faster anywhere in the primary family). The ratio: a staged
design's GPU-minutes over the cheapest fixed `repeats` (2-16, the default requests) with
power at least its own (less 0.03, about the Monte-Carlo error) and A/A ≤ 0.05, per
effect ("none": no fixed repeats up to 16 is as powerful). For the staged designs the
stage rule's own word (its sequential decision: faster / slower at the look that decided
it) is printed beside the judge's on the final boots.

Writes benchmarks/results/gpu_minutes.json.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks.support.record import write_result
from servesweep import sizing, stats
from servesweep.sizing import Precision
from servesweep.sweep.stages import repeats_rule, stage_decisions
from tests.fixtures.verdict_sim import judge_fast

LEVELS = (1, 10, 256, 1024)
FIRST_LEVEL = 10
C_BOOT = 87.0  # s: launch to ready, teardown, correctness, the job's own
TOKENS = 128
TOK_S = (579.0, 3592.0, 7100.0, 6130.0)  # the H200 SGLang baseline's output tok/s a level
C_REQUEST = tuple(TOKENS / t for t in TOK_S)  # seconds a request at each level
R0 = tuple(max(20, lv) for lv in LEVELS)  # the default requests
K = 5  # a baseline and four variants
EFFECTS = (0.05, 0.10, 0.30)
FIXED = (2, 3, 5)
MATCH = (2, 3, 4, 5, 6, 8, 10, 12, 16)  # fixed repeats tried for "as powerful"
RULE = repeats_rule("auto")  # min 2, max 6, stage 1
PRECISION = Precision()


class World(NamedTuple):
    name: str
    boot_cv: float
    request_share: float  # of a boot value's variance at the default requests
    first_boot: bool = False

    def within(self) -> np.ndarray:
        """σ_W² a request, per level."""
        s_b2 = self.boot_cv**2
        share = self.request_share
        return np.asarray([share / (1 - share) * s_b2 * r for r in R0])


def worlds() -> list[World]:
    out = [
        World(f"CV {cv:.0%}, requests {share:.0%}", cv, share)
        for share in (0.10, 0.50, 0.90)
        for cv in (0.02, 0.05, 0.10)
    ]
    out.append(World("CV 5%, requests 50%, first boots 30-70% slower at 10", 0.05, 0.5, True))
    return out


class Sent(NamedTuple):
    """What `num_prompts: auto` sends a level, over simulated levels: the mean requests it
    sends (what a boot is charged for: the discarded first batch, the counted ones and
    those in flight at the stop, which end as usual) and the harmonic mean of the counted
    (what its sampling variance σ_W² E[1/R] is drawn with; R varies boot to boot)."""

    charged: np.ndarray
    harmonic: np.ndarray


STOP_SIMS = 2000  # simulated levels per world and level for the stop's distribution


def stops(world: World, stated_cv: float | None, bound: bool = True, seed: int = 0) -> Sent:
    """What `auto` sends each level of a world's boot (`level_stops` with this benchmark's
    levels and cost model; c_b = C_BOOT over the 4 levels)."""
    return level_stops(
        LEVELS, world.within(), C_REQUEST, stated_cv, C_BOOT / len(LEVELS), bound, seed
    )


def level_stops(
    levels: Sequence[int],
    within: Sequence[float],
    c_request: Sequence[float],
    stated_cv: float | None,
    c_b: float,
    bound: bool = True,
    seed: int = 0,
) -> Sent:
    """The product's own stop rule (`servesweep.sizing.request_stop`) run on simulated
    batches of max(10, level) requests, whose seconds scatter lognormally with a batch's
    share of σ_W² (`within`, a request's; CV² = σ_W² / batch) and whose tokens are fixed;
    the first batch is discarded as the rule does. `stated_cv`: `precision.boot_cv_pct`
    (σ_B, a fraction) with the boot's share `c_b` seconds; None: the 2 % RSE rule. Counted
    requests within the caps (`max_requests`, `max_s`), at least one batch. `bound=False`:
    the rule as it was before its upper-bound stop (the estimate after `min_batches`
    only): the comparator, in the same run."""
    saved = sizing.BOUND_MIN_BATCHES
    sizing.BOUND_MIN_BATCHES = saved if bound else 10**9
    rng = np.random.default_rng(seed)
    rule = PRECISION._replace(boot_cv_pct=None if stated_cv is None else stated_cv * 100)
    mean, harmonic, charged, counted = [], [], [], []
    try:
        for lv, w, c in zip(levels, within, c_request, strict=True):
            batch = max(10, lv)
            sigma = math.sqrt(math.log1p(float(w) / batch))
            for _ in range(STOP_SIMS):
                batches: list[sizing.Batch] = []
                finished, elapsed = 0, 0.0
                while True:
                    d = batch * c * math.exp(rng.normal(-(sigma**2) / 2, sigma))
                    batches.append(sizing.Batch(TOKENS * batch, d))
                    finished += batch
                    elapsed += d if len(batches) > 1 else 0.0
                    # sent as the client counts it: finished and the level's streams in flight
                    sent = min(finished + lv, rule.max_requests)
                    if sizing.request_stop(rule, batches, elapsed, sent, c_b).stop:
                        break
                charged.append(sent)
                counted.append(max(min(finished, rule.max_requests) - batch, batch))
            mean.append(float(np.mean(charged[-STOP_SIMS:])))
            harmonic.append(1 / np.mean(1 / np.asarray(counted[-STOP_SIMS:], dtype=float)))
    finally:
        sizing.BOUND_MIN_BATCHES = saved
    return Sent(np.asarray(mean), np.asarray(harmonic))


def kj_requests(world: World) -> np.ndarray:
    """R a level by Kalibera & Jones from the known components, at least R0, capped as
    `auto` is."""
    out = []
    for w, c, r0 in zip(world.within(), C_REQUEST, R0, strict=True):
        r = sizing.cost_optimal_per_boot(world.boot_cv**2, float(w), C_BOOT, c)
        cap = min(PRECISION.max_requests, PRECISION.max_s / c)
        out.append(float(min(max(r, r0), cap)))
    return np.asarray(out)


def sweep_requests(world: World) -> np.ndarray:
    """R a level when one boot serves every level (`stats.shared_boot_per_level`), at
    least R0, capped as `auto` is."""
    within = world.within()
    r = stats.shared_boot_per_level(world.boot_cv**2, within, C_BOOT, C_REQUEST)
    caps = [min(PRECISION.max_requests, PRECISION.max_s / c) for c in C_REQUEST]
    return np.asarray([min(max(x, r0), cap) for x, r0, cap in zip(r, R0, caps, strict=True)])


def requests_bound(world: World) -> float:
    """At best, what sizing requests can save at equal precision of a boot value (cost x
    variance, every level alike) against the default requests, before any cap or floor
    (it may send fewer than R0): the request lever's ceiling in this cost model."""
    within = world.within()
    s_b2 = world.boot_cv**2
    a = float(sum(w * c for w, c in zip(within, C_REQUEST, strict=True)))
    u = math.sqrt(a * s_b2 / C_BOOT)
    warmups = float(sum(lv * c for lv, c in zip(LEVELS, C_REQUEST, strict=True)))
    best = (C_BOOT + warmups + a / u) * (s_b2 + u)
    default = boot_seconds(np.asarray(R0, dtype=float)) * (s_b2 + float(within[0]) / R0[0])
    return best / default


def boot_seconds(requests: np.ndarray) -> float:
    """One boot: C_BOOT and every level's warm-up wave and measured requests."""
    return C_BOOT + float(
        sum((lv + r) * c for lv, r, c in zip(LEVELS, requests, C_REQUEST, strict=True))
    )


def draw(rng, world: World, sims: int, boots: int, truths, requests: np.ndarray) -> np.ndarray:
    """Log throughput (sims, K, 5, L, boots), every metric the objective's (latencies its
    negative): the judge reads the primary family only here."""
    shape = (sims, K, len(LEVELS), boots)
    b = rng.normal(0, world.boot_cv, shape)
    e = rng.normal(0, 1, shape) * np.sqrt(world.within() / requests)[None, None, :, None]
    y = np.log1p(np.asarray(truths))[None, :, None, None] + b + e
    if world.first_boot:
        slow = rng.uniform(0.3, 0.7, (sims, K))
        y[:, :, LEVELS.index(FIRST_LEVEL), 0] += np.log1p(-slow)
    return np.stack([y, -y, -y, -y, -y], axis=2)


def judged(logs: np.ndarray, changed: bool) -> tuple[np.ndarray, np.ndarray]:
    """(power: the changed variant (index 0) called faster anywhere in the primary family,
    A/A: each unchanged variant called faster or slower anywhere there)."""
    v = judge_fast(logs)[:, :, 0]  # (sims, K - 1, L)
    faster = (v[:, 0] == 1).any(-1)
    wrong = (v != 0).any(-1)
    return faster, wrong[:, 1:] if changed else wrong


def staged(logs: np.ndarray, margin_pct: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Each sweep's boots a configuration under repeats: auto (the stage rule on the
    objective at every level), and the stage rule's own word on each variant (+1 faster,
    -1 slower, 0 within the margin or at the cap)."""
    sims = logs.shape[0]
    have = np.full((sims, K), RULE.min)
    words = np.zeros((sims, K - 1), dtype=int)
    names = [f"v{i}" for i in range(1, K)]
    for i in range(sims):
        y = np.exp(logs[i, :, 0])  # (K, L, B)
        boots = dict.fromkeys(["baseline", *names], RULE.min)
        while True:
            s = stage_decisions(
                RULE,
                y[0, :, : boots["baseline"]],
                {v: y[j + 1, :, : boots[v]] for j, v in enumerate(names)},
                list(LEVELS),
                margin_pct=margin_pct,
            )
            if s.done or not s.needed:
                break
            boots.update(s.needed)
        have[i] = [boots["baseline"], *(boots[v] for v in names)]
        words[i] = [{"faster": 1, "slower": -1}.get(s.arms[v].outcome, 0) for v in names]
    return have, words


STATED = {"auto": None, "auto-stated": 1.0, "auto-stated-x2": 2.0, "auto-stated-min5": 1.0}


def run_design(rng, world: World, design: str, sims: int) -> dict:
    sampled = None  # the requests a boot's sampling is drawn with, where not `requests`
    if design.startswith("fixed"):
        boots = int(design.split("-")[1])
        requests = np.asarray(R0, dtype=float)
    elif design.startswith("kj-"):  # fixed boots, requests by Kalibera & Jones
        boots = int(design.split("-")[1])
        requests = kj_requests(world)
    elif design.startswith("kjs-"):  # fixed boots, requests with the boot shared by levels
        boots = int(design.split("-")[1])
        requests = sweep_requests(world)
    elif design.startswith("auto-kj") or design == "auto-boots":
        boots = RULE.max
        requests = np.asarray(R0, dtype=float) if design == "auto-boots" else kj_requests(world)
    else:  # num_prompts: auto, the product's stop rule simulated (`stops`)
        boots = RULE.max
        x = STATED[design]
        sent = stops(world, None if x is None else x * world.boot_cv, design != "auto-stated-min5")
        requests, sampled = sent.charged, sent.harmonic
    per_boot = boot_seconds(requests)
    out = {"requests": requests.round(0).tolist(), "boot_s": round(per_boot, 1)}
    for label, truths in [("aa", [0.0] * K), *((f"+{e:.0%}", [0, e, 0, 0, 0]) for e in EFFECTS)]:
        logs = draw(rng, world, sims, boots, truths, requests if sampled is None else sampled)
        if design.startswith(("fixed", "kj-", "kjs-")):
            have = np.full((sims, K), boots)
        else:
            have, words = staged(logs, 5.0 if design.endswith("-5") else 2.0)
            mask = np.arange(boots)[None, None, None, None, :] < have[:, :, None, None, None]
            logs = np.where(mask, logs, np.nan)
        minutes = have.sum(1) * per_boot / 60
        faster, wrong = judged(logs, label != "aa")
        if design.startswith("auto"):  # the stage rule's own (sequential) word
            seq_wrong = (words[:, 1:] if label != "aa" else words) != 0
            out[f"seq power {label}" if label != "aa" else "seq aa"] = float(
                (words[:, 0] == 1).mean() if label != "aa" else seq_wrong.mean()
            )
        if label == "aa":
            out["aa"] = float(wrong.mean())
            out["gpu_minutes"] = float(minutes.mean())
            out["boots"] = float(have.sum(1).mean())
        else:
            out[f"power {label}"] = float(faster.mean())
            out[f"gpu_minutes {label}"] = float(minutes.mean())
            out[f"aa {label}"] = float(wrong.mean())
    return out


def ratios(row: dict, design: str = "auto", tolerance: float = 0.03) -> dict:
    """Per effect: auto's GPU-minutes over the cheapest fixed design as powerful (within
    `tolerance`) with A/A ≤ 0.05; None where no fixed design is."""
    out = {}
    for e in EFFECTS:
        key = f"+{e:.0%}"
        mine = row[design]
        matches = [
            f
            for f in (f"fixed-{b}" for b in MATCH)
            if row[f][f"power {key}"] >= mine[f"power {key}"] - tolerance and row[f]["aa"] <= 0.05
        ]
        if not matches:
            out[key] = None
            continue
        cheapest = min(matches, key=lambda f: row[f][f"gpu_minutes {key}"])
        out[key] = {
            "fixed": cheapest,
            "ratio": mine[f"gpu_minutes {key}"] / row[cheapest][f"gpu_minutes {key}"],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=100, help="sweeps a row for the staged designs")
    ap.add_argument("--fixed-seeds", type=int, default=2000, help="sweeps a row, fixed designs")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    start = time.monotonic()
    rng = np.random.default_rng(20261205)
    designs = [*(f"fixed-{b}" for b in MATCH), "kj-2", "kj-3", "kjs-2", "kjs-3", "auto-boots"]
    designs += ["auto", "auto-kj"]
    designs += ["auto-kj-5", "auto-stated", "auto-stated-x2", "auto-stated-min5"]
    rows = []
    print(
        f"{'world':<52} {'design':<10} {'GPU-min':>7} {'boots':>5} {'A/A':>5} "
        f"{'+5 %':>5} {'+10 %':>5} {'+30 %':>5}  requests a level"
    )
    for world in worlds():
        row = {"world": world.name, **world._asdict()}
        for design in designs:
            sims = args.seeds if design.startswith("auto") else args.fixed_seeds
            r = run_design(rng, world, design, sims)
            row[design] = r
            if design.startswith("fixed") and int(design.split("-")[1]) not in FIXED:
                continue  # measured for the match only
            print(
                f"{world.name:<52} {design:<10} {r['gpu_minutes']:>7.1f} {r['boots']:>5.1f} "
                f"{r['aa']:>5.3f} {r['power +5%']:>5.2f} {r['power +10%']:>5.2f} "
                f"{r['power +30%']:>5.2f}  {'/'.join(f'{x:.0f}' for x in r['requests'])}"
                + (
                    f"  (stage rule's own word: A/A {r['seq aa']:.3f}, power "
                    + " / ".join(f"{r[f'seq power +{e:.0%}']:.2f}" for e in EFFECTS)
                    + ")"
                    if "seq aa" in r
                    else ""
                ),
                flush=True,
            )
        row["requests_bound"] = requests_bound(world)
        print(
            f"{'':<52} at best, sizing requests costs {row['requests_bound']:.2f} x the "
            "default requests at equal precision (cost model, no caps)"
        )
        for design in (
            "auto",
            "auto-kj",
            "auto-kj-5",
            "auto-stated",
            "auto-stated-x2",
            "auto-stated-min5",
            "auto-boots",
            "kj-2",
            "kj-3",
            "kjs-2",
            "kjs-3",
        ):
            row[f"ratios {design}"] = ratios(row, design)
            found = row[f"ratios {design}"]
            print(
                f"{'':<52} {design} / cheapest fixed (2-16) as powerful: "
                + ", ".join(
                    f"{k} {v['ratio']:.2f} ({v['fixed']})" if v else f"{k} none"
                    for k, v in found.items()
                )
            )
        rows.append(row)
    path = write_result(
        "gpu_minutes",
        {
            "what": "GPU-minutes to decide, power and A/A: fixed repeats against requests "
            "and boots sized by what is measured",
            "cost_model": {
                "boot_s": C_BOOT,
                "request_s": dict(zip(map(str, LEVELS), C_REQUEST, strict=True)),
                "from": "docs/sglang-h200.md (SGLang 0.5.17, H200, 2026-12-03)",
            },
            "levels": list(LEVELS),
            "configurations": K,
            "seeds": args.seeds,
            "fixed_seeds": args.fixed_seeds,
            "seconds": round(time.monotonic() - start, 1),
            "results": rows,
        },
        args.out,
    )
    print(f"wrote {path} in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
