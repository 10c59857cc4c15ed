"""A hunt's section of the report: hunt.json dicts built from the simulator (known truth) or
fabricated, through the view and the template, and in a real browser."""

import base64
import copy
import math
import re

import pytest
from fixtures.browser import keep_screenshot, need_browser, render
from fixtures.cells import SETTINGS, judge_sweep, write_sweep

from servesweep.hunt import spec as hs
from servesweep.hunt.simulate import Noise, Truth, run
from servesweep.hunt.state import worst_case
from servesweep.hunt_run.observe import BootCost
from servesweep.hunt_run.steps import jsonable, ledger, rounds_record
from servesweep.results.report import hunt_views
from servesweep.results.report.build import build_report

BASE = {16: 100.0, 64: 300.0}
CANDIDATES = {
    "win": {"flags": {"win": True}, "description": "a clear winner"},
    "lose": {"flags": {"lose": True}},
    "crash": {"flags": {"crash": True}},
    "bf16": {"flags": {"dtype": "bfloat16"}},
    "more": {"flags": {"more": 2}, "requires": "win", "description": "on top of win"},
    "never": {"flags": {"x": 1}, "requires": "lose"},
}
TRUTH = Truth(
    BASE,
    {"win": 1.30, "lose": 0.85, "more": 1.12},
    crashers=frozenset({"crash"}),
    answer_changers=frozenset({"bf16"}),
)
COMMAND = ["<stack>/bin/python", "-m", "srv", "--model", "<model>", "--port", "<port>"]


def make_spec(candidates=CANDIDATES, **kw):
    return hs.from_dict(
        {
            "start": {"name": "baseline", "stack": "cpu", "flags": {"device": "cpu"}},
            "candidates": candidates,
            "objective": {"metric": "output_throughput", "levels": [16, 64]},
            "gpu_hours_per_boot": 0.5,
            "min_effect_pct": 5,
            "design": "sequential",  # the tests below read its rounds; the screen's: at the end
            **kw,
        }
    )


def hunt_json(spec, truth=TRUTH, seed=1, candidates=CANDIDATES, wall_s=60.0) -> dict:
    """hunt.json as steps.hunt_record writes it, from a simulated hunt: each boot 60 s on
    2 GPUs."""
    sim = run(spec, truth, Noise(0.02), seed)
    state = sim.state
    costs = {k: BootCost(wall_s, 2, wall_s * 2 / 3600) for k in sim.observations}
    final = hs.compose(spec, state.incumbent)
    return {
        "start": spec.start.name,
        "stack": "cpu",
        "model": "synthetic",
        "objective": {
            "metric": "output_throughput",
            "higher_is_better": True,
            "levels": [16, 64],
            "min_effect_pct": spec.min_effect_pct,
            "margin_pct": hs.margin(spec),
            "alpha": spec.alpha,
            "power": spec.power,
        },
        "first_boots": jsonable(state.first_boots),
        "final_members": list(state.final),
        "steps": len(sim.batches) + 1,
        "done": state.done,
        "stop_reason": state.stop_reason,
        "incumbent": list(state.incumbent),
        "final": {
            "variant": final.name,
            "stack": final.stack,
            "model": "synthetic",
            "flags": final.flags,
            "env": {"OMP_NUM_THREADS": "2", "NOTE": "a b"},
            "command": COMMAND + [f"--{k}={v}" for k, v in final.flags.items()],
            "spec_hash": "abc123",
        },
        "excluded": dict(state.excluded),
        "rounds": rounds_record(spec, state),
        "ledger": ledger(state, costs),
        "spent": {
            "boots": len(costs),
            "wall_s": wall_s * len(costs),
            "gpu_hours": sum(c.gpu_hours for c in costs.values()),
        },
        "planned_cost": jsonable(state.spent),
        "worst_case": jsonable(worst_case(spec)),
        "budget": {
            "boots": spec.budget_boots,
            "gpu_hours": spec.budget_gpu_hours,
            "gpu_hours_per_boot": spec.gpu_hours_per_boot,
        },
        "candidates": {
            name: {
                "description": c.get("description", ""),
                "requires": [c["requires"]] if c.get("requires") else [],
                "conflicts": [],
            }
            for name, c in candidates.items()
        },
    }


@pytest.fixture(scope="module")
def planted():
    return hunt_json(make_spec())


def test_every_candidate_has_its_outcome_and_why(planted):
    assert planted["incumbent"] == ["win", "more"]  # the known right path
    outcomes = {c["candidate"]: c for c in hunt_views.candidate_outcomes(planted)}
    assert list(outcomes) == list(CANDIDATES)
    assert {k: c["outcome"] for k, c in outcomes.items()} == {
        "win": "adopted",
        "lose": "rejected",
        "crash": "crashed",
        "bf16": "changes outputs",
        "more": "adopted",
        "never": "requires / conflicts",
    }
    assert outcomes["win"]["why"].startswith("round 1: +")
    assert outcomes["more"]["why"].startswith("round 2: +")
    assert re.fullmatch(
        r"round 1: worse (than the margin \(5 %\) )?at level (16|64)", outcomes["lose"]["why"]
    )
    assert outcomes["crash"]["why"] == "round 1: server exited during startup"
    assert outcomes["never"]["why"] == "requires lose, never adopted"
    assert outcomes["win"]["description"] == "a clear winner"


def test_each_round_shows_its_reference_arms_deltas_intervals_and_boots(planted):
    view = hunt_views.hunt_view(planted)
    assert view["path"] == "baseline → +win (round 1) → +more (round 2)"
    assert view["stop_reason"] == "candidates exhausted"
    first, second = view["rounds"]
    assert first["reference"] == "baseline" and second["reference"] == "baseline+win"
    assert first["adopted"] == "win" and second["adopted"] == "more"
    arms = {a["candidate"]: a for a in first["arms"]}
    win = next(a for a in planted["rounds"][0]["arms"] if a["candidate"] == "win")
    assert arms["win"]["delta"] == f"{win['gain_pct']:+.1f} %"
    assert arms["win"]["interval"] == f"[{win['low_pct']:+.1f}, {win['high_pct']:+.1f}] %"
    assert arms["win"]["boots"] == f"{len(win['boots'])} (r0–r{len(win['boots']) - 1})"
    # measured: 60 s × 2 GPUs a boot
    assert arms["win"]["gpu_hours"] == f"{len(win['boots']) * 120 / 3600:.3g}"
    assert (arms["win"]["verdict"], arms["win"]["cls"]) == ("adopted", "ok")
    assert arms["crash"]["verdict"] == "crashed" and arms["crash"]["delta"] == "—"
    assert arms["bf16"]["verdict"] == "changes outputs"
    # the winner's true gain lies in its interval
    assert win["low_pct"] < 30 < win["high_pct"]


def test_the_checks_the_ledger_and_the_final_command(planted):
    view = hunt_views.hunt_view(planted)
    checks = view["checks"]
    assert checks["reference"] == "baseline+win+more"
    roles = {(a["role"], a["candidate"]): a for a in checks["arms"]}
    confirm = roles[("confirm", "win+more")]
    assert confirm["verdict"] == "confirmed" and confirm["variant"] == "baseline"
    assert roles[("ablation", "win")]["verdict"] == "needed"
    # the last adopted candidate's ablation too is measured on fresh boots
    more = roles[("ablation", "more")]
    assert more["verdict"] == "needed" and more["boots"] != "0"
    assert more["why"].startswith("the final is better with it than without it (better at")
    # its design: the confirm and one ablation (win's leaves the start: the confirm's)
    # (sized from the pool where the looks before reached its df; with the guard at its
    # calibrated 10 % this seed's checks decide at their first look, on the cap's design)
    design = render_design(checks)
    if "sized at the cap" not in design:
        assert design.startswith("Design: 2 arm(s), alpha 0.0063 per arm and level; at a boot CV")
        assert re.search(r"needs \d+ boots a side: last look at \d+, power 0\.\d\d$", design)
    else:
        assert design == "Design: sized at the cap (too little boot scatter seen to size it)"
    led = view["ledger"]
    assert [r["round"] for r in led["rows"]] == [1, 2, 3]
    assert (
        sum(r["boots"] for r in led["rows"]) == led["total"]["boots"] == planted["spent"]["boots"]
    )
    assert all(r["boots"] == r["reference"] + r["arms"] for r in led["rows"])
    assert led["budget"] == "none"
    assert led["stated"].endswith("at 0.5 GPU-hours a boot")
    final = view["final"]
    assert final["variant"] == "baseline+win+more" and final["members"] == ["win", "more"]
    assert final["command"].splitlines() == [
        "OMP_NUM_THREADS=2 \\",
        "NOTE='a b' \\",
        "<stack>/bin/python -m srv --model <model> --port <port> --device=cpu --win=True --more=2",
    ]
    assert final["placeholders"]


def test_the_cumulative_gain_compounds_the_adopted_arms():
    def arm(name, g, lo, hi, role="candidate"):
        return {"candidate": name, "variant": name, "role": role, "verdict": "adopt",
                "gain_pct": g, "low_pct": lo, "high_pct": hi}  # fmt: skip

    hunt = {
        "start": "s",
        "objective": {"metric": "m", "min_effect_pct": 3},
        "rounds": [
            {"index": 0, "kind": "search", "adopted": "a", "arms": [arm("a", 10, 5, 15)]},
            {"index": 1, "kind": "search", "adopted": "b", "arms": [arm("b", 20, 10, 30)]},
            {
                "index": 2,
                "kind": "check",
                "adopted": None,
                "arms": [arm("a+b", 31, 25, 37, "confirm") | {"verdict": "confirmed"}],
            },
        ],  # fmt: skip
    }
    steps, confirm = hunt_views.gain_path(hunt)
    assert [round(s["gain"], 6) for s in steps] == [10, 32]  # 1.1 × 1.2
    assert steps[1]["low"] == pytest.approx(15.5) and steps[1]["high"] == pytest.approx(49.5)
    assert confirm["gain"] == 31 and confirm["verdict"] == "confirmed"
    png = hunt_views.gain_plot(hunt)
    assert png.startswith("data:image/png;base64,")
    assert base64.b64decode(png.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_hunt_that_adopts_nothing_says_so_in_one_line_each(tmp_path):
    spec = make_spec({"lose": {"flags": {"lose": True}}})
    hunt = hunt_json(spec, candidates={"lose": {}})
    view = hunt_views.hunt_view(hunt)
    assert view["plot"] is None and view["checks"] is None
    assert view["path"] == "baseline"
    assert view["final"]["members"] == [] and not math.isnan(len(view["rounds"]))
    html = render_report(tmp_path, hunt)
    assert "Nothing was adopted: no gain over the start to chart." in html
    assert "No confirm or ablation ran" in html
    assert "the start, unchanged" in html


def test_over_budget_and_undecided_are_said_in_words():
    # Welch, 2..4 boots a side, first boots counted. Round 1 (4 arms) adopts win at its
    # first look (10 boots); round 2 (more, on win) needs 6 boots for its first look (2 a
    # side and 2 retries), with the checks' first look kept back for two adopted candidates (the
    # confirm and two ablations: 2 x 4 + 2 retries = 10): 26 in all, over 24.
    kw = {"boots_max": 4, "boots_min": 2, "pool_variance": False, "first_boot": "keep"}
    hunt = hunt_json(make_spec(budget_boots=24, **kw))
    assert hunt["stop_reason"] == "budget: the next round's first look could exceed it"
    outcomes = {c["candidate"]: c for c in hunt_views.candidate_outcomes(hunt)}
    assert outcomes["more"]["outcome"] == "over budget"
    assert outcomes["more"]["why"] == "over budget: the next round's first look could exceed it"
    assert hunt_views.ledger_view(hunt)["budget"] == "24 boots"
    assert hunt["spent"]["boots"] <= 24 and hunt["incumbent"] == ["win"]
    # 26 boots: round 2 starts, and the budget ends it after its first look, which leaves
    # more undecided (2 boots a side of the 4 planned: 2 more each for it and its reference)
    hunt = hunt_json(make_spec(budget_boots=26, **kw))
    assert hunt["stop_reason"] == (
        "budget: spent in round 2 at 2 boots a side; undecided: more "
        "(about 4 more boots would settle them)"
    )
    assert hunt["spent"]["boots"] <= 26
    outcomes = {c["candidate"]: c for c in hunt_views.candidate_outcomes(hunt)}
    assert outcomes["more"]["outcome"] == "undecided: boots cut short"
    assert outcomes["more"]["why"].startswith(
        "round 2: undecided: the budget ran out at 2 boots a side (the round planned 4); "
        "about 4 more boots"
    )
    undecided = {"candidate": "x", "variant": "s+x", "role": "candidate", "verdict": "undecided",
                 "reason": "undecided at 4 boots"}  # fmt: skip
    assert hunt_views.verdict_words(undecided, None) == (
        "undecided: boots cut short",
        "warn",
        "undecided at 4 boots",
    )
    better = undecided | {"verdict": "adopt", "reason": "better at level 16, worse at none"}
    assert hunt_views.verdict_words(better, "y")[0] == "better, not chosen"


def render_design(round_view: dict) -> str:
    return f"Design: {round_view['plan']}"


def render_report(tmp_path, hunt) -> str:
    paths, _ = write_sweep(tmp_path)
    summary, verdicts = judge_sweep(paths, tmp_path)
    out = tmp_path / "report.html"
    build_report(summary, verdicts, paths, out, SETTINGS, hunt=hunt)
    return out.read_text()


@pytest.mark.slow
def test_the_report_opens_with_the_hunt_and_keeps_the_rest_below(tmp_path, planted):
    html = render_report(tmp_path, planted)
    hunt_at, verdicts_at = html.index('<h2 id="hunt">'), html.index('<h2 id="verdicts">')
    assert hunt_at < verdicts_at
    section = html[hunt_at:verdicts_at]
    assert "baseline → +win (round 1) → +more (round 2)" in section
    for heading in ("Candidates", "Rounds", "Cumulative gain", "Confirm and ablation", "Ledger"):
        assert f"<h3>{heading}</h3>" in section
    pre = re.search(r'<pre class="command">(.*?)</pre>', section, re.S).group(1)
    assert "&lt;stack&gt;/bin/python -m srv" in pre and "NOTE=&#39;a b&#39; \\" in pre
    assert section.count('<img src="data:image/png;base64,') == 1
    assert "changes outputs" in section and "server exited during startup" in section
    # what alpha and power mean, in words, and what the adopted Δ is
    words = re.sub(r"\s+", " ", section)
    assert "α 0.025 a round: the chance that a round adopts a candidate that gains nothing" in words
    assert "so it reads high (selected): quote the confirm's" in words
    assert "First boots: first boots not seen to differ." in words


@pytest.mark.slow
def test_without_a_hunt_there_is_no_hunt_section(tmp_path):
    paths, _ = write_sweep(tmp_path)
    summary, verdicts = judge_sweep(paths, tmp_path)
    build_report(summary, verdicts, paths, tmp_path / "plain.html", SETTINGS)
    assert 'id="hunt"' not in (tmp_path / "plain.html").read_text()


@pytest.mark.slow
def test_a_hunt_report_renders_in_chromium(tmp_path, planted):
    need_browser()
    render_report(tmp_path, planted)
    shown = render(tmp_path / "report.html", tmp_path / "report.png")
    assert shown.messages == []
    assert shown.image_widths and all(w > 0 for w in shown.image_widths)
    assert shown.empty_tables == 0
    keep_screenshot(shown, "hunt-report.png")


def test_invalid_arms_and_a_reference_measured_less_than_asked():
    """As the first CPU hunt ran: every counted level short of a steady window, so the
    reference's two boots failed their gate (r2, r3 asked as replacements, never run once
    every arm was dropped)."""
    arm = {"candidate": "cb", "variant": "b+cb", "role": "candidate", "verdict": "dropped",
           "reason": "invalid at level 16", "gain_pct": None, "low_pct": None,
           "high_pct": None, "level": None, "boots": [0, 1], "gpu_hours": 0.0}  # fmt: skip
    hunt = {
        "start": "b",
        "stop_reason": "a round adopted nothing",
        "rounds": [{"index": 0, "kind": "search", "reference": "b",
                    "reference_boots": [0, 1, 2, 3], "arms": [arm], "adopted": None}],
        "ledger": [{"round": 0, "kind": "search", "boots": 4, "wall_s": 120.0, "gpu_hours": 0,
                    "reference": {"variant": "b", "boots": 2, "wall_s": 60.0, "gpu_hours": 0},
                    "arms": [{"variant": "b+cb", "role": "candidate", "boots": 2,
                              "wall_s": 60.0, "gpu_hours": 0}]}],
        "spent": {"boots": 4, "wall_s": 120.0, "gpu_hours": 0},
        "planned_cost": {"boots": 4, "gpu_hours": 0},
        "worst_case": {"boots": 40, "gpu_hours": 0},
        "budget": {"boots": None, "gpu_hours": None, "gpu_hours_per_boot": 0},
    }  # fmt: skip
    (r,) = hunt_views.round_views(hunt)
    assert r["reference_boots"] == "2 measured of 4 (r0–r3) asked"
    assert r["arms"][0]["verdict"] == "invalid"
    assert r["arms"][0]["why"] == "invalid at level 16: no valid value (see Validity below)"
    assert hunt_views.ledger_view(hunt)["rows"] == [
        {"round": 1, "kind": "search", "reference": 2, "arms": 2, "boots": 4,
         "wall_min": "2.0", "gpu_hours": "0"}
    ]  # fmt: skip


def test_the_screen_design_says_kept_on_a_mean_and_what_the_checks_left_out():
    """Under `design: screen` (the default) a kept candidate was kept on its mean, with no
    interval, and stays only if its ablation shows it needed: a member the checks found not
    needed is 'left out', not 'adopted'."""
    screen = hunt_json(make_spec(design="screen"))
    screen["design"] = "screen"  # as steps.hunt_record writes it
    outcomes = {c["candidate"]: c for c in hunt_views.candidate_outcomes(screen)}
    assert outcomes["win"]["outcome"] == outcomes["more"]["outcome"] == "adopted"
    assert re.fullmatch(
        r"step 1: screen: kept, \+[\d.]+ % over baseline on the mean of 2 boots a side; "
        r"round \d+: needed",
        outcomes["win"]["why"],
    )
    assert outcomes["lose"]["why"].startswith("step 2: screen: not kept, -")
    # The same record with `more` found not needed by its ablation: left out of the final.
    pruned = copy.deepcopy(screen)
    pruned["final_members"] = ["win"]
    (check,) = [r for r in pruned["rounds"] if r["kind"] == "check"]
    for arm in check["arms"]:
        if arm["candidate"] == "more" and arm["role"] == "ablation":
            arm["verdict"] = "not needed"
    outcomes = {c["candidate"]: c for c in hunt_views.candidate_outcomes(pruned)}
    assert (outcomes["more"]["outcome"], outcomes["more"]["cls"]) == ("left out", "warn")
    assert outcomes["more"]["why"].endswith("; round 6: not needed")
    assert outcomes["win"]["outcome"] == "adopted"


def test_a_screen_hunt_reads_as_the_screen_in_the_report(tmp_path):
    """The screen's steps are kept on a mean (no interval): the section says so in its own
    words, titles its steps, charts the confirm (the gain to quote) and ends the path at the
    final the checks left (here with `more` found not needed)."""
    screen = hunt_json(make_spec(design="screen"))
    screen["design"] = "screen"  # as steps.hunt_record writes it
    screen["final_members"] = ["win"]
    screen["final"]["variant"] = "baseline+win"
    for r in screen["rounds"]:
        for arm in r["arms"]:
            if r["kind"] == "check" and arm["candidate"] == "more":
                arm["verdict"] = "not needed"
    view = hunt_views.hunt_view(screen)
    assert view["path"] == (
        "baseline → +win (step 1) → +more (step 5) → final baseline+win "
        "(the checks left out more: not needed)"
    )
    assert [r["title"] for r in view["rounds"]][:2] == ["Step 1", "Step 2"]
    assert view["rounds"][0]["plan"] == hunt_views.SCREEN_STEP
    assert view["plot"] is not None  # the confirm, though no step has an interval
    section = re.sub(r"\s+", " ", render_report(tmp_path, screen))
    section = section[section.index('<h2 id="hunt">') : section.index('<h2 id="verdicts">')]
    assert "<h3>Screen</h3>" in section and "<h3>Rounds</h3>" not in section
    assert "the screen design: each step boots one candidate" in section
    assert "kept <code>win</code>" in section and "adopted <code>" not in section
    assert "(the screen's own steps have no intervals to compound)" in section
    assert "left out" in section
    assert "than 5 % (group-sequential tests, α 0.025 a check round) (docs/hunt.md)" in section
    assert '<span class="pill ok">kept</span>' in section
