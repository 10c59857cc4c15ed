"""A hunt's section of the report, from results/hunt/hunt.json (docs/records.md) as plain
data: the path, per round the reference and each arm's Δ, interval, boots, cost, verdict and
why; each candidate's outcome; the cumulative gain over the start as a chart; the confirm and
the ablation; the ledger against the budget; the final launch command.

The record is hunt.json as `servesweep.hunt.record` types it: a key an older hunt.json may
lack (NotRequired there) is read with `.get`, so an older one renders too. Nothing here
imports the hunt's workflow parts (hunt_run, which writes it).
"""

from __future__ import annotations

import math
import re
import shlex

from matplotlib.figure import Figure

from servesweep import fmt
from servesweep.hunt.record import (
    ArmRecord,
    CandidateRecord,
    HuntRecord,
    LedgerArm,
    LedgerReference,
    PlanRecord,
    RoundRecord,
)
from servesweep.hunt.rounds import ArmVerdict
from servesweep.hunt.spec import RoundPlan, design_words
from servesweep.results.report.plots import _png

# verdict -> (the word the report shows, the pill's class)
WORDS: dict[str, tuple[str, str]] = {
    ArmVerdict.ADOPT: ("adopted", "ok"),
    ArmVerdict.REJECT: ("rejected", "failed"),
    ArmVerdict.UNDECIDED: ("undecided: boots cut short", "warn"),
    ArmVerdict.RUNNING: ("measuring", "warn"),
    ArmVerdict.CONFIRMED: ("confirmed", "ok"),
    ArmVerdict.NOT_CONFIRMED: ("not confirmed", "failed"),
    ArmVerdict.NEEDED: ("needed", "ok"),
    ArmVerdict.NOT_NEEDED: ("not needed", "warn"),
}
# the words of a check arm's verdict (its reason follows)
CHECK_WHY: dict[str, str] = {
    ArmVerdict.CONFIRMED: "the final is better than the start on fresh boots",
    ArmVerdict.NOT_CONFIRMED: "the final is not shown better than the start on fresh boots",
    ArmVerdict.NEEDED: "the final is better with it than without it",
    ArmVerdict.NOT_NEEDED: "the final is not shown better with it than without it",
    ArmVerdict.UNDECIDED: "not decided in the boots the budget allowed",
}
_ROUND = re.compile(r"\bround (\d+)\b")
_PLACEHOLDER = re.compile(r"[\w/.:=@%+,-]*<\w+>[\w/.:=@%+,-]*")


def _pct(x) -> str:
    return fmt.MISSING if fmt.missing(x) else f"{float(x):+.1f} %"


def _interval(lo, hi) -> str:
    if fmt.missing(lo) or fmt.missing(hi):
        return fmt.MISSING
    return f"[{float(lo):+.1f}, {float(hi):+.1f}] %"


def _number(x: float | str | None) -> float:
    """A number the record holds; nan where it holds none (null or nan)."""
    return math.nan if x is None or fmt.missing(x) else float(x)


def _boots(boots: list[int], uncounted: list[int] | None = None) -> str:
    """'5 (r0–r4)'; with a first boot left out of the decision, '5 (r0–r4; r0 not counted)'."""
    if not boots:
        return "0"
    span = f"r{boots[0]}" if len(boots) == 1 else f"r{boots[0]}–r{boots[-1]}"
    left = [f"r{b}" for b in uncounted or []]
    return f"{len(boots)} ({span}" + (f"; {', '.join(left)} not counted)" if left else ")")


def _reference_boots(
    asked: list[int], measured: LedgerReference | None, uncounted: list[int] | None
) -> str:
    """The reference's boots; where fewer were measured than asked for (its failed boots
    replaced, then the round ended), both."""
    text = _boots(asked, uncounted)
    n = measured["boots"] if measured else None
    if n is not None and n != len(asked):
        text = f"{n} measured of {text} asked"
    return text


def _hours(x) -> str:
    return fmt.MISSING if fmt.missing(x) else f"{float(x):.3g}"


def _minutes(seconds) -> str:
    return fmt.MISSING if fmt.missing(seconds) else f"{float(seconds) / 60:.1f}"


def counted_from_one(reason: str) -> str:
    """The record counts rounds from 0 ("adopted in round 0 …"); the report from 1."""
    return _ROUND.sub(lambda m: f"round {int(m.group(1)) + 1}", reason)


def verdict_words(arm: ArmRecord, adopted: str | None) -> tuple[str, str, str]:
    """(the verdict in words, its pill class, why) of one arm of a round."""
    verdict, reason = arm["verdict"], counted_from_one(arm["reason"])
    if verdict == ArmVerdict.DROPPED:
        if reason.startswith("crashed: "):
            return "crashed", "failed", reason.removeprefix("crashed: ")
        if reason == "changes answers":
            return "changes outputs", "failed", "its greedy answers differ from the start's"
        return "invalid", "failed", f"{reason}: no valid value (see Validity below)"
    if verdict == ArmVerdict.ADOPT and arm["role"] == "candidate":
        if reason.startswith("screen: "):  # kept on its mean; the checks decide
            return "kept", "ok", reason
        if arm["candidate"] == adopted:
            return "adopted", "ok", reason
        return "better, not chosen", "warn", f"{reason}; a larger lower bound won this round"
    word, cls = WORDS.get(verdict, (verdict, ""))
    if arm["role"] != "candidate" and verdict in CHECK_WHY:
        reason = f"{CHECK_WHY[verdict]} ({reason})" if reason else CHECK_WHY[verdict]
    return word, cls, reason


def _arm_row(
    arm: ArmRecord, adopted: str | None, measured: dict[tuple[str, str], LedgerArm]
) -> dict:
    word, cls, why = verdict_words(arm, adopted)
    cost = measured.get((arm["variant"], arm["role"]))  # the ledger's: measured cost
    return {
        "candidate": arm["candidate"],
        "variant": arm["variant"],
        "role": arm["role"],
        "level": fmt.MISSING if arm["level"] is None else str(arm["level"]),
        "delta": _pct(arm["gain_pct"]),
        "interval": _interval(arm["low_pct"], arm["high_pct"]),
        "boots": _boots(arm["boots"], arm.get("uncounted")),
        "wall_min": _minutes(cost["wall_s"] if cost else None),
        "gpu_hours": _hours(cost["gpu_hours"] if cost else arm["gpu_hours"]),
        "verdict": word,
        "cls": cls,
        "why": why,
    }


def plan_text(hunt: HuntRecord, plan: PlanRecord | None) -> str:
    """A round's design in words: its arms and alpha, the boots a side its power needed at
    the scatter it was sized on, and where the cap was short, what the round tested."""
    if not plan:
        return "sized at the cap (too little boot scatter seen to size it)"
    design = RoundPlan(
        arms=plan["arms"],
        boots=plan["boots"],
        needed=plan["needed"],
        cv_pct=_number(plan["cv_pct"]),
        min_effect_pct=_number(plan["min_effect_pct"]),
        margin_pct=_number(plan["margin_pct"]),
    )
    delta = hunt["objective"]["min_effect_pct"]
    delta = math.nan if fmt.missing(delta) else delta
    alpha = plan["alpha_per_arm_and_level"]
    return design_words(design, delta, alpha, _number(plan["power_at_delta"]))


SCREEN_STEP = (
    "the screen: kept when its mean over the counted levels beats the reference's, a point "
    "estimate with no interval; the checks below decide whether it stays"
)


def screened(hunt: HuntRecord) -> bool:
    """Whether the hunt ran the screen design (hunt.json `design`; absent: sequential)."""
    return hunt.get("design") == "screen"


def search_word(hunt: HuntRecord) -> str:
    """What the report calls a search round: the screen's are its steps."""
    return "step" if screened(hunt) else "round"


def round_views(hunt: HuntRecord) -> list[dict]:
    """Per round: the reference and its boots, each arm's row, what it adopted."""
    ledger = {r["round"]: r for r in hunt["ledger"]}
    out = []
    for r in hunt["rounds"]:
        spent = ledger.get(r["index"])  # the round's measured cost
        measured: dict[tuple[str, str], LedgerArm] = {  # (variant, role) -> its cost
            (a["variant"], a["role"]): a for a in (spent["arms"] if spent else [])
        }
        ref = spent["reference"] if spent else None
        search = r["kind"] == "search"
        out.append(
            {
                "title": f"{(search_word(hunt) if search else 'round').capitalize()} "
                f"{r['index'] + 1}" + ("" if search else " (confirm and ablation)"),
                "kind": r["kind"],
                "reference": r["reference"],
                "reference_boots": _reference_boots(
                    r["reference_boots"], ref, r.get("reference_uncounted")
                ),
                "plan": SCREEN_STEP
                if search and screened(hunt)
                else plan_text(hunt, r.get("plan")),
                "reference_wall_min": _minutes(ref["wall_s"] if ref else None),
                "reference_gpu_hours": _hours(ref["gpu_hours"] if ref else None),
                "arms": [_arm_row(a, r["adopted"], measured) for a in r["arms"]],
                "adopted": r["adopted"],
                "boots": spent["boots"] if spent else None,
                "gpu_hours": _hours(spent["gpu_hours"] if spent else r["gpu_hours"]),
            }
        )
    return out


def _never_tried(name: str, spec: CandidateRecord, hunt: HuntRecord) -> str:
    adopted = set(hunt["incumbent"])
    missing = [x for x in spec["requires"] if x not in adopted]
    if missing:
        return f"requires {', '.join(missing)}, never adopted"
    clash = [x for x in spec["conflicts"] if x in adopted]
    clash += [a for a in adopted if name in hunt["candidates"][a]["conflicts"]]
    if clash:
        return f"conflicts with {', '.join(sorted(set(clash)))} (adopted)"
    reason = hunt["stop_reason"] or "the hunt is not done"
    if reason.startswith("budget"):
        return f"over budget: {reason.removeprefix('budget: ')}"
    return f"not tried: {reason}"


def candidate_outcomes(hunt: HuntRecord) -> list[dict]:
    """Each candidate's outcome over the whole hunt, in listing order, with why."""
    search = [r for r in hunt["rounds"] if r["kind"] == "search"]
    last_arm: dict[str, tuple[RoundRecord, ArmRecord]] = {}
    for r in search:
        for a in r["arms"]:
            last_arm[a["candidate"]] = (r, a)
    candidates = hunt["candidates"]
    names = list(candidates) or list(last_arm)
    step = search_word(hunt)
    final = set(final_members(hunt))
    ablations = {  # each member's last ablation: the check that kept or left it out
        a["candidate"]: (r, a)
        for r in hunt["rounds"]
        if r["kind"] == "check"
        for a in r["arms"]
        if a["role"] == "ablation"
    }
    out = []
    for name in names:
        spec = candidates.get(name)
        row = {"candidate": name, "description": spec["description"] if spec else ""}
        adopted_in = [r["index"] + 1 for r in search if r["adopted"] == name]
        if adopted_in:
            r, a = last_arm[name]
            reason = a["reason"]
            why = f"{step} {adopted_in[0]}: " + (
                reason  # the screen keeps on a mean, with no interval
                if reason.startswith("screen: ")
                else f"{_pct(a['gain_pct'])} "
                f"{_interval(a['low_pct'], a['high_pct'])} at level {a['level']}"
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
            word, cls, why = verdict_words(a, r["adopted"])
            if a["verdict"] == ArmVerdict.ADOPT:  # better, but the hunt stopped before retrying it
                word, cls = "not adopted", "warn"
            row |= {"outcome": word, "cls": cls, "why": f"{step} {r['index'] + 1}: {why}"}
        else:
            why = _never_tried(name, candidates[name], hunt)
            never = why.split(":")[0] if why.startswith(("over budget", "not tried")) else None
            row |= {"outcome": never or "requires / conflicts", "cls": "warn", "why": why}
        out.append(row)
    return out


def gain_path(hunt: HuntRecord) -> tuple[list[dict], dict | None]:
    """The cumulative gain over the start after each adopting round (the adopted arm's Δ and
    bounds compounded: a product of each round's bounds, not a joint interval), and the
    confirm's measured final-vs-start gain and interval."""
    steps, g, lo, hi = [], 1.0, 1.0, 1.0
    confirm = None
    for r in hunt["rounds"]:
        for a in r["arms"]:
            if r["kind"] == "search" and a["candidate"] == r["adopted"]:
                gain, low, high = map(_number, (a["gain_pct"], a["low_pct"], a["high_pct"]))
                if any(math.isnan(x) for x in (gain, low, high)):
                    continue
                g *= 1 + gain / 100
                lo *= 1 + low / 100
                hi *= 1 + high / 100
                steps.append(
                    {
                        "label": f"round {r['index'] + 1}\n+{a['candidate']}",
                        "gain": 100 * (g - 1),
                        "low": 100 * (lo - 1),
                        "high": 100 * (hi - 1),
                    }
                )
            elif a["role"] == "confirm" and not fmt.missing(a["gain_pct"]):
                confirm = {
                    "label": "confirm\nfinal vs start",
                    "gain": a["gain_pct"],
                    "low": a["low_pct"],
                    "high": a["high_pct"],
                    "verdict": a["verdict"],
                }
    return steps, confirm


def gain_plot(hunt: HuntRecord) -> str | None:
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
    delta = hunt["objective"]["min_effect_pct"]
    ax.axhline(0, color="#57606a", linewidth=0.8)
    if delta:
        ax.axhline(delta, color="#d4a017", linewidth=0.8, linestyle="--", label=f"δ {delta:g} %")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("gain over the start (%)")
    metric = hunt["objective"]["metric"]
    ax.set_title(f"Cumulative gain in {metric}, with intervals")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def ledger_view(hunt: HuntRecord) -> dict:
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
        for r in hunt["ledger"]
    ]
    spent, planned, worst = hunt["spent"], hunt["planned_cost"], hunt["worst_case"]
    budget = hunt["budget"]
    limits = []
    if budget["boots"] is not None:
        limits.append(f"{budget['boots']} boots")
    if budget["gpu_hours"] is not None:
        limits.append(f"{budget['gpu_hours']:g} GPU-hours")
    per_boot = budget["gpu_hours_per_boot"]
    stated = f"{planned['boots']} boots, {_hours(planned['gpu_hours'])} GPU-hours"
    if per_boot:
        stated += f" at {per_boot:.3g} GPU-hours a boot"
    return {
        "rows": rows,
        "total": {
            "boots": spent["boots"],
            "wall_min": _minutes(spent["wall_s"]),
            "gpu_hours": _hours(spent["gpu_hours"]),
        },
        "budget": " and ".join(limits) or "none",
        "stated": stated,
        "worst_case": f"{worst['boots']} boots, {_hours(worst['gpu_hours'])} GPU-hours",
    }


def shell_words(command: list[str]) -> str:
    """The command line as a shell reads it; `<stack>`-style placeholders left bare."""
    words = [str(w) for w in command]
    return " ".join(w if _PLACEHOLDER.fullmatch(w) else shlex.quote(w) for w in words)


def final_members(hunt: HuntRecord) -> list[str]:
    """The final's members (a hunt.json from before the checks pruned: the incumbent)."""
    return hunt.get("final_members", hunt["incumbent"])


def pruned_members(hunt: HuntRecord) -> list[str]:
    """Adopted members the final leaves out (their ablation found them not needed)."""
    final = set(final_members(hunt))
    return [m for m in hunt["incumbent"] if m not in final]


def final_view(hunt: HuntRecord) -> dict:
    final = hunt["final"]
    lines = [f"{k}={shlex.quote(str(v))} \\" for k, v in final["env"].items()]
    return {
        "variant": final["variant"],
        "stack": final["stack"],
        "members": list(final_members(hunt)),
        "pruned": pruned_members(hunt),
        "command": "\n".join([*lines, shell_words(final["command"])]),
        "placeholders": bool(_PLACEHOLDER.search(" ".join(map(str, final["command"])))),
        "spec_hash": final["spec_hash"],
    }


def path_text(hunt: HuntRecord) -> str:
    """The path in one line: start → +adopted (round k) → …, then the final where the
    checks left a member out (their ablation found it not needed)."""
    word = search_word(hunt)
    parts = [hunt["start"]]
    for r in hunt["rounds"]:
        if r["kind"] == "search" and r["adopted"]:
            parts.append(f"+{r['adopted']} ({word} {r['index'] + 1})")
    pruned = pruned_members(hunt)
    if pruned:
        final = hunt["final"]["variant"] or hunt["start"]
        parts.append(f"final {final} (the checks left out {', '.join(pruned)}: not needed)")
    return " → ".join(parts)


def hunt_view(hunt: HuntRecord | None) -> dict | None:
    """Everything the report's hunt section shows (None: no hunt)."""
    if not hunt:
        return None
    objective = hunt["objective"]
    rounds = round_views(hunt)
    checks = [r for r in rounds if r["kind"] == "check"]
    margin = objective.get("margin_pct", objective["min_effect_pct"])
    first_boots = hunt.get("first_boots")
    return {
        "start": hunt["start"],
        "stack": hunt["stack"],
        "margin_pct": margin,
        "alpha": objective.get("alpha"),
        "power": objective.get("power"),
        "first_boots": first_boots["why"] if first_boots else None,
        "screen": screened(hunt),
        "model": hunt["model"],
        "metric": objective["metric"],
        "direction": "higher" if objective["higher_is_better"] else "lower",
        "levels": ", ".join(map(str, objective["levels"])),
        "min_effect_pct": objective["min_effect_pct"],
        "done": hunt["done"],
        "stop_reason": hunt["stop_reason"] or "not done",
        "path": path_text(hunt),
        "outcomes": candidate_outcomes(hunt),
        "rounds": [r for r in rounds if r["kind"] == "search"],
        "checks": checks[0] if checks else None,
        "check_rounds": checks,  # the screen design checks a smaller set again
        "plot": gain_plot(hunt),
        "ledger": ledger_view(hunt),
        "final": final_view(hunt),
    }
