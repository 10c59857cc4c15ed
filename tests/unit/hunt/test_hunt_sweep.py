"""The sweep file's hunt: section, composed variants' specs and the observations read from
boot records (no Snakemake)."""

import copy
import csv
import json
import math
import typing

import pytest
from fixtures.faults import config

from servesweep import CLIENT_VERSION, METRICS_VERSION
from servesweep.hunt import spec as hs
from servesweep.hunt.state import BootKey
from servesweep.hunt_run.observe import boot_cost, observations
from servesweep.records import LevelSummary
from servesweep.sweep.config import ConfigError, load, spec_hash
from servesweep.sweep.layout import Paths
from servesweep.sweep.schema import schema

CANDIDATES = {
    "a": {"flags": {"speedup": 2, "tokens": 4}, "env": {"X": "1"}, "description": "A"},
    "b": {"flags": {"tokens": 6, "gap-ms": None}, "env": {"X": "2", "Y": 3}},
    "c": {"flags": {"runner": 1.1}, "stack": "other", "requires": "a", "conflicts": ["b"]},
}


def hunt_cfg(**hunt) -> dict:
    cfg = config(
        {
            "baseline": {"flags": {"greedy": True, "gap-ms": 5}, "env": {"Z": "z"}},
            "other-variant": {"extends": "baseline"},
        },
        levels=(1, 4, 16),
        hunt={
            "start": "baseline",
            "candidates": copy.deepcopy(CANDIDATES),
            "design": "sequential",  # these tests follow its rounds; screen: named where used
            **hunt,
        },
    )
    cfg["stacks"]["other"] = dict(cfg["stacks"]["test"])
    return cfg


def test_the_hunt_maps_onto_the_spec_with_the_schemas_defaults():
    h = load(hunt_cfg()).hunt
    s = h.spec
    assert (h.stack, h.model, h.metric, h.levels) == (
        "test",
        "tiny",
        "output_throughput",
        (1, 4, 16),
    )
    assert s.start == hs.Start("baseline", "test", {"greedy": True, "gap-ms": 5}, {"Z": "z"})
    assert [c.name for c in s.candidates] == ["a", "b", "c"]
    assert s.candidates[2].requires == ("a",) and s.candidates[2].conflicts == ("b",)
    assert s.candidates[2].stack == "other"
    assert s.objective == hs.Objective("output_throughput", True, (1, 4, 16))
    assert (s.min_effect_pct, s.boots_min, s.boots_max, s.stage) == (3, 1, 20, 1)
    assert (s.alpha, s.power, s.budget_boots, s.budget_gpu_hours) == (0.025, 0.8, None, None)
    assert (s.margin_pct, hs.margin(s), s.first_boot) == (None, 3, "auto")
    assert not s.compiles_on_first_use  # the fault server (command engine) does not say
    assert (s.correctness_gate, s.confirm, s.ablate, s.retest_rejected) == (True, True, True, False)
    assert s.pool_variance is True
    # The schema's defaults are the spec's own: one set of defaults.
    plain = hs.HuntSpec(s.start, s.candidates, s.objective)
    assert (plain.boots_min, plain.boots_max, plain.stage) == (s.boots_min, s.boots_max, s.stage)
    objective = schema()["properties"]["hunt"]["properties"]["objective"]["properties"]
    assert hs.Objective().metric == objective["metric"]["default"] == h.metric
    assert hs.Objective().metric in typing.get_type_hints(LevelSummary)  # a summary column
    bare = {"start": {"name": "b", "stack": "t"}, "candidates": {}, "objective": {"levels": [1]}}
    plain = hs.from_dict(bare)
    assert plain.objective.metric == hs.Objective().metric
    # Stated, not measured: 10 min a boot on the start's GPUs (0 here: counted as one).
    assert s.gpu_hours_per_boot == pytest.approx(10 / 60)


def test_the_objective_direction_levels_budget_and_gpus():
    cfg = hunt_cfg(
        objective={"metric": "p99_ttft_ms", "levels": [16, 4]},
        min_effect_pct=5,
        boots={"min": 2, "max": 6, "stage": 1},
        budget={"boots": 40, "gpu_hours": 125, "boot_minutes": 30},
        correctness_gate=False,
        ablate=False,
    )
    cfg["server"]["gpus"] = 8
    s = load(cfg).hunt.spec
    assert s.objective == hs.Objective("p99_ttft_ms", False, (16, 4))
    assert (s.boots_min, s.boots_max, s.stage, s.budget_boots) == (2, 6, 1, 40)
    assert s.gpu_hours_per_boot == pytest.approx(0.5 * 8)
    assert s.budget_gpu_hours == 125 and not s.correctness_gate and not s.ablate
    cfg["hunt"] |= {"margin_pct": 2, "first_boot": "drop"}
    cfg["engine"] = "vllm"
    cfg["variants"]["baseline"].pop("engine", None)
    s = load(cfg).hunt.spec
    assert (s.margin_pct, s.first_boot, s.compiles_on_first_use) == (2, "drop", True)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda h: h["candidates"]["c"].update(requires="x"),
            "config: hunt.candidates.c.requires: unknown candidate 'x'",
        ),
        (
            lambda h: h["candidates"]["c"].update(conflicts=["c"]),
            "config: hunt.candidates.c.conflicts: unknown candidate 'c'",
        ),
        (lambda h: h.update(start="nope"), "config: hunt.start: unknown variant 'nope'"),
        (
            lambda h: h["candidates"]["a"].update(stack="cuda13"),
            "config: hunt.candidates.a.stack: unknown stack 'cuda13'",
        ),
        (lambda h: h.update(model="big"), "config: hunt.model: unknown model 'big'"),
        (
            lambda h: h.update(objective={"levels": [2]}),
            "config: hunt.objective.levels: level 2 is not measured",
        ),
        (
            lambda h: h.update(objective={"metric": "goodput_output_throughput"}),
            "config: hunt.objective.metric: goodput_output_throughput needs slo:",
        ),
        (lambda h: h.update(boots={"min": 5, "max": 3}), "config: hunt.boots: min (5) is larger"),
        (lambda h: h.update(alpha=0.7), "config: hunt.alpha: 0.7 is greater than or equal"),
        (lambda h: h.update(margin_pct=0), "config: hunt.margin_pct: 0 is less than or equal"),
        (lambda h: h.update(first_boot="skip"), "config: hunt.first_boot: 'skip' is not one of"),
        (lambda h: h.update(speed=1), "config: hunt: unknown key ('speed' was unexpected)"),
        (
            lambda h: h["candidates"].update({"other-variant": {}}),
            "config: hunt.candidates.other-variant: the name of a variant too",
        ),
        (
            lambda h: h["candidates"].update({"a+b": {}}),
            "config: hunt.candidates: 'a+b' does not match",
        ),
        (
            lambda h: h["candidates"]["a"]["flags"].update(tp=2),
            "config: hunt.candidates.a.flags: the start holds 0 GPU(s) but these flags (tp 2)",
        ),
    ],
)
def test_bad_hunts_get_one_line_naming_the_key(edit, message):
    cfg = hunt_cfg()
    edit(cfg["hunt"])
    with pytest.raises(ConfigError) as e:
        load(cfg)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_the_gate_needs_the_correctness_pass():
    cfg = hunt_cfg()
    cfg["correctness"] = False
    with pytest.raises(ConfigError, match=r"^config: hunt.correctness_gate: needs"):
        load(cfg)
    cfg["hunt"]["correctness_gate"] = False
    assert load(cfg).hunt is not None


def test_composed_variants_merge_as_compose_says_and_resolve_like_declared_ones():
    sweep = load(hunt_cfg())
    assert sweep.cells == [] and sweep.jobs == []  # a hunt's steps name its boots
    spec = sweep.spec("test", "tiny", "baseline+a+b")
    c = hs.compose(sweep.hunt.spec, ["b", "a"])
    assert c.name == "baseline+a+b" and c.stack == "test"
    # Start first, then members in spec order: b's tokens override a's; null removes gap-ms.
    assert spec["flags"] == [["greedy", True], ["speedup", 2], ["tokens", 6]]
    assert spec["env"] == {"Z": "z", "X": "2", "Y": "3"}
    assert spec["variant"] == "baseline+a+b"
    assert spec["extends_chain"] == ["baseline", "a", "b"]
    assert spec["command"][-5:] == ["--greedy", "--speedup", "2", "--tokens", "6"]
    assert sweep.variant("baseline+a")["description"] == "A"
    # The stack comes from the composition; the start's runs on the hunt's stack.
    assert sweep.hunt.stack_of("baseline+a+c") == "other"
    assert sweep.hunt.stack_of("baseline") == "test"
    assert sweep.gpus("baseline+a+c") == 0
    assert sweep.must_match("baseline+a") is False
    # Names that no composition has are unknown: wrong order, repeats, strangers.
    for name in ("baseline+b+a", "baseline+a+a", "baseline+x", "other-variant+a", "baseline+"):
        with pytest.raises(KeyError):
            sweep.variant(name)
    # The wildcard pattern matches exactly the start and its compositions.
    import re

    pattern = re.compile(sweep.hunt.variant_pattern())
    assert pattern.fullmatch("baseline+a+c") and pattern.fullmatch("baseline")
    assert not pattern.fullmatch("baseline+x") and not pattern.fullmatch("other-variant")


def test_a_candidates_spec_changes_only_its_own_cells():
    before = load(hunt_cfg())
    cfg = hunt_cfg()
    cfg["hunt"]["candidates"]["b"]["flags"]["tokens"] = 7
    after = load(cfg)
    same = ["baseline", "baseline+a", "baseline+a+c"]
    changed = ["baseline+b", "baseline+a+b"]
    for v in same + changed:
        stack = after.hunt.stack_of(v)
        equal = before.spec(stack, "tiny", v) == after.spec(stack, "tiny", v)
        assert equal == (v in same), v


# Observations from records ------------------------------------------------------------


def level(lv, tput, in_boot=0, status="ok", cause=None):
    return {
        "level": lv,
        "in_boot": in_boot,
        "status": status,
        "cause": cause,
        "metrics_version": METRICS_VERSION,
        "num_prompts": 8,
        "completed": 8 if status == "ok" else 2,
        "failed": 0 if status == "ok" else 6,
        "duration_s": 4.0,
        "steady_window_s": 3.0,
        "output_throughput": tput,
        "total_output_tokens": 32,
        "achieved_concurrency": lv,
        "client_bound": False,
    }


def answers(texts):
    out = []
    for i, text in enumerate(texts):
        out.append({"index": i, "ok": True, "error": None, "text": text, "token_ids": None,
                    "tokens": None, "logprobs": None, "top_logprobs": None,
                    "retokenized_ids": [ord(t) for t in text]})  # fmt: skip
    return {
        "config": {"prompts": len(texts), "seed": 0, "max_tokens": 4},
        "prompts": [{"index": i, "text": f"p{i}"} for i in range(len(texts))],
        "modes": {"one_at_a_time": out},
    }


def write_boot(
    root, variant, boot, levels, status="ok", failure=None, texts=("ab", "cd"), stack="test"
):
    d = root / "results" / "cells" / stack / "tiny" / variant / f"r{boot}"
    d.mkdir(parents=True)
    cell = {"stack": stack, "model": "tiny", "variant": variant, "repeat": boot,
            "status": status, "failure": failure, "client_version": CLIENT_VERSION,
            "spec": {"gpus": 2}, "levels": levels,
            "started_at": "2026-01-01T00:00:00+00:00",
            "finished_at": "2026-01-01T00:30:00+00:00"}  # fmt: skip
    (d / "cell.json").write_text(json.dumps(cell))
    (d / "correctness.json").write_text(json.dumps(answers(texts)))
    return cell


def test_observations_read_the_records(tmp_path):
    cfg = hunt_cfg(objective={"levels": [1, 4]})
    cfg["benchmark"]["repeats_in_boot"] = 2
    sweep = load(cfg)
    ok = [level(1, 10.0), level(1, 12.0, 1), level(4, 40.0), level(4, 44.0, 1)]
    ok += [level(16, 0.0, 0, "failed", "oom"), level(16, 0.0, 1, "not_run")]
    write_boot(tmp_path, "baseline", 0, ok)
    write_boot(tmp_path, "baseline+a", 0, ok, texts=("ab", "cX"))  # changes one answer
    crash = [level(1, 10.0), level(1, 10.0, 1), level(4, 0.0, 0, "failed", "nccl")]
    write_boot(tmp_path, "baseline+b", 0, crash, "failed", {"stage": "level", "cause": "nccl"})
    never = {"stage": "boot", "cause": "assertion"}
    write_boot(tmp_path, "baseline+a+b", 0, [], "failed", never)
    invalid = [level(1, 10.0), {**level(1, 10.0, 1), "steady_window_s": 0.1}]
    invalid += [level(4, 40.0), level(4, 40.0, 1)]
    write_boot(tmp_path, "baseline+b", 1, invalid)
    keys = [BootKey(v, 0) for v in ("baseline", "baseline+a", "baseline+b", "baseline+a+b")]
    keys += [BootKey("baseline+b", 1), BootKey("baseline+b", 2)]  # the last: no record
    obs, costs = observations(sweep, Paths(tmp_path), keys)
    assert set(obs) == set(keys[:-1])
    # The mean of the in-boot measurements at each counted level; level 16 does not count.
    assert obs[keys[0]].values == {1: 11.0, 4: 42.0} and obs[keys[0]].failure is None
    assert not obs[keys[0]].answers_changed and obs[keys[1]].answers_changed
    assert obs[keys[2]].failure == "nccl (level 4)"
    assert obs[keys[3]].failure == "assertion (boot)"
    assert obs[keys[4]].values == {4: 40.0}  # level 1 fails a validity gate: no value
    # Measured cost: 30 min × 2 GPUs.
    assert costs[keys[0]] == boot_cost(write_boot(tmp_path / "x", "v", 0, []))
    assert costs[keys[0]].gpu_hours == pytest.approx(1.0) and costs[keys[0]].wall_s == 1800
    assert math.isclose(sum(c.gpu_hours for c in costs.values()), 5.0)


# The steps, replayed as Snakemake runs them (no Snakemake) ---------------------------

TRUTH = {"a": 1.5, "b": 0.7, "c": 1.2}  # known factors on the start's 100 tok/s


def measure(root, sweep, key) -> None:
    """A boot with the known truth and a seeded 1 % scatter."""
    factor = 1.0
    for m in key.variant.split("+")[1:]:
        factor *= TRUTH[m]
    noise = 1 + 0.01 * math.sin(7 * key.boot + len(key.variant))
    levels = [level(lv, 100 * factor * noise) for lv in (1, 4, 16)]
    stack = sweep.hunt.stack_of(key.variant)
    write_boot(root, key.variant, key.boot, levels, stack=stack)
    path = root / "results" / "cells" / stack / "tiny" / key.variant / f"r{key.boot}" / "cell.json"
    cell = json.loads(path.read_text())
    cell["spec_hash"] = spec_hash(sweep.spec(stack, "tiny", key.variant))
    path.write_text(json.dumps(cell))


def test_the_steps_chain_to_the_known_path_and_replay_the_same(tmp_path):
    from servesweep.hunt_run.steps import hunt_record, step_record

    sweep = load(hunt_cfg(boots={"min": 2, "max": 4, "stage": 2}, min_effect_pct=5))
    paths = Paths(tmp_path)
    steps = [step_record(sweep, paths, 0, None)]
    while not steps[-1]["done"]:
        for key in steps[-1]["needed"]:
            measure(tmp_path, sweep, BootKey(*key))
        steps.append(step_record(sweep, paths, len(steps), steps[-1]))
        # A step is a function of the one before and the records: the same again.
        assert step_record(sweep, paths, len(steps) - 1, steps[-2]) == steps[-1]
        assert len(steps) < 30
    seen = [tuple(k) for k in steps[-1]["observed"]]
    assert len(seen) == len(set(seen))  # no boot asked for twice
    hunt = hunt_record(sweep, paths, steps[-1])
    assert [r["adopted"] for r in hunt["rounds"]] == ["a", "c", None]
    assert {a["candidate"]: a["verdict"] for a in hunt["rounds"][0]["arms"]} == {
        "a": "adopt",
        "b": "reject",
    }
    # b is out after round 1; c (requires a) comes in round 2 on its own stack.
    assert [a["variant"] for a in hunt["rounds"][1]["arms"]] == ["baseline+a+c"]
    assert hunt["final"]["variant"] == "baseline+a+c" and hunt["final"]["stack"] == "other"
    assert hunt["stop_reason"] == "candidates exhausted"
    # The ledger: every boot once, 30 min x 2 GPUs each.
    assert hunt["spent"]["boots"] == len(seen) == sum(r["boots"] for r in hunt["ledger"])
    assert hunt["spent"]["gpu_hours"] == pytest.approx(len(seen))
    assert len(hunt["cells"]) == len(seen)


def test_the_plan_reads_where_the_hunt_stands_from_the_records(tmp_path):
    from servesweep.hunt_run.plan import header, plan_hunt
    from servesweep.hunt_run.steps import step_record

    sweep = load(hunt_cfg(boots={"min": 2, "max": 4, "stage": 2}, min_effect_pct=5))
    paths = Paths(tmp_path)
    state, planned = plan_hunt(sweep, paths)
    first = step_record(sweep, paths, 0, None)
    assert [[p.variant, p.repeat] for p in planned] == first["needed"]
    assert {p.action for p in planned} == {"run"} and state.spent.boots == 0
    for key in first["needed"]:
        measure(tmp_path, sweep, BootKey(*key))
    state, planned = plan_hunt(sweep, paths)
    second = step_record(sweep, paths, 1, first)
    assert [[p.variant, p.repeat] for p in planned] == second["needed"]
    assert state.spent.boots == len(first["needed"]) == len(second["observed"])
    text = "\n".join(header(sweep, state))
    assert f"spent so far: {len(first['needed'])} boots" in text
    assert f"worst case left: {second['worst_case_left']['boots']} boots" in text
    assert "now: round 2 (search), reference baseline+a; arms: c" in text, text
    assert "later stages and rounds follow" in text
    # The same hunt as the screen, before its first boot: its search rounds are its steps.
    cfg = hunt_cfg(boots={"min": 2, "max": 4, "stage": 2}, min_effect_pct=5)
    screen = load(cfg | {"hunt": cfg["hunt"] | {"design": "screen"}})
    fresh = Paths(tmp_path / "fresh")
    text = "\n".join(header(screen, plan_hunt(screen, fresh)[0]))
    assert "now: step 1 of the screen, reference baseline" in text, text
    budgeted = load(cfg | {"hunt": cfg["hunt"] | {"design": "screen", "budget": {"boots": 60}}})
    text = "\n".join(header(budgeted, plan_hunt(budgeted, fresh)[0]))
    assert "the budget is granted step by step" in text and "a round starts" not in text
    assert "round" not in text.split("now:")[1] and "later boots and steps follow" in text
    # The plan's text is the sweep's, told the order a hunt's jobs run in.
    from servesweep.hunt_run.plan import write_hunt_plan

    text = write_hunt_plan(sweep, paths, ["s.yaml"], False, tmp_path / "p.txt", tmp_path / "p.json")
    order = "jobs run in this order: the reference's and each arm's boots interleaved, boot by boot"
    assert order in text.splitlines() and "every cell's first boot" not in text
    assert "boot scatter comes from" not in text  # no verdicts yet: nothing to say
    # The last verdicts split a counted level's scatter: at level 4 a boot's own requests
    # are most of it, so the plan says to lengthen the level before adding boots; level 64
    # is not the hunt's, so it is not advised on.
    fields = ["level", "family", "components_from", "sigma_boot_pct", "sigma_within_pct"]
    fields += ["per_boot", "within_share"]
    with open(tmp_path / "results" / "verdicts.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerow(["4", "primary", "batches", "1.0", "20.0", "20", "0.95"])
        w.writerow(["64", "primary", "batches", "1.0", "20.0", "20", "0.95"])
    text = write_hunt_plan(sweep, paths, ["s.yaml"], False, tmp_path / "p.txt", tmp_path / "p.json")
    advice = [line for line in text.splitlines() if line.startswith("  level ")]
    assert len(advice) == 1 and advice[0].startswith("  level 4: σ_B 1.0 %"), advice
    assert "95 % of a boot's scatter is its own measurements'" in advice[0]
    assert "more measurements a boot would cut it more than more boots" in advice[0]
    # A record measured with another spec is not where the hunt stands.
    cfg = hunt_cfg(boots={"min": 2, "max": 4, "stage": 2}, min_effect_pct=5)
    cfg["hunt"]["candidates"]["a"]["flags"]["speedup"] = 3
    state, planned = plan_hunt(load(cfg), paths)
    assert state.spent.boots == len(first["needed"]) - 2  # baseline+a's two boots are stale


def test_max_load_within_the_slo_is_one_value_a_boot(tmp_path):
    cfg = hunt_cfg(objective={"metric": "max_load_within_slo"})
    with pytest.raises(
        ConfigError, match=r"^config: hunt.objective.metric: .* needs benchmark.search"
    ):
        load(cfg)
    cfg["slo"] = {"ttft_ms": 500}
    cfg["benchmark"]["search"] = {"probes": 2}
    sweep = load(cfg)
    assert sweep.hunt.levels == ("max_load_within_slo",)
    assert sweep.hunt.spec.objective.higher_is_better
    for boot, value in enumerate([12.0, None]):
        write_boot(tmp_path, "baseline", boot, [level(1, 10.0), level(4, 40.0), level(16, 90.0)])
        path = tmp_path / "results/cells/test/tiny/baseline" / f"r{boot}" / "cell.json"
        cell = json.loads(path.read_text())
        cell["capacity"] = {"value": value, "low": value, "high": None}
        path.write_text(json.dumps(cell))
    obs, _ = observations(sweep, Paths(tmp_path), [BootKey("baseline", 0), BootKey("baseline", 1)])
    assert obs[BootKey("baseline", 0)].values == {"max_load_within_slo": 12.0}
    assert obs[BootKey("baseline", 1)].values == {}  # nothing met the SLO: no value
    cfg["hunt"]["objective"]["levels"] = [4]
    with pytest.raises(ConfigError, match=r"^config: hunt.objective.levels: .* has no levels"):
        load(cfg)


def test_a_budget_too_small_for_the_first_look_fails_at_load_in_one_line(tmp_path):
    from servesweep.hunt.state import replay
    from servesweep.hunt_run.plan import header, plan_hunt

    # a, b on the start (c requires a): round 1's first look is 1 boot for each of the 3
    # variants, 2 retries of the reference and 3 first boots (8); the checks' first look
    # kept back for one adopted candidate is the confirm's 1 + 1 and 2 retries (4): 12
    with pytest.raises(ConfigError) as e:
        load(hunt_cfg(budget={"boots": 11}))
    line = str(e.value)
    assert "\n" not in line and line.startswith("config: hunt.budget.boots: 11 boots is too small")
    assert "it needs at least 12" in line
    sweep = load(hunt_cfg(budget={"boots": 12}))
    assert len(replay(sweep.hunt.spec, {}).needed) == 3  # round 1 starts
    # 30 boot-minutes on 1 GPU: 0.5 GPU-hours a boot, 6 for the 12 boots
    with pytest.raises(ConfigError, match=r"^config: hunt\.budget\.gpu_hours: 5\.9 GPU-hours"):
        load(hunt_cfg(budget={"gpu_hours": 5.9, "boot_minutes": 30}))
    sweep = load(hunt_cfg(budget={"gpu_hours": 6, "boot_minutes": 30}))
    # The plan, before a boot is spent: the round's and the whole hunt's expected and worst
    # cost (round 1 at the cap: 20 boots for each of 3 variants, 2 retries, 3 first boots).
    state, _ = plan_hunt(sweep, Paths(tmp_path))
    text = "\n".join(header(sweep, state))
    assert "cost of round 1 (2 arms): expected about " in text
    assert "worst case 65 boots (32.50 GPU-hours) (every arm to boots.max)" in text
    assert "expected cost of the whole hunt: about " in text
    assert "a round starts when its first look fits" in text and "12 boots" in text


def test_the_screen_design_maps_onto_the_spec_and_its_budget_line_names_the_key(tmp_path):
    from servesweep.hunt_run.plan import header, plan_hunt

    default = hunt_cfg()
    del default["hunt"]["design"]
    s = load(default).hunt.spec
    assert s.design == "screen" == hs.HuntSpec(s.start, s.candidates, s.objective).design
    s = load(hunt_cfg(design="screen", boots={"screen": 3})).hunt.spec
    assert (s.design, s.screen_boots) == ("screen", 3)
    # its first step: 2 counted boots and a first boot of the start and of a (6), the
    # start's 2 retries, and the checks' first look for one kept candidate (4): 12
    assert hs.minimum_budget(load(hunt_cfg(design="screen")).hunt.spec) == 12
    with pytest.raises(ConfigError) as e:
        load(hunt_cfg(design="screen", budget={"boots": 11}))
    line = str(e.value)
    assert "\n" not in line and line.startswith("config: hunt.budget.boots: 11 boots is too small")
    assert "the screen's first step" in line
    with pytest.raises(ConfigError, match=r"^config: hunt.design: 'race' is not one of"):
        load(hunt_cfg(design="race"))
    # The screen keeps on a mean: without its ablations nothing checks what it kept (the CPU
    # example kept a +3.8 % below its δ of 5 % so), so the pair fails at load, in one line.
    with pytest.raises(ConfigError) as e:
        load(hunt_cfg(design="screen", ablate=False))
    line = str(e.value)
    assert "\n" not in line and line.startswith("config: hunt: design screen needs ablate: true")
    assert load(hunt_cfg(design="sequential", ablate=False)).hunt.spec.ablate is False
    sweep = load(hunt_cfg(design="screen", budget={"boots": 12}))
    state, _ = plan_hunt(sweep, Paths(tmp_path))
    text = "\n".join(header(sweep, state))
    assert "design: screen: one pass over the candidates" in text
    assert "cost of the screen: 3 boots a variant (2 counted)" in text
    assert "on its longest path (every candidate kept, then one check round of all" in text
