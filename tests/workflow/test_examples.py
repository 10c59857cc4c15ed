"""The shipped example sweeps: each passes schema and semantic validation, plans with real
Snakemake, and its stacks point at spec files that pin what they claim."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from fixtures.configs import GOLDEN_EXAMPLES
from fixtures.paths import ROOT
from fixtures.workflow import run_snakemake

from servesweep.hunt.spec import applicable
from servesweep.hunt.state import replay, worst_case
from servesweep.sweep.config import load_file

EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))
GPU_EXAMPLES = ["kimi-k2.5-eagle3.yaml", "glm5-nvfp4.yaml"]
# The seeds' hand searches as hunts (docs/hunt.md).
HUNT_EXAMPLES = ["kimi-k2.5-hunt.yaml", "glm5-nvfp4-hunt.yaml"]
# The examples run on a lent GPU (benchmarks/gpu/gpu_run.sh): transformers serve on CUDA.
H200_EXAMPLE = "h200-transformers.yaml"
H200_RATE_EXAMPLE = "h200-rate-slo.yaml"
# Real SGLang 0.5.17 on the lent H200 (benchmarks/gpu/run.sh sglang; docs/sglang-h200.md).
H200_SGLANG_EXAMPLE = "h200-sglang.yaml"
# A hunt on real vLLM on the H200 (not yet run there).
H200_VLLM_HUNT = "h200-vllm-hunt.yaml"
# The one-shot tuner beside it, generated from it (benchmarks/gpu/tuner.py; its tests:
# tests/benchmarks/test_tuner.py).
H200_VLLM_TUNER = "h200-vllm-tuner.yaml"
# SGLang and vLLM in one sweep on one GPU (benchmarks/gpu/start.sh engines;
# docs/engines-h200.md).
H200_ENGINES_EXAMPLE = "h200-engines.yaml"


def test_the_examples_are_shipped():
    assert {p.name for p in EXAMPLES} == {
        *GPU_EXAMPLES,
        *HUNT_EXAMPLES,
        H200_EXAMPLE,
        H200_RATE_EXAMPLE,
        "vllm-cpu.yaml",
        "cpu-rate-slo.yaml",
        "h200-vllm.yaml",
        H200_SGLANG_EXAMPLE,
        H200_VLLM_HUNT,
        H200_VLLM_TUNER,
        "cpu-hunt.yaml",
        "h200-sglang-noise.yaml",
        "h200-vllm-noise.yaml",
        "h200-sglang-auto.yaml",
        H200_ENGINES_EXAMPLE,
    }


def test_the_vllm_hunt_leaves_first_boots_out_and_fits_its_budget():
    """vLLM compiles on first use: every configuration's r0 is uncounted from the start,
    so the screen's first step is 2 counted boots and the first of the start and of the
    first candidate; the budget lets the hunt start though its worst case is over it."""
    spec = load_file(ROOT / "config" / "examples" / H200_VLLM_HUNT).hunt.spec
    assert spec.compiles_on_first_use and spec.first_boot == "auto"
    assert spec.design == "screen" and spec.screen_boots == 2
    first = replay(spec, {})
    assert not first.done and len(first.needed) == 2 * 3
    assert {k.variant for k in first.needed} == {"baseline", "baseline+more-seqs"}
    assert {k.boot for k in first.needed} == {0, 1, 2}
    assert worst_case(spec).boots > spec.budget_boots == 80


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_and_resolves(path):
    sweep = load_file(path)
    assert "baseline" in sweep.variants
    for stack, model, variant in sweep.cells:
        spec = sweep.spec(stack, model, variant)
        assert spec["command"][1:3] in (
            ["-m", "sglang.launch_server"],
            ["-m", "vllm.entrypoints.openai.api_server"],
            ["serve", "<model>"],  # transformers serve
        ), spec["command"]
    for stack in sweep.stacks.values():
        spec_file = stack.get("requirements") or stack.get("env_file")
        if spec_file:
            assert (ROOT / spec_file).is_file(), spec_file


@pytest.mark.parametrize("name", GPU_EXAMPLES + HUNT_EXAMPLES)
def test_gpu_examples_sweep_the_seed_levels_on_both_cuda_stacks(name):
    sweep = load_file(ROOT / "config" / "examples" / name)
    assert sweep.raw["benchmark"]["levels"] == [1, 10, 256, 1024]
    assert {s["requirements"] for s in sweep.stacks.values()} == {
        "envs/sglang-cu128.txt",
        "envs/sglang-cu130.txt",
    }
    assert all(sweep.gpus(v) == 8 for v in sweep.variants)
    assert all(v["engine"] == "sglang" for v in sweep.variants.values())


def test_h200_example_sweeps_two_stacks_and_two_gpu_variants_on_one_gpu():
    sweep = load_file(ROOT / "config" / "examples" / H200_EXAMPLE)
    assert sweep.raw["benchmark"]["levels"] == [1, 10, 256, 1024]
    assert sweep.raw["benchmark"]["repeats"] >= 2
    assert len(sweep.stacks) == 2
    assert all(s["kind"] == "existing" for s in sweep.stacks.values())
    assert all(sweep.gpus(v) == 1 for v in sweep.variants)
    for stack, model, variant in sweep.cells:
        command = sweep.spec(stack, model, variant)["command"]
        assert command[command.index("--device") + 1] == "cuda", command


def test_h200_rate_example_prices_gpus_under_mlperfs_llama2_server_slo():
    sweep = load_file(ROOT / "config" / "examples" / H200_RATE_EXAMPLE)
    assert [lv.value for lv in sweep.levels[:3]] == [8, 32, 128] and sweep.load_kind == "rate"
    raw = yaml.safe_load((ROOT / "config" / "examples" / H200_RATE_EXAMPLE).read_text())
    assert raw["slo"] == {"ttft_ms": 2000, "tpot_ms": 200}  # MLPerf Llama-2-70B, server
    assert raw["cost"]["usd_per_gpu_hour"] > 0
    # The same server as the concurrency example: only the load differs.
    other = load_file(ROOT / "config" / "examples" / H200_EXAMPLE)
    for variant in sweep.variants:
        mine = sweep.spec("tf-5.17", "moe-1b", variant)["command"]
        assert mine == other.spec("tf-5.17", "moe-1b", variant)["command"]


def test_h200_sglang_example_is_the_seeds_single_gpu_tries():
    # What each variant adds to SGLang's defaults, exactly (the launch line that worked on
    # the H200 first), on one GPU, two boots a cell, the seeds' four levels.
    sweep = load_file(ROOT / "config" / "examples" / H200_SGLANG_EXAMPLE)
    assert sweep.raw["benchmark"]["levels"] == [1, 10, 256, 1024] and sweep.repeats == 2
    assert [s["kind"] for s in sweep.stacks.values()] == ["existing"]
    base = "--sampling-backend pytorch --enable-metrics --mem-fraction-static 0.85"
    added = {
        "baseline": "",
        "cuda-graph-bs128": " --cuda-graph-max-bs 128",
        "no-custom-ar": " --disable-custom-all-reduce",
        "sbo": " --enable-single-batch-overlap",
        "ngram-spec": " --speculative-algorithm NGRAM --attention-backend triton",
        "moe-triton": " --moe-runner-backend triton",
        "bad-flag": " --no-such-flag",
    }
    assert list(sweep.variants) == list(added)
    for stack, model, variant in sweep.cells:
        spec = sweep.spec(stack, model, variant)
        assert spec["command"][1:9] == [
            "-m",
            "sglang.launch_server",
            "--model-path",
            "<model>",
            "--host",
            "127.0.0.1",
            "--port",
            "<port>",
        ]
        assert " ".join(spec["command"][9:]) == base + added[variant], variant
        assert spec["gpus"] == 1 and spec["env"] == {}
    # Speculative decoding must give the baseline's answers: the correctness pass checks.
    assert sweep.must_match("ngram-spec") and not sweep.must_match("cuda-graph-bs128")


def test_h200_sglang_noise_example_splits_boot_and_in_boot_scatter():
    # The noise measurement: the same stack, model, workload and launch lines as the
    # SGLang example, its baseline and its TP-1 no-op only, three boots of three in-boot
    # measurements at 1, 10 and 256 streams, and 256 sent in two waves (a steady window).
    sweep = load_file(ROOT / "config" / "examples" / "h200-sglang-noise.yaml")
    full = load_file(ROOT / "config" / "examples" / H200_SGLANG_EXAMPLE)
    assert list(sweep.variants) == ["baseline", "no-custom-ar"]
    assert sweep.repeats == 3 and sweep.raw["benchmark"]["repeats_in_boot"] == 3
    assert sweep.raw["benchmark"]["levels"] == [1, 10, 256]
    assert sweep.models == full.models and sweep.stacks == full.stacks
    assert sweep.raw["benchmark"]["workload"] == full.raw["benchmark"]["workload"]
    for stack, model, variant in sweep.cells:
        assert (
            sweep.spec(stack, model, variant)["command"]
            == full.spec(stack, model, variant)["command"]
        )
    prompts = sweep.raw["benchmark"]["num_prompts"]
    assert [max(prompts["min"], round(prompts["per_level"] * lv)) for lv in (1, 10, 256)] == [
        64,
        64,
        512,
    ]


def test_h200_vllm_noise_example_measures_as_the_sglang_one_with_vllms_launch_line():
    # vLLM's half of issue 38 stage 1: the SGLang noise sweep's levels, boots, in-boot
    # measurements, requests and workload (so the engines' components compare), vLLM's
    # example baseline launched exactly as there, and the A/A beside it.
    sweep = load_file(ROOT / "config" / "examples" / "h200-vllm-noise.yaml")
    sglang = load_file(ROOT / "config" / "examples" / "h200-sglang-noise.yaml")
    vllm = load_file(ROOT / "config" / "examples" / "h200-vllm.yaml")
    assert list(sweep.variants) == ["baseline", "no-custom-ar"]
    assert sweep.raw["engine"] == "vllm" and sweep.stacks == vllm.stacks
    assert sweep.models == sglang.models
    assert sweep.raw["benchmark"] == sglang.raw["benchmark"]
    assert sweep.repeats == sglang.repeats == 3
    assert sweep.spec(*sweep.cells[0])["command"] == vllm.spec(*vllm.cells[0])["command"]
    assert vllm.cells[0][2] == "baseline"
    aa = sweep.spec("vllm-0.26", "moe-1b", "no-custom-ar")["command"]
    assert aa == sweep.spec(*sweep.cells[0])["command"] + ["--disable-custom-all-reduce"]


def test_h200_engines_example_makes_the_engine_a_variant_axis():
    # One stack, one model, one workload: SGLang's defaults (the baseline) and vLLM's, each
    # launched exactly as its own example's baseline, every boot interleaved in one sweep.
    sweep = load_file(ROOT / "config" / "examples" / H200_ENGINES_EXAMPLE)
    sglang = load_file(ROOT / "config" / "examples" / H200_SGLANG_EXAMPLE)
    vllm = load_file(ROOT / "config" / "examples" / "h200-vllm.yaml")
    assert list(sweep.variants) == ["baseline", "vllm"]
    assert [sweep.variant(v)["engine"] for v in sweep.variants] == ["sglang", "vllm"]
    (stack,) = sweep.stacks
    assert sweep.stacks[stack]["python"] == "/tmp/stack-engines/bin/python3"
    assert sweep.models == sglang.models == vllm.models
    assert sweep.raw["benchmark"]["workload"] == sglang.raw["benchmark"]["workload"]
    assert sweep.analysis.baseline == "baseline"
    for variant, other in (("baseline", sglang), ("vllm", vllm)):
        spec, theirs = (
            sweep.spec(stack, "moe-1b", variant),
            other.spec(next(iter(other.stacks)), "moe-1b", "baseline"),
        )
        assert spec["command"] == theirs["command"] and spec["env"] == theirs["env"]
    # Interleaved: every cell's r0, then every r1, ...; 3 boots a side, a 4th only if open.
    assert [(v, r) for _, _, v, r in sweep.jobs] == [
        ("baseline", 0),
        ("vllm", 0),
        ("baseline", 1),
        ("vllm", 1),
        ("baseline", 2),
        ("vllm", 2),
    ]
    assert (sweep.repeats_rule.min, sweep.repeats_rule.max) == (3, 4)
    # Level 256 in six waves (stage 1's two waves did not measure it).
    assert sweep.raw["benchmark"]["levels"] == [1, 10, 256]
    assert [sweep.num_prompts(lv) for lv in sweep.levels] == [64, 64, 6 * 256]


def requirement_pins(path: Path) -> dict[str, str]:
    """name -> version (or URL) from a requirements file, options and comments skipped."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        if " @ " in line:
            name, url = line.split(" @ ", 1)
            version = re.search(r"-(\d[^-]*)-cp", url.rsplit("/", 1)[-1]).group(1)
            pins[name.strip().lower()] = version
        else:
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


def test_sglang_stacks_differ_in_cuda_only():
    cu128 = requirement_pins(ROOT / "envs" / "sglang-cu128.txt")
    cu130 = requirement_pins(ROOT / "envs" / "sglang-cu130.txt")
    assert cu128.keys() == cu130.keys()
    # The same versions once the CUDA local label is dropped...
    assert {k: v.split("+")[0] for k, v in cu130.items()} == cu128
    # ...and the CUDA 13 stack takes every CUDA-built wheel in its +cu130 build.
    for name in ("torch", "torchaudio", "torchvision", "sgl-kernel"):
        assert cu130[name].endswith("+cu130"), name
    assert (
        "--extra-index-url https://download.pytorch.org/whl/cu130"
        in (ROOT / "envs" / "sglang-cu130.txt").read_text()
    )
    assert cu128["sglang"] == "0.5.9"


def snakemake_dry_run(workdir: Path, configfile: Path) -> subprocess.CompletedProcess:
    args = ("-n", "--cores", "1", "--configfile", str(configfile))
    return run_snakemake(workdir, *args, timeout=300)


@pytest.mark.workflow
@pytest.mark.parametrize(
    # test_sweep_file.py plans the golden examples in a user's checkout (every cell and
    # command exactly, every boot a job): not planned twice.
    "path",
    [p for p in EXAMPLES if p.name not in GOLDEN_EXAMPLES],
    ids=lambda p: p.name,
)
def test_example_plans_with_snakemake(tmp_path, path):
    # Stacks' spec files are inputs, relative to the working directory.
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    result = snakemake_dry_run(tmp_path, path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sweep = load_file(path)
    planned = re.findall(r"^rule run_cell:", result.stdout, flags=re.M)
    if sweep.hunt:  # the hunt's first step
        spec = sweep.hunt.spec
        first = replay(spec, {}).needed
        if spec.design == "screen":  # its first step: the start and the first candidate,
            # each on boots.screen counted boots and its first boot (left out unless keep)
            each, arms = spec.screen_boots + (spec.first_boot != "keep"), 1
        else:  # round 1's first look: the start and every candidate on it
            # An engine that compiles on first use has each configuration's r0 left out.
            uncounted = spec.first_boot == "drop" or (
                spec.first_boot == "auto" and spec.compiles_on_first_use
            )
            each, arms = spec.boots_min + uncounted, len(applicable(spec, (), ()))
        assert len(planned) == len(first) == each * (1 + arms)
        stacks = {sweep.hunt.stack_of(k.variant) for k in first}  # the stacks these boot on
    else:
        assert len(planned) == len(sweep.jobs) == len(sweep.cells) * sweep.repeats
        stacks = set(yaml.safe_load(path.read_text())["stacks"])
    for stack in stacks:
        assert f"stack={stack}" in result.stdout


SEED_COMMANDS = {
    # The first seed's last launch (EP with the FlashInfer all-to-all), --enable-metrics
    # carried from the start so every arm pays the same.
    ("kimi-k2.5-hunt.yaml", "baseline+cuda-graph-bs128+no-custom-ar+cutlass-moe+ep-flashinfer"): (
        "--tp 8 --trust-remote-code --enable-metrics --cuda-graph-max-bs 128 "
        "--disable-custom-all-reduce --moe-runner-backend flashinfer_cutlass "
        "--moe-a2a-backend flashinfer",
        {},
        "sglang-cu128",
    ),
    # The second seed's run_tp8_ep8.sh: EP8 on top of MSCCL++.
    ("glm5-nvfp4-hunt.yaml", "baseline+mscclpp+ep8"): (
        "--tp 8 --trust-remote-code --moe-runner-backend flashinfer_cutlass --enable-metrics "
        "--enable-mscclpp --ep-size 8 --moe-a2a-backend flashinfer",
        {"SGLANG_MSCCLPP_MAX_BYTES": "4MB"},
        "sglang-cu128",
    ),
    ("glm5-nvfp4-hunt.yaml", "baseline+mscclpp+cuda13"): (
        "--tp 8 --trust-remote-code --moe-runner-backend flashinfer_cutlass --enable-metrics "
        "--enable-mscclpp",
        {"SGLANG_MSCCLPP_MAX_BYTES": "4MB"},
        "sglang-cu130",
    ),
}


@pytest.mark.parametrize("name, variant", list(SEED_COMMANDS))
def test_hunt_examples_compose_the_seeds_commands(name, variant):
    sweep = load_file(ROOT / "config" / "examples" / name)
    flags, env, stack = SEED_COMMANDS[(name, variant)]
    assert sweep.hunt.stack_of(variant) == stack
    spec = sweep.spec(stack, sweep.hunt.model, variant)
    assert " ".join(spec["command"]).endswith(flags)
    assert spec["env"] == env and spec["gpus"] == 8


@pytest.mark.workflow
@pytest.mark.parametrize("name", HUNT_EXAMPLES)
def test_hunt_example_plan_shows_round_one_and_the_worst_case(tmp_path, name):
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    path = ROOT / "config" / "examples" / name
    result = run_snakemake(
        tmp_path, "results/plan.txt", "--cores", "1", "--configfile", str(path), timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = (tmp_path / "results" / "plan.txt").read_text()
    sweep = load_file(path)
    spec = sweep.hunt.spec
    boots = worst_case(spec).boots
    hours = boots * spec.gpu_hours_per_boot
    assert f"worst case of the whole hunt: {boots} boots, {hours:.2f} GPU-hours" in text
    assert f"budget: {spec.budget_gpu_hours:g} GPU-hours" in text
    first = sorted({k.variant for k in replay(spec, {}).needed})
    assert "baseline" in first and len(first) == (
        2 if spec.design == "screen" else 1 + len(applicable(spec, (), ()))
    )
    for variant in first:  # the plan's launch line of each configuration it boots first
        command = sweep.spec(sweep.hunt.stack_of(variant), sweep.hunt.model, variant)["command"]
        assert command[7:9] == ["--port", "<port>"]
        line = text.split(f" / {variant}\n     $ ", 1)[1].split("\n", 1)[0]
        assert line.endswith("--port <auto> " + shlex.join(command[9:])), line
