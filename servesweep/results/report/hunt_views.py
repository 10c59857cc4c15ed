"""A hunt's section of the report, from results/hunt/hunt.json (docs/records.md) as plain
data: the path, per round the reference and each arm's Δ, interval, boots, cost, verdict and
why; each candidate's outcome; the cumulative gain over the start as a chart; the confirm and
the ablation; the ledger against the budget; the final launch command.

The record is read as a dict (the report reads records; the hunt's modules write them), so
nothing here imports the hunt's workflow parts.
"""

from __future__ import annotations

import math
import re
import shlex

from matplotlib.figure import Figure

from servesweep import fmt
from servesweep.hunt.spec import RoundPlan, design_words
from servesweep.results.report.plots import _png

# verdict -> (the word the report shows, the pill's class)
WORDS = {
    "adopt": ("adopted", "ok"),
    "reject": ("rejected", "failed"),
    "undecided": ("undecided: boots cut short", "warn"),
    "running": ("measuring", "warn"),
    "confirmed": ("confirmed", "ok"),
    "not confirmed": ("not confirmed", "failed"),
    "needed": ("needed", "ok"),
    "not needed": ("not needed", "warn"),
}
# the words of a check arm's verdict (its reason follows)
CHECK_WHY = {
    "confirmed": "the final is better than the start on fresh boots",
    "not confirmed": "the final is not shown better than the start on fresh boots",
    "needed": "the final is better with it than without it",
    "not needed": "the final is not shown better with it than without it",
    "undecided": "not decided in the boots the budget allowed",
}
_ROUND = re.compile(r"\bround (\d+)\b")
_PLACEHOLDER = re.compile(r"[\w/.:=@%+,-]*<\w+>[\w/.:=@%+,-]*")


def _pct(x) -> str:
    return fmt.MISSING if fmt.missing(x) else f"{float(x):+.1f} %"


def _interval(lo, hi) -> str:
    if fmt.missing(lo) or fmt.missing(hi):
        return fmt.MISSING
    return f"[{float(lo):+.1f}, {float(hi):+.1f}] %"


def _boots(boots, uncounted=()) -> str:
    """'5 (r0–r4)'; with a first boot left out of the decision, '5 (r0–r4; r0 not counted)'."""
    boots = list(boots or [])
    if not boots:
        return "0"
    span = f"r{boots[0]}" if len(boots) == 1 else f"r{boots[0]}–r{boots[-1]}"
    left = [f"r{b}" for b in uncounted or []]
    return f"{len(boots)} ({span}" + (f"; {', '.join(left)} not counted)" if left else ")")


def _reference_boots(asked, measured: dict, uncounted=()) -> str:
    """The reference's boots; where fewer were measured than asked for (its failed boots
    replaced, then the round ended), both."""
    text = _boots(asked, uncounted)
    n = measured.get("boots")
    if isinstance(n, int) and n != len(asked or []):
        text = f"{n} measured of {text} asked"
    return text


def _hours(x) -> str:
    return fmt.MISSING if fmt.missing(x) else f"{float(x):.3g}"


def _minutes(seconds) -> str:
    return fmt.MISSING if fmt.missing(seconds) else f"{float(seconds) / 60:.1f}"


def counted_from_one(reason: str) -> str:
    """The record counts rounds from 0 ("adopted in round 0 …"); the report from 1."""
    return _ROUND.sub(lambda m: f"round {int(m.group(1)) + 1}", reason)


def verdict_words(arm: dict, adopted: str | None) -> tuple[str, str, str]:
    """(the verdict in words, its pill class, why) of one arm of a round."""
    verdict, reason = arm["verdict"], counted_from_one(arm.get("reason") or "")
    if verdict == "dropped":
        if reason.startswith("crashed: "):
            return "crashed", "failed", reason.removeprefix("crashed: ")
        if reason == "changes answers":
            return "changes outputs", "failed", "its greedy answers differ from the start's"
        return "invalid", "failed", f"{reason}: no valid value (see Validity below)"
    if verdict == "adopt" and arm.get("role", "candidate") == "candidate":
        if reason.startswith("screen: "):  # kept on its mean; the checks decide
            return "kept", "ok", reason
        if arm["candidate"] == adopted:
            return "adopted", "ok", reason
        return "better, not chosen", "warn", f"{reason}; a larger lower bound won this round"
    word, cls = WORDS.get(verdict, (verdict, ""))
    if arm.get("role", "candidate") != "candidate" and verdict in CHECK_WHY:
        reason = f"{CHECK_WHY[verdict]} ({reason})" if reason else CHECK_WHY[verdict]
    return word, cls, reason


def _arm_row(arm: dict, adopted: str | None, measured: dict) -> dict:
    word, cls, why = verdict_words(arm, adopted)
    cost = measured.get((arm["variant"], arm.get("role")), {})
    return {
        "candidate": arm["candidate"],
        "variant": arm["variant"],
        "role": arm.get("role", "candidate"),
        "level": fmt.MISSING if arm.get("level") is None else str(arm["level"]),
        "delta": _pct(arm.get("gain_pct")),
        "interval": _interval(arm.get("low_pct"), arm.get("high_pct")),
        "boots": _boots(arm.get("boots"), arm.get("uncounted")),
        "wall_min": _minutes(cost.get("wall_s")),
        "gpu_hours": _hours(cost.get("gpu_hours", arm.get("gpu_hours"))),
        "verdict": word,
        "cls": cls,
        "why": why,
    }


def plan_text(hunt: dict, plan: dict | None) -> str:
    """A round's design in words: its arms and alpha, the boots a side its power needed at
    the scatter it was sized on, and where the cap was short, what the round tested."""
    if not plan:
        return "sized at the cap (too little boot scatter seen to size it)"

    def number(key: str) -> float:
        return math.nan if fmt.missing(plan.get(key)) else float(plan[key])

    design = RoundPlan(
        arms=plan["arms"],
        boots=plan["boots"],
        needed=plan.get("needed"),
        cv_pct=number("cv_pct"),
        min_effect_pct=number("min_effect_pct"),
        margin_pct=number("margin_pct"),
    )
    objective = hunt.get("objective") or {}
    delta = (
        math.nan if fmt.missing(objective.get("min_effect_pct")) else objective["min_effect_pct"]
    )
    alpha = plan.get("alpha_per_arm_and_level")
    return design_words(design, delta, alpha, number("power_at_delta"))


SCREEN_STEP = (
    "the screen: kept when its mean over the counted levels beats the reference's, a point "
    "estimate with no interval; the checks below decide whether it stays"
)


def screened(hunt: dict) -> bool:
    """Whether the hunt ran the screen design (hunt.json `design`; absent: sequential)."""
    return hunt.get("design") == "screen"


def search_word(hunt: dict) -> str:
    """What the report calls a search round: the screen's are its steps."""
    return "step" if screened(hunt) else "round"


def round_views(hunt: dict) -> list[dict]:
    """Per round: the reference and its boots, each arm's row, what it adopted."""
    ledger = {r["round"]: r for r in hunt.get("ledger") or []}
    out = []
    for r in hunt.get("rounds") or []:
        spent = ledger.get(r["index"], {})
        measured = {(a["variant"], a.get("role")): a for a in spent.get("arms") or []}
        ref = spent.get("reference") or {}
        search = r["kind"] == "search"
        out.append(
            {
                "title": f"{(search_word(hunt) if search else 'round').capitalize()} "
                f"{r['index'] + 1}" + ("" if search else " (confirm and ablation)"),
                "kind": r["kind"],
                "reference": r["reference"],
                "reference_boots": _reference_boots(
                    r.get("reference_boots"), ref, r.get("reference_uncounted")
                ),
                "plan": SCREEN_STEP
                if search and screened(hunt)
                else plan_text(hunt, r.get("plan")),
                "reference_wall_min": _minutes(ref.get("wall_s")),
                "reference_gpu_hours": _hours(ref.get("gpu_hours")),
                "arms": [_arm_row(a, r.get("adopted"), measured) for a in r["arms"]],
                "adopted": r.get("adopted"),
                "boots": spent.get("boots"),
                "gpu_hours": _hours(spent.get("gpu_hours", r.get("gpu_hours"))),
            }
        )
    return out


def _never_tried(name: str, spec: dict, hunt: dict) -> str:
    adopted = set(hunt.get("incumbent") or [])
    missing = [x for x in spec.get("requires") or [] if x not in adopted]
    if missing:
        return f"requires {', '.join(missing)}, never adopted"
    clash = [x for x in spec.get("conflicts") or [] if x in adopted]
    clash += [
        a
        for a in adopted
        if name in ((hunt.get("candidates") or {}).get(a) or {}).get("conflicts", [])
    ]
    if clash:
        return f"conflicts with {', '.join(sorted(set(clash)))} (adopted)"
    reason = hunt.get("stop_reason") or "the hunt is not done"
    if reason.startswith("budget"):
        return f"over budget: {reason.removeprefix('budget: ')}"
    return f"not tried: {reason}"


def candidate_outcomes(hunt: dict) -> list[dict]:
    """Each candidate's outcome over the whole hunt, in listing order, with why."""
    search = [r for r in hunt.get("rounds") or [] if r["kind"] == "search"]
    last_arm: dict[str, tuple[dict, dict]] = {}
    for r in search:
        for a in r["arms"]:
            last_arm[a["candidate"]] = (r, a)
    names = list(hunt.get("candidates") or {}) or list(last_arm)
    step = search_word(hunt)
    final = set(hunt.get("final_members", hunt.get("incumbent")) or [])
    ablations = {  # each member's last ablation: the check that kept or left it out
        a["candidate"]: (r, a)
        for r in hunt.get("rounds") or []
        if r["kind"] == "check"
        for a in r["arms"]
        if a.get("role") == "ablation"
    }
    out = []
    for name in names:
        spec = (hunt.get("candidates") or {}).get(name) or {}
        row = {"candidate": name, "description": spec.get("description") or ""}
        adopted_in = [r["index"] + 1 for r in search if r.get("adopted") == name]
        if adopted_in:
            r, a = last_arm[name]
            reason = a.get("reason") or ""
            why = f"{step} {adopted_in[0]}: " + (
                reason  # the screen keeps on a mean, with no interval
                if reason.startswith("screen: ")
                else f"{_pct(a.get('gain_pct'))} "
                f"{_interval(a.get('low_pct'), a.get('high_pct'))} at level {a.get('level')}"
            )
            kept = name in final
            if check := ablations.get(name):
                why += (
                    f"; round {check[0]['index'] + 1}: {WORDS.get(check[1]['verdict'], ('',))[0]}"
                )
            row |= {
                "outcome": "adopted" if kept else "left out",
                "cls": "ok" if kept else "warn",
                "why": why if kept or check else f"{why}; not in the final",
            }
        elif name in last_arm:
            r, a = last_arm[name]
            word, cls, why = verdict_words(a, r.get("adopted"))
            if a["verdict"] == "adopt":  # better, but the hunt stopped before retrying it
                word, cls = "not adopted", "warn"
            row |= {"outcome": word, "cls": cls, "why": f"{step} {r['index'] + 1}: {why}"}
        else:
            why = _never_tried(name, spec, hunt)
            never = why.split(":")[0] if why.startswith(("over budget", "not tried")) else None
            row |= {"outcome": never or "requires / conflicts", "cls": "warn", "why": why}
        out.append(row)
    return out


def gain_path(hunt: dict) -> tuple[list[dict], dict | None]:
    """The cumulative gain over the start after each adopting round (the adopted arm's Δ and
    bounds compounded: a product of each round's bounds, not a joint interval), and the
    confirm's measured final-vs-start gain and interval."""
    steps, g, lo, hi = [], 1.0, 1.0, 1.0
    confirm = None
    for r in hunt.get("rounds") or []:
        for a in r["arms"]:
            if r["kind"] == "search" and a["candidate"] == r.get("adopted"):
                if any(fmt.missing(a.get(k)) for k in ("gain_pct", "low_pct", "high_pct")):
                    continue
                g *= 1 + a["gain_pct"] / 100
                lo *= 1 + a["low_pct"] / 100
                hi *= 1 + a["high_pct"] / 100
                steps.append(
                    {
                        "label": f"round {r['index'] + 1}\n+{a['candidate']}",
                        "gain": 100 * (g - 1),
                        "low": 100 * (lo - 1),
                        "high": 100 * (hi - 1),
                    }
                )
            elif a.get("role") == "confirm" and not fmt.missing(a.get("gain_pct")):
                confirm = {
                    "label": "confirm\nfinal vs start",
                    "gain": a["gain_pct"],
                    "low": a["low_pct"],
                    "high": a["high_pct"],
                    "verdict": a["verdict"],
                }
    return steps, confirm


def gain_plot(hunt: dict) -> str | None:
    """The cumulative gain over the start, round by round, with intervals; the confirm's
    measured gain beside it (a screen's steps have no intervals: its confirm alone). None
    when nothing was adopted and no confirm ran."""
    steps, confirm = gain_path(hunt)
    if not steps and not confirm:  # the screen's steps have no intervals: its confirm does
        return None
    fig = Figure(figsize=(7.5, 3.8))
    ax = fig.add_subplot()
    points = [{"label": "start", "gain": 0.0, "low": 0.0, "high": 0.0}, *steps]
    xs = list(range(len(points)))
    ys = [p["gain"] for p in points]
    err = [[p["gain"] - p["low"] for p in points], [p["high"] - p["gain"] for p in points]]
    label = "adopted, compounded" if steps else "start"
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=4, label=label)
    labels = [p["label"] for p in points]
    if confirm:
        x = len(points)
        low = confirm["low"] if math.isfinite(confirm["low"]) else confirm["gain"]
        high = confirm["high"] if math.isfinite(confirm["high"]) else confirm["gain"]
        ax.errorbar(
            [x],
            [confirm["gain"]],
            yerr=[[confirm["gain"] - low], [high - confirm["gain"]]],
            marker="s",
            capsize=4,
            color="#116329",
            linestyle="none",
            label=f"confirm on fresh boots ({confirm['verdict']})",
        )
        labels.append(confirm["label"])
    delta = (hunt.get("objective") or {}).get("min_effect_pct")
    ax.axhline(0, color="#57606a", linewidth=0.8)
    if delta:
        ax.axhline(delta, color="#d4a017", linewidth=0.8, linestyle="--", label=f"δ {delta:g} %")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("gain over the start (%)")
    metric = (hunt.get("objective") or {}).get("metric", "")
    ax.set_title(f"Cumulative gain in {metric}, with intervals")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def ledger_view(hunt: dict) -> dict:
    """Per round and in total: boots, wall time and GPU-hours measured; the budget."""
    rows = [
        {
            "round": r["round"] + 1,
            "kind": r["kind"],
            "reference": r["reference"]["boots"],
            "arms": sum(a["boots"] for a in r["arms"]),
            "boots": r["boots"],
            "wall_min": _minutes(r["wall_s"]),
            "gpu_hours": _hours(r["gpu_hours"]),
        }
        for r in hunt.get("ledger") or []
    ]
    spent = hunt.get("spent") or {}
    planned = hunt.get("planned_cost") or {}
    worst = hunt.get("worst_case") or {}
    budget = hunt.get("budget") or {}
    limits = []
    if budget.get("boots") is not None:
        limits.append(f"{budget['boots']} boots")
    if budget.get("gpu_hours") is not None:
        limits.append(f"{budget['gpu_hours']:g} GPU-hours")
    per_boot = budget.get("gpu_hours_per_boot")
    stated = f"{planned.get('boots', 0)} boots, {_hours(planned.get('gpu_hours'))} GPU-hours"
    if per_boot:
        stated += f" at {per_boot:.3g} GPU-hours a boot"
    return {
        "rows": rows,
        "total": {
            "boots": spent.get("boots", 0),
            "wall_min": _minutes(spent.get("wall_s")),
            "gpu_hours": _hours(spent.get("gpu_hours")),
        },
        "budget": " and ".join(limits) or "none",
        "stated": stated,
        "worst_case": f"{worst.get('boots', 0)} boots, {_hours(worst.get('gpu_hours'))} GPU-hours",
    }


def shell_words(command) -> str:
    """The command line as a shell reads it; `<stack>`-style placeholders left bare."""
    words = [str(w) for w in command or []]
    return " ".join(w if _PLACEHOLDER.fullmatch(w) else shlex.quote(w) for w in words)


def pruned_members(hunt: dict) -> list[str]:
    """Adopted members the final leaves out (their ablation found them not needed)."""
    final = set(hunt.get("final_members", hunt.get("incumbent")) or [])
    return [m for m in hunt.get("incumbent") or [] if m not in final]


def final_view(hunt: dict) -> dict:
    final = hunt.get("final") or {}
    env = final.get("env") or {}
    lines = [f"{k}={shlex.quote(str(v))} \\" for k, v in env.items()]
    return {
        "variant": final.get("variant", hunt.get("start")),
        "stack": final.get("stack"),
        "members": list(hunt.get("final_members", hunt.get("incumbent")) or []),
        "pruned": pruned_members(hunt),
        "command": "\n".join([*lines, shell_words(final.get("command"))]),
        "placeholders": bool(_PLACEHOLDER.search(" ".join(map(str, final.get("command") or [])))),
        "spec_hash": final.get("spec_hash"),
    }


def path_text(hunt: dict) -> str:
    """The path in one line: start → +adopted (round k) → …, then the final where the
    checks left a member out (their ablation found it not needed)."""
    word = search_word(hunt)
    parts = [hunt["start"]]
    for r in hunt.get("rounds") or []:
        if r["kind"] == "search" and r.get("adopted"):
            parts.append(f"+{r['adopted']} ({word} {r['index'] + 1})")
    pruned = pruned_members(hunt)
    if pruned:
        final = (hunt.get("final") or {}).get("variant") or hunt["start"]
        parts.append(f"final {final} (the checks left out {', '.join(pruned)}: not needed)")
    return " → ".join(parts)


def hunt_view(hunt: dict | None) -> dict | None:
    """Everything the report's hunt section shows (None: no hunt)."""
    if not hunt:
        return None
    objective = hunt.get("objective") or {}
    rounds = round_views(hunt)
    checks = [r for r in rounds if r["kind"] == "check"]
    margin = objective.get("margin_pct", objective.get("min_effect_pct"))
    return {
        "start": hunt["start"],
        "stack": hunt.get("stack"),
        "margin_pct": margin,
        "alpha": objective.get("alpha"),
        "power": objective.get("power"),
        "first_boots": (hunt.get("first_boots") or {}).get("why"),
        "screen": screened(hunt),
        "model": hunt.get("model"),
        "metric": objective.get("metric"),
        "direction": "higher" if objective.get("higher_is_better", True) else "lower",
        "levels": ", ".join(map(str, objective.get("levels") or [])),
        "min_effect_pct": objective.get("min_effect_pct"),
        "done": hunt.get("done", True),
        "stop_reason": hunt.get("stop_reason") or "not done",
        "path": path_text(hunt),
        "outcomes": candidate_outcomes(hunt),
        "rounds": [r for r in rounds if r["kind"] == "search"],
        "checks": checks[0] if checks else None,
        "check_rounds": checks,  # the screen design checks a smaller set again
        "plot": gain_plot(hunt),
        "ledger": ledger_view(hunt),
        "final": final_view(hunt),
    }
