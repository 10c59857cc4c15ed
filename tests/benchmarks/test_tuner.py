"""benchmarks/gpu/tuner.py: the one-shot tuner generated from a hunt's sweep file (the same
launches as the hunt's round 1, the committed H200 example never drifting from its hunt),
its pick from summary.csv, the fresh-boot check's sweep; and a CPU rehearsal through real
Snakemake: the tuner run on the fault server, its pick, the check planned."""

import copy
import csv
import importlib.util
import json
import re
import sys
import time

import pytest
import yaml
from fixtures.faults import fault_hunt
from fixtures.paths import ROOT
from fixtures.workflow import run_snakemake

from servesweep.hunt_run.steps import launch
from servesweep.sweep.config import load

SCRIPT = ROOT / "benchmarks" / "gpu" / "tuner.py"
HUNT = ROOT / "config" / "examples" / "h200-vllm-hunt.yaml"
TUNER = ROOT / "config" / "examples" / "h200-vllm-tuner.yaml"
_spec = importlib.util.spec_from_file_location("gpu_tuner", SCRIPT)
tuner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tuner)


def hunt_raw() -> dict:
    return yaml.safe_load(HUNT.read_text())


def hunt_json(raw: dict, variant: str) -> dict:
    """The fields of results/hunt/hunt.json the check reads (docs/records.md), written by
    the hunt's own writer and through JSON, as the file holds them."""
    sweep = load(copy.deepcopy(raw))
    record = {"start": sweep.hunt.spec.start.name, "final": launch(sweep, variant)}
    return json.loads(json.dumps(record))


def test_the_tuner_is_the_hunts_round_one_one_boot_each():
    raw = hunt_raw()
    hunt, mine = load(copy.deepcopy(raw)), load(tuner.tuner_config(raw))
    names = list(raw["hunt"]["candidates"])
    assert list(mine.variants) == ["baseline", *names]
    assert mine.repeats == 1 and mine.hunt is None
    assert mine.analysis.objective == "output_throughput"
    assert mine.analysis.levels == (256, 1024) and mine.analysis.baseline == "baseline"
    assert mine.raw["benchmark"]["workload"] == hunt.raw["benchmark"]["workload"]
    assert mine.levels == hunt.levels and mine.models == hunt.models
    for name in mine.variants:
        theirs = name if name == "baseline" else f"baseline+{name}"
        a = mine.spec("vllm-0.26", "moe-1b", name)
        b = hunt.spec("vllm-0.26", "moe-1b", theirs)
        assert {k for k in a if a[k] != b[k]} <= {"variant"}, name
        assert a["command"] == b["command"] and a["env"] == b["env"], name


def test_the_shipped_tuner_example_is_generated_from_the_hunt(capsys):
    """One source of truth: edit the hunt's candidates, and this fails until the example is
    generated again (the command is in the example's first lines)."""
    assert tuner.main(["config", "config/examples/h200-vllm-hunt.yaml"]) == 0
    assert capsys.readouterr().out == TUNER.read_text()


def test_a_candidate_that_requires_another_is_left_out_and_another_stack_refused():
    raw = hunt_raw()
    raw["hunt"]["candidates"]["big-batch"]["requires"] = "more-seqs"
    assert "big-batch" not in load(tuner.tuner_config(raw)).variants
    raw["stacks"]["other"] = {"kind": "existing", "python": "/usr/bin/python3"}
    raw["hunt"]["candidates"]["eager"]["stack"] = "other"
    with pytest.raises(tuner.TunerError, match=r"hunt\.candidates\.eager\.stack: 'other'"):
        tuner.tuner_config(raw)
    del raw["hunt"]
    with pytest.raises(tuner.TunerError, match="hunt: missing"):
        tuner.tuner_config(raw)


def rows(values: dict, level_key=("256", "1024"), **extra) -> list[dict]:
    """summary.csv rows: variant -> a value per counted level (None: an invalid row)."""
    out = []
    for variant, per_level in values.items():
        for level, value in zip(level_key, per_level, strict=True):
            out.append(
                {
                    "variant": variant,
                    "level": level,
                    "cell_status": "ok",
                    "valid": "False" if value is None else "True",
                    "invalid_reasons": "failed_requests: 3 of 16" if value is None else "",
                    "output_throughput": "" if value is None else str(value),
                    **extra.get(variant, {}),
                }
            )
        out.append({"variant": variant, "level": "1", "valid": "True", "output_throughput": "1e9"})
    return out


def test_the_pick_is_the_highest_geometric_mean_at_the_counted_levels():
    sweep = load(tuner.tuner_config(hunt_raw()))
    pick = tuner.score_rows(
        sweep,
        rows(
            {
                "baseline": (8000, 9000),
                "more-seqs": (8000, 12000),  # 9,798
                "ngram-spec": (11000, 9000),  # 9,950: the pick, not the best at 1024
                "fp8-kv": (20000, None),  # fastest at 256, an invalid row at 1024
            }
        ),
    )
    assert pick.variant == "ngram-spec" and pick.levels == (256, 1024) and pick.higher_is_better
    scores = {s.variant: s for s in pick.scores}
    assert scores["more-seqs"].value == pytest.approx((8000 * 12000) ** 0.5)
    start = (8000 * 9000) ** 0.5
    assert scores["ngram-spec"].gain_pct == pytest.approx(100 * ((11000 * 9000) ** 0.5 / start - 1))
    assert scores["fp8-kv"].value is None and "failed_requests" in scores["fp8-kv"].why
    assert scores["eager"].why == "not measured"


def test_a_failed_boot_is_out_and_the_start_wins_when_nothing_beats_it():
    sweep = load(tuner.tuner_config(hunt_raw()))
    failed = {"cell_status": "failed", "failure_cause": "rejected_args", "failure_stage": "boot"}
    pick = tuner.score_rows(
        sweep,
        rows(
            {"baseline": (9000, 9000), "eager": (4000, 7000), "bad-flag": (None, None)},
            **{"bad-flag": failed},
        ),
    )
    assert pick.variant == "baseline"
    assert {s.variant: s.why for s in pick.scores}["bad-flag"] == "failed: rejected_args (boot)"
    with pytest.raises(tuner.TunerError, match="no variant has a valid value"):
        tuner.score_rows(sweep, rows({"baseline": (None, 9000)}))


def test_a_hunts_round_one_first_boots_are_the_tuners_data():
    sweep = load(tuner.tuner_config(hunt_raw()))
    hunt_rows = [
        {"variant": v, "repeat": r, "level": lv, "valid": "True", "output_throughput": str(x)}
        for v, r, x in (
            ("baseline", "0", 9000),
            ("baseline", "1", 1),  # later boots and rounds are the hunt's, not the tuner's
            ("baseline+eager", "0", 7000),
            ("baseline+ngram-spec", "0", 12000),
            ("baseline+more-seqs", "1", 99000),
            ("baseline+more-seqs+ngram-spec", "0", 99000),
        )
        for lv in ("256", "1024")
    ]
    mine = tuner.hunt_first_boots(sweep, hunt_rows)
    assert sorted({r["variant"] for r in mine}) == ["baseline", "eager", "ngram-spec"]
    pick = tuner.score_rows(sweep, mine)
    assert pick.variant == "ngram-spec"
    assert {s.variant: s.why for s in pick.scores}["more-seqs"] == "not measured"


def test_a_latency_objective_picks_the_lowest():
    raw = hunt_raw()
    raw["hunt"]["objective"]["metric"] = "median_tpot_ms"
    sweep = load(tuner.tuner_config(raw))
    data = [
        {"variant": v, "level": lv, "valid": "True", "median_tpot_ms": str(ms)}
        for v, ms in (("baseline", 50), ("ngram-spec", 14), ("eager", 70))
        for lv in ("256", "1024")
    ]
    assert tuner.score_rows(sweep, data).variant == "ngram-spec"


def test_the_check_boots_the_start_the_pick_and_the_final():
    raw = hunt_raw()
    final = "baseline+more-seqs+async-sched+ngram-spec"
    check = load(tuner.check_config(raw, hunt_json(raw, final), "no-prefix-cache"))
    hunt = load(copy.deepcopy(raw))
    assert list(check.variants) == ["baseline", "tuner-pick", "hunt-final"]
    assert check.repeats == 4 and check.analysis.first_boot == "drop"
    for name, theirs in (
        ("baseline", "baseline"),
        ("tuner-pick", "baseline+no-prefix-cache"),
        ("hunt-final", final),
    ):
        assert (
            check.spec("vllm-0.26", "moe-1b", name)["command"]
            == hunt.spec("vllm-0.26", "moe-1b", theirs)["command"]
        ), name


def test_the_check_boots_a_shared_pick_once_and_a_pick_that_is_the_start_not_at_all():
    raw = hunt_raw()
    same = tuner.check_config(raw, hunt_json(raw, "baseline+ngram-spec"), "ngram-spec")
    assert list(same["variants"]) == ["baseline", "tuner-pick-hunt-final"]
    start = tuner.check_config(raw, hunt_json(raw, "baseline+ngram-spec"), "baseline", 3)
    assert list(start["variants"]) == ["baseline", "hunt-final"]
    assert start["benchmark"]["repeats"] == 3


def test_the_check_refuses_a_hunt_json_of_another_sweep_and_too_few_boots():
    raw = hunt_raw()
    other = hunt_json(raw, "baseline+ngram-spec")
    other["final"]["flags"][0] = ["max-model-len", 4096]
    with pytest.raises(tuner.TunerError, match=r"^hunt\.json: final\.flags/env differ"):
        tuner.check_config(raw, other, "eager")
    with pytest.raises(tuner.TunerError, match="no composition of this hunt"):
        tuner.check_config(raw, {"start": "baseline", "final": {"variant": "x+y"}}, "eager")
    with pytest.raises(tuner.TunerError, match="neither the start nor a candidate"):
        tuner.check_config(raw, hunt_json(raw, "baseline"), "fast")
    with pytest.raises(tuner.TunerError, match="--repeats: 2"):
        tuner.check_config(raw, hunt_json(raw, "baseline"), "eager", 2)


def test_bad_input_is_one_line_and_exit_status_two(tmp_path):
    import subprocess

    bad = tmp_path / "bad.yaml"
    bad.write_text("stacks: [\n")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "config", str(bad)], capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"tuner: config file {bad} line 2: not valid YAML\n"


def test_gpu_minutes_are_each_boots_wall_time_times_its_gpus(tmp_path):
    for variant, boot, end, gpus in (("a", 0, "00:01:30", 1), ("b", 0, "00:02:00", 2)):
        cell = tmp_path / f"results/cells/s/m/{variant}/r{boot}/cell.json"
        cell.parent.mkdir(parents=True)
        times = {
            "started_at": "2026-12-06T00:00:00+00:00",
            "finished_at": f"2026-12-06T{end}+00:00",
        }
        cell.write_text(json.dumps({**times, "spec": {"gpus": gpus}}))
    (tmp_path / "results/cells/s/m/c/r0").mkdir(parents=True)  # cut: no cell.json
    assert tuner.gpu_minutes(tmp_path / "results")[1:] == (2, 3.5, 5.5)


def boot(results, variant: str, minutes: int) -> None:
    cell = results / f"cells/s/m/{variant}/r0/cell.json"
    cell.parent.mkdir(parents=True, exist_ok=True)
    end = f"2026-12-06T00:{minutes:02d}:00+00:00"
    cell.write_text(
        json.dumps(
            {"started_at": "2026-12-06T00:00:00+00:00", "finished_at": end, "spec": {"gpus": 1}}
        )
    )


def test_the_table_puts_each_pick_its_claim_and_the_check_side_by_side(tmp_path, capsys):
    raw = hunt_raw()
    tuner_results, hunt_results, check_results = (tmp_path / n for n in ("t", "h", "c"))
    tuner_results.mkdir()
    data = rows({"baseline": (8000, 9000), "fp8-kv": (10000, 9900)})
    with open(tuner_results / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in data for k in r}))
        w.writeheader()
        w.writerows(data)
    boot(tuner_results, "baseline", 2)
    boot(tuner_results, "fp8-kv", 3)
    record = hunt_json(raw, "baseline+ngram-spec")
    confirm = {
        "role": "confirm",
        "verdict": "confirmed",
        "gain_pct": 31.0,
        "low_pct": 20.5,
        "high_pct": 42.0,
        "level": 1024,
    }
    record["rounds"] = [{"arms": [{"role": "candidate"}]}, {"arms": [confirm]}]
    (hunt_results / "hunt").mkdir(parents=True)
    (hunt_results / "hunt" / "hunt.json").write_text(json.dumps(record))
    for i in range(10):
        boot(hunt_results, f"v{i}", 3)
    verdicts = [
        ("tuner-pick", "256", "4.1", "-1.0", "9.5", "no significant change"),
        ("tuner-pick", "1024", "1.0", "-3.0", "5.2", "no significant change"),
        ("hunt-final", "256", "30.2", "22.0", "39.0", "faster"),
        ("hunt-final", "1024", "", "", "", "inconclusive (too few boots)"),
        ("hunt-final", "1024", "99", "98", "100", "faster"),  # another metric's row, below
    ]
    check_results.mkdir()
    with open(check_results / "verdicts.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["variant", "level", "metric", "kind", "delta_pct", "delta_lo", "delta_hi", "verdict"]
        )
        for i, (v, lv, d, lo, hi, verdict) in enumerate(verdicts):
            metric = "median_ttft_ms" if i == 4 else "output_throughput"
            w.writerow([v, lv, metric, "variant", d, lo, hi, verdict])
    boot(check_results, "baseline", 1)
    tuner_yaml = tmp_path / "tuner.yaml"
    tuner_yaml.write_text(yaml.safe_dump(tuner.tuner_config(raw)))
    args = [str(p) for p in (tuner_yaml, tuner_results, hunt_results, check_results)]
    assert tuner.main(["table", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "| method | pick | its own claim | check at 256 | check at 1024 | GPU-min to pick |"
    )
    assert lines[2] == (
        "| tuner | fp8-kv | +17.3 % (one boot, geometric mean) | +4.1 % [-1.0, +9.5] no "
        "significant change | +1.0 % [-3.0, +5.2] no significant change | 5.0 |"
    )
    assert lines[3] == (
        "| hunt | ngram-spec | +31.0 % [+20.5, +42.0] at 1024, confirmed | +30.2 % [+22.0, "
        "+39.0] faster | inconclusive (too few boots) | 30.0 |"
    )
    assert lines[-1] == "the check: 1 boots, 1.0 GPU-min"
    # One pick, booted once in the check for both: both rows read its verdicts.
    record["final"] = hunt_json(raw, "baseline+fp8-kv")["final"]
    (hunt_results / "hunt" / "hunt.json").write_text(json.dumps(record))
    with open(check_results / "verdicts.csv", "a", newline="") as f:
        csv.writer(f).writerow(
            ["tuner-pick-hunt-final", "256", "output_throughput", "variant", "", "", "", "x"]
        )
    assert tuner.main(["table", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[3] for line in lines[2:4]] == ["x", "x"]


# The rehearsal: a hunt of the fault server (command engine) whose right picks are known.
# Each candidate divides the per-token gap; `needs` requires `fast` (not on the start alone).
CANDIDATES = {
    "fast": {"flags": {"speedup": 1.6}, "description": "faster by 60 %"},
    "crash": {"flags": {"fault": "die_at", "at": 4, "signature": "nccl"}},
    "needs": {"flags": {"speedup": 3.0}, "requires": "fast"},
}


def rehearsal_hunt() -> dict:
    start = {"greedy": True, "gap-ms": 20, "boot-s": 0.2, "seed": 1}
    return fault_hunt(
        start,
        candidates=CANDIDATES,
        objective={"levels": [4]},
        boots={"min": 2, "max": 2},
        budget={"boot_minutes": 0.1},
    )


def dry_run(workdir, configfile):
    result = run_snakemake(workdir, "-n", "--cores", "1", "--configfile", str(configfile))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sorted(
        re.findall(r"rule run_cell:.*?variant=([\w.-]+), repeat=(\d+)", result.stdout, re.S)
    )


@pytest.mark.workflow
@pytest.mark.slow
def test_cpu_rehearsal_runs_the_tuner_picks_and_plans_the_check(tmp_path, capsys):
    hunt = tmp_path / "hunt.yaml"
    hunt.write_text(yaml.safe_dump(rehearsal_hunt(), sort_keys=False))
    run = tmp_path / "tuner"
    run.mkdir()
    assert tuner.main(["config", str(hunt)]) == 0
    (run / "tuner.yaml").write_text(capsys.readouterr().out)
    began = time.monotonic()
    result = run_snakemake(
        run,
        "--cores",
        "1",
        "results/report.html",
        "--configfile",
        str(run / "tuner.yaml"),
        timeout=300,
    )
    wall = time.monotonic() - began
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # One boot each of the start and the two candidates that go on it alone.
    boots = sorted(p.parent.parent.name for p in run.glob("results/cells/*/*/*/r*/cell.json"))
    assert boots == ["baseline", "crash", "fast"], boots
    assert not list(run.glob("results/cells/*/*/*/r1"))

    assert tuner.main(["pick", str(run / "tuner.yaml"), str(run / "results/summary.csv")]) == 0
    text = capsys.readouterr().out
    assert text.rstrip().endswith("pick: fast"), text
    assert re.search(r"crash +out: failed: nccl", text), text
    assert re.search(r"fast +[\d,.]+  \(\+[\d.]+ % against baseline\)", text), text
    assert tuner.main(["minutes", str(run / "results")]) == 0
    assert f"| {run / 'results'} | 3 | " in capsys.readouterr().out  # 3 boots, no GPU
    with open(run / "results/summary.csv", newline="") as f:
        assert {r["variant"] for r in csv.DictReader(f)} == {"baseline", "crash", "fast"}

    # The hunt's final (say it adopted fast, then needs), and the check's plan.
    final = tmp_path / "hunt.json"
    final.write_text(json.dumps(hunt_json(rehearsal_hunt(), "baseline+fast+needs")))
    assert tuner.main(["check", str(hunt), str(final), "fast", "--repeats", "3"]) == 0
    check = tmp_path / "check"
    check.mkdir()
    (check / "check.yaml").write_text(capsys.readouterr().out)
    planned = dry_run(check, check / "check.yaml")
    assert planned == sorted(
        (v, str(r)) for v in ("baseline", "tuner-pick", "hunt-final") for r in range(3)
    )
    assert wall < 60, f"the tuner's sweep took {wall:.0f} s"


@pytest.mark.workflow
def test_the_h200_check_plans_without_a_gpu(tmp_path, capsys):
    """`snakemake -n` on a check generated for the H200 (the shipped tuner is planned with
    every example, tests/workflow/test_examples.py)."""
    raw = hunt_raw()
    final = tmp_path / "hunt.json"
    final.write_text(json.dumps(hunt_json(raw, "baseline+more-seqs+ngram-spec")))
    assert tuner.main(["check", str(HUNT), str(final), "fp8-kv"]) == 0
    (tmp_path / "check.yaml").write_text(capsys.readouterr().out)
    planned = dry_run(tmp_path, tmp_path / "check.yaml")
    assert planned == sorted(
        (v, str(r)) for v in ("baseline", "tuner-pick", "hunt-final") for r in range(4)
    )
