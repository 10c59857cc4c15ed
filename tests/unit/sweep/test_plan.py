"""The plan without Snakemake: states, estimates, totals and the text it prints."""

import json
from pathlib import Path

import pytest

from servesweep import CLIENT_VERSION
from servesweep.sweep.config import load, spec_hash, spec_json
from servesweep.sweep.layout import Paths
from servesweep.sweep.plan import (
    DEFAULT_BOOT_S,
    DEFAULT_CELL_TOK_S,
    DEFAULT_STREAM_TOK_S,
    DEFAULT_TEARDOWN_S,
    LEVEL_OVERHEAD_S,
    AssumedRates,
    cell_state,
    changed_keys,
    plan_sweep,
    staged_costs,
    state_digest,
)
from servesweep.sweep.plan_text import duration, render, totals

RETRIES = {"boot": 1, "failed_cells": False, "max_attempts": 3}


def sweep_config(**benchmark) -> dict:
    return {
        "stacks": {"box": {"kind": "existing", "python": "/opt/env/bin/python3"}},
        "models": {"m": {"path": "/shared/m"}},
        "engine": "vllm",
        "server": {"gpus": 2},
        "variants": {
            "baseline": {"flags": {"tensor-parallel-size": 2}},
            "ep": {"extends": "baseline", "flags": {"enable-expert-parallel": True}},
        },
        "correctness": False,  # its estimate has a test of its own
        "benchmark": {
            "levels": [1, 100],
            "warmup": 0,
            "num_prompts": {"per_level": 1, "min": 10},
            "workload": {"kind": "random", "input_tokens": 8, "output_tokens": 100},
            **benchmark,
        },
    }


def record(sweep, variant, status="ok", attempt=0, client=CLIENT_VERSION, **extra) -> dict:
    spec = sweep.spec("box", "m", variant)
    cell = {
        "stack": "box",
        "model": "m",
        "variant": variant,
        "engine": "vllm",
        "spec": spec,
        "spec_hash": spec_hash(spec),
        "client_version": client,
        "attempt": attempt,
        "status": status,
        "failure": {"stage": "boot", "cause": "oom"} if status == "failed" else None,
        "boot_s": 30.0,
        "teardown": {"seconds": 4.0},
        "finished_at": "2026-12-01T10:00:00+00:00",
        "levels": [
            {"level": 1, "status": "ok", "output_throughput": 50.0},
            {"level": 100, "status": "ok", "output_throughput": 2500.0},
        ],
    }
    cell.update(extra)
    return cell


def write(paths: Paths, cell: dict) -> None:
    path = paths.cell_json(cell["stack"], cell["model"], cell["variant"], cell.get("repeat", 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))


def manifests(paths: Paths) -> None:
    for path, data in (
        (paths.stack_manifest("box"), {"python": "/opt/env/bin/python3"}),
        (paths.model_manifest("m"), {"path": "/shared/m"}),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))


def test_a_new_sweep_runs_everything_at_default_rates(tmp_path):
    sweep = load(sweep_config())
    planned = plan_sweep(sweep, Paths(tmp_path))
    assert [(p.variant, p.state, p.action) for p in planned] == [
        ("baseline", "new", "run"),
        ("ep", "new", "run"),
    ]
    # Defaults by hand: level 1 has 10 requests of 100 tokens at 20 tok/s (one stream);
    # level 100 has 100 requests at min(100 x 20, 2000) tok/s.
    level1 = 10 * 100 / DEFAULT_STREAM_TOK_S + LEVEL_OVERHEAD_S
    level100 = 100 * 100 / min(100 * DEFAULT_STREAM_TOK_S, DEFAULT_CELL_TOK_S) + LEVEL_OVERHEAD_S
    expected = DEFAULT_BOOT_S + DEFAULT_TEARDOWN_S + level1 + level100
    assert planned[0].estimate_s == pytest.approx(expected, abs=0.1)
    assert planned[0].estimate_from == "default rates"
    assert planned[0].gpus == 2
    t = totals(planned)
    assert t["to_run"] == 2
    assert t["gpu_hours"] == pytest.approx(2 * 2 * expected / 3600, abs=0.01)
    # Before any build: the interpreter as configured, the model directory as given.
    assert planned[0].command[:5] == [
        "/opt/env/bin/python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/shared/m",
    ]
    assert planned[1].command[-3:] == ["--tensor-parallel-size", "2", "--enable-expert-parallel"]
    assert planned[0].env == {"VLLM_SERVER_DEV_MODE": "1"}


def test_a_sweeps_plan_rates_price_what_has_no_records_and_rerun_nothing(tmp_path):
    stated = {"boot_s": 90, "teardown_s": 6, "stream_tok_s": 400, "server_tok_s": 8000}
    sweep = load(sweep_config() | {"plan_rates": stated})
    paths = Paths(tmp_path)
    planned = plan_sweep(sweep, paths)
    # By hand: 10 requests of 100 tokens at 400 tok/s; 100 at min(100 x 400, 8000).
    expected = 90 + 6 + (10 * 100 / 400 + LEVEL_OVERHEAD_S) + (100 * 100 / 8000 + LEVEL_OVERHEAD_S)
    assert planned[0].estimate_s == pytest.approx(expected, abs=0.1)
    assert planned[0].estimate_from == "plan_rates"
    text = render(planned, ["gpu.yaml"], False, assumed=AssumedRates.of(sweep))
    assert "else the sweep's plan_rates (without records: boot 90 s, teardown 6 s, 400 " in text
    # The plan's estimate only: the cells are the same cells.
    plain = load(sweep_config())
    for variant in ("baseline", "ep"):
        mine, theirs = sweep.spec("box", "m", variant), plain.spec("box", "m", variant)
        assert spec_json(mine) == spec_json(theirs)
    # A cell's own records still come first.
    manifests(paths)
    write(paths, record(sweep, "baseline"))
    base, ep = plan_sweep(sweep, paths)
    assert (base.estimate_from, ep.estimate_from) == ("this cell's records", "vllm records")


def test_measured_cells_are_kept_and_estimated_from_their_records(tmp_path):
    sweep = load(sweep_config())
    paths = Paths(tmp_path)
    manifests(paths)
    write(paths, record(sweep, "baseline"))
    planned = plan_sweep(sweep, paths)
    base, ep = planned
    assert (base.state, base.action) == ("current", "keep")
    # Its own records: boot 30, teardown 4, 1000 tokens at 50 tok/s, 10,000 at 2,500.
    assert base.estimate_s == pytest.approx(30 + 4 + 20 + 4 + 2 * LEVEL_OVERHEAD_S)
    assert base.estimate_from == "this cell's records"
    # The other variant has none: the same engine's records stand in.
    assert (ep.state, ep.estimate_from) == ("new", "vllm records")
    assert ep.estimate_s == pytest.approx(base.estimate_s)
    assert totals(planned)["to_run"] == 1


def test_a_spec_change_makes_the_cell_stale_and_says_what_changed(tmp_path):
    old = load(sweep_config())
    paths = Paths(tmp_path)
    manifests(paths)
    write(paths, record(old, "baseline"))
    new = sweep_config()
    new["variants"]["baseline"]["flags"]["max-num-seqs"] = 8
    base = plan_sweep(load(new), paths)[0]
    assert (base.state, base.action) == ("stale", "run")
    assert base.why == "spec changed: command, flags"


@pytest.mark.parametrize(
    "retries, attempt, expected",
    [
        (
            RETRIES,
            0,
            ("failed", "keep", "failed at boot (oom); final (retries.failed_cells is off)"),
        ),
        (
            {**RETRIES, "failed_cells": True},
            1,
            ("failed", "run", "failed at boot (oom); retried: attempt 2 of 3"),
        ),
        (
            {**RETRIES, "failed_cells": True},
            0,
            ("failed", "keep", "failed at boot (oom); final (3 attempts used)"),
        ),
    ],
)
def test_failed_cells_say_whether_they_will_be_retried(retries, attempt, expected):
    sweep = load(sweep_config())
    spec = sweep.spec("box", "m", "baseline")
    previous = record(sweep, "baseline", status="failed", attempt=0)
    assert cell_state(previous, spec, attempt, retries, []) == expected


def test_an_older_client_is_stale_but_not_rerun_by_itself():
    sweep = load(sweep_config())
    spec = sweep.spec("box", "m", "baseline")
    previous = record(sweep, "baseline", client="0")
    state, action, why = cell_state(previous, spec, 0, RETRIES, [])
    assert (state, action) == ("stale", "keep")
    assert f"client v0 (now v{CLIENT_VERSION})" in why


def test_a_missing_manifest_keeps_a_measured_cell(tmp_path):
    # results/ moved to a fresh clone: resources/ is built again, and the boot stands
    # unless the rebuilt stack or model differs (tests/unit/sweep/test_standing.py).
    sweep = load(sweep_config())
    paths = Paths(tmp_path)
    write(paths, record(sweep, "baseline"))
    base = plan_sweep(sweep, paths)[0]
    assert (base.state, base.action) == ("current", "keep")
    assert "kept while stack box's manifest and model m's manifest are rebuilt" in base.why


def test_a_failed_setup_is_set_up_again_and_its_cells_after_it(tmp_path):
    sweep = load(sweep_config())
    paths = Paths(tmp_path)
    failure = {"stage": "stack", "cause": "install_failed", "message": "pip", "log_tail": []}
    write(paths, {**record(sweep, "baseline", status="failed"), "failure": failure})
    manifest = {"stack": "box", "status": "failed", "attempt": 0, "failure": failure}
    paths.stack_manifest("box").parent.mkdir(parents=True)
    paths.stack_manifest("box").write_text(json.dumps(manifest))
    paths.model_manifest("m").parent.mkdir(parents=True)
    paths.model_manifest("m").write_text(json.dumps({"model": "m", "path": "/m"}))
    base = plan_sweep(sweep, paths)[0]
    assert (base.state, base.action) == ("failed", "run")
    assert (
        base.why
        == "stack box failed to set up (install_failed): set up again first, then this cell"
    )


def test_changed_keys():
    assert changed_keys({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 2, "d": 4}}) == ["b.d"]
    assert changed_keys({"a": 1}, {"a": 1, "e": 5}) == ["e"]


def test_render_shows_the_table_commands_and_totals(tmp_path):
    sweep = load(sweep_config())
    planned = plan_sweep(sweep, Paths(tmp_path))
    text = render(planned, ["my-sweep.yaml"], False)
    assert text.startswith("servesweep plan - sweep: my-sweep.yaml\n")
    assert "2 cells x 1 boots = 2 run_cell jobs: 2 will run; 2 new" in text
    assert "GPU-hours" in text and "default rates" in text
    assert "--enable-expert-parallel" in text
    assert "env: VLLM_SERVER_DEV_MODE=1" in text
    # What every server gets beyond its spec is said once.
    assert "CUDA_VISIBLE_DEVICES of the GPUs its cell holds" in text
    assert "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1" in text
    header = next(line for line in text.splitlines() if line.lstrip().startswith("#"))
    assert header.split()[:4] == ["#", "stack", "model", "variant"]


def test_duration():
    assert duration(45) == "45 s"
    assert duration(750) == "12 min 30 s"
    assert duration(3900) == "1 h 05 min"


def test_the_digest_follows_specs_and_records(tmp_path):
    sweep = load(sweep_config())
    paths = Paths(tmp_path)
    first = state_digest(sweep, paths)
    assert state_digest(sweep, paths) == first
    write(paths, record(sweep, "baseline"))
    second = state_digest(sweep, paths)
    assert second != first
    edited = sweep_config()
    edited["variants"]["ep"]["flags"]["x"] = 1
    assert state_digest(load(edited), paths) != second
    # plan_rates are in no cell's spec, but the plan's estimates read them.
    rated = load(sweep_config() | {"plan_rates": {"boot_s": 90}})
    assert state_digest(rated, paths) != second


def test_paths_are_the_workflows(tmp_path):
    paths = Paths(tmp_path)
    assert paths.cell_json("s", "m", "v", 2) == tmp_path / "results/cells/s/m/v/r2/cell.json"
    assert paths.stack_manifest("s") == Path(tmp_path) / "resources/stacks/s/manifest.json"


def test_boots_interleave_in_the_plan_and_estimates_are_per_boot(tmp_path):
    sweep = load(sweep_config(repeats=3))
    planned = plan_sweep(sweep, Paths(tmp_path))
    assert [(p.variant, p.repeat) for p in planned] == [
        ("baseline", 0),
        ("ep", 0),
        ("baseline", 1),
        ("ep", 1),
        ("baseline", 2),
        ("ep", 2),
    ]
    assert len({p.estimate_s for p in planned}) == 1  # one boot each, not three
    assert totals(planned)["jobs"] == 6 and totals(planned)["cells"] == 2


def test_the_plan_asks_for_the_boots_the_last_verdicts_need(tmp_path):
    from servesweep.sweep.plan import resolve_suggestion

    sweep = load(sweep_config(repeats=2))
    paths = Paths(tmp_path)
    planned = plan_sweep(sweep, paths)
    assert resolve_suggestion(sweep, paths, planned) is None  # no verdicts yet
    (paths.results).mkdir(parents=True)
    (paths.results / "verdicts.csv").write_text(
        "stack,model,variant,level,metric,family,repeats_needed\n"
        "box,m,ep,1,output_throughput,primary,7\n"
        "box,m,ep,100,output_throughput,primary,\n"
        "box,m,ep,1,p99_ttft_ms,secondary,40\n"
    )
    resolve = resolve_suggestion(sweep, paths, planned)
    assert (resolve.repeats, resolve.comparisons) == (7, 1)
    # Five more boots of each of the two cells.
    assert resolve.extra_wall_s == pytest.approx(5 * 2 * planned[0].estimate_s, abs=0.5)
    text = render(planned, ["s.yaml"], False, resolve)
    assert "Set benchmark.repeats: 7 to settle them; only the new boots run" in text
    assert "scatter more than repeats can cure" not in text
    many = resolve._replace(repeats=346)
    assert "scatter more than repeats can cure" in render(planned, ["s.yaml"], False, many)
    # Staged repeats (auto: 2 to 6): the max is what to raise, a fixed count would give every
    # cell as many; a need within the max is the stages' own to meet.
    staged = load(sweep_config(repeats="auto"))
    resolve = resolve_suggestion(staged, paths, plan_sweep(staged, paths))
    assert (resolve.repeats, resolve.staged, resolve.cap) == (7, True, 6)
    text = render(planned, ["s.yaml"], False, resolve)
    assert "Raise benchmark.repeats max to 7 (now 6) to settle them" in text
    assert "Set benchmark.repeats" not in text
    (paths.results / "verdicts.csv").write_text(
        "stack,model,variant,level,metric,family,repeats_needed\n"
        "box,m,ep,1,output_throughput,primary,6\n"
    )
    assert resolve_suggestion(staged, paths, plan_sweep(staged, paths)) is None


def test_the_correctness_pass_is_in_the_estimate(tmp_path):
    config = sweep_config()
    config["correctness"] = {"prompts": 10, "max_tokens": 20}
    with_pass = plan_sweep(load(config), Paths(tmp_path))[0].estimate_s
    without = plan_sweep(load(sweep_config()), Paths(tmp_path))[0].estimate_s
    # 10 prompts x 20 tokens at the default one-stream rate, and half that again.
    assert with_pass - without == pytest.approx(1.5 * 10 * 20 / DEFAULT_STREAM_TOK_S, abs=0.1)


def test_the_correctness_pass_rides_on_the_measured_one_stream_rate(tmp_path):
    # Earlier records measured one stream at 50 tok/s: the pass's estimate uses it, not
    # the default rate (it looked level 1 up by the int 1 and never found it).
    config = sweep_config()
    config["correctness"] = {"prompts": 10, "max_tokens": 20}
    paths = Paths(tmp_path)
    write(paths, record(load(config), "baseline"))
    with_pass = plan_sweep(load(config), paths)[0].estimate_s
    write(paths, record(load(sweep_config()), "baseline"))
    without = plan_sweep(load(sweep_config()), paths)[0].estimate_s
    assert with_pass - without == pytest.approx(1.5 * 10 * 20 / 50.0, abs=0.1)


def test_a_staged_sweep_plans_its_first_stage_and_states_expected_and_worst_boots(tmp_path):
    sweep = load(sweep_config(repeats={"min": 2, "max": 5, "stage": 1}))
    planned = plan_sweep(sweep, Paths(tmp_path))
    assert [(p.variant, p.repeat) for p in planned] == [
        ("baseline", 0),
        ("ep", 0),
        ("baseline", 1),
        ("ep", 1),
    ]
    (cost,) = staged_costs(sweep, Paths(tmp_path), planned)
    boot_s = planned[0].estimate_s
    assert (cost.first, cost.worst, cost.variants) == (4, 10, 1)
    assert cost.first <= cost.expected_big <= cost.expected <= cost.worst
    assert (cost.cv, cost.cv_from, cost.gpus) == (0.05, "default", 2)
    text = render(planned, ["s.yaml"], False, staged=[cost])
    assert "benchmark.repeats is staged" in text
    assert f"10.0 ({duration(10 * boot_s)}, {10 * boot_s * 2 / 3600:.2g} GPU-h)" in text
    # Fixed repeats: no stages.
    assert staged_costs(load(sweep_config(repeats=3)), Paths(tmp_path), planned) == []


def test_a_level_sized_by_precision_is_estimated_at_most_at_its_time_cap(tmp_path):
    fixed = plan_sweep(load(sweep_config()), Paths(tmp_path))[0].estimate_s
    auto = load(sweep_config(num_prompts="auto", precision={"max_s": 30}))
    (first, *_) = plan_sweep(auto, Paths(tmp_path))
    # Two levels, each at most 30 s (+ its warm-up) where 5,000 requests would take hours.
    assert fixed < first.estimate_s <= fixed + 2 * 30 + 60


def test_the_plan_says_when_finished_boots_ran_on_another_machine(tmp_path):
    from servesweep.server.machine import machine_facts
    from servesweep.sweep.plan_text import write_plan

    sweep, paths = load(sweep_config()), Paths(tmp_path)
    manifests(paths)
    here = machine_facts()
    write(paths, record(sweep, "baseline", machine=here))
    out = (tmp_path / "plan.txt", tmp_path / "plan.json")
    assert "Machines:" not in write_plan(sweep, paths, [], False, *out)
    # A resumed archive: the other variant's boot was measured on another box.
    write(paths, record(sweep, "ep", machine={"key": "0123456789ab", "hostname": "gpu-07"}))
    text = write_plan(sweep, paths, [], False, *out)
    assert "Machines: 1 of 2 finished boots ran on another machine than this one" in text
    assert "gpu-07 (0123456789ab)" in text and here["key"] in text
    assert json.loads(out[1].read_text())["machines"].startswith("1 of 2 finished boots")


def test_the_plan_compares_the_stated_sigma_with_the_last_verdicts(tmp_path):
    # num_prompts: auto sized for σ_B 1 % (another machine's) where the last verdicts
    # measured 8 % at level 100: the plan's advice says so beside that level.
    import csv

    from servesweep.sweep.plan_text import write_plan

    config = sweep_config(num_prompts="auto", precision={"boot_cv_pct": {1: 1.0, 100: 1.0}})
    sweep, paths = load(config), Paths(tmp_path)
    manifests(paths)
    paths.results.mkdir(parents=True, exist_ok=True)
    fields = ["family", "level", "components_from", "sigma_boot_pct", "sigma_within_pct"]
    fields += ["per_boot", "within_share"]
    with open(paths.results / "verdicts.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for values in (
            ["primary", "1", "batches", "1.2", "20", "40", "0.9"],
            ["primary", "100", "batches", "8.0", "5", "400", "0.01"],
        ):
            w.writerow(dict(zip(fields, values, strict=True)))
    out = (tmp_path / "plan.txt", tmp_path / "plan.json")
    text = write_plan(sweep, paths, [], False, *out)
    assert "level 100: σ_B 8.0 % here, 8.0x the 1 % stated" in text
    assert "level 1: σ_B 1.2 % here" not in text  # within 2x: nothing to say
    # Fixed requests: no σ_B stated, nothing compared.
    fixed = write_plan(load(sweep_config()), paths, [], False, *out)
    assert "boot scatter comes from" in fixed and "stated" not in fixed


def test_every_measurement_of_a_level_in_a_boot_is_estimated(tmp_path):
    # benchmark.repeats_in_boot: 3 measures each level three times in a boot, each with its
    # own warm-up (the 2026-12-08 noise lease's plan said 1 min 58 s a boot for ~3 min).
    from servesweep.sweep.plan import DEFAULT_BOOT_S, DEFAULT_TEARDOWN_S

    once = plan_sweep(load(sweep_config()), Paths(tmp_path))[0]
    thrice = plan_sweep(load(sweep_config(repeats_in_boot=3)), Paths(tmp_path))[0]
    boot = DEFAULT_BOOT_S + DEFAULT_TEARDOWN_S  # no records: the default rates; no correctness
    assert once.estimate_from == thrice.estimate_from == "default rates"
    levels = once.estimate_s - boot
    assert levels > 0
    assert thrice.estimate_s - boot == pytest.approx(3 * levels)
