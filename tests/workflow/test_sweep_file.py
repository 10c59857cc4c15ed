"""A sweep file means exactly what it says, through real Snakemake run the way users run it.

Every test works in a copy of the repository's layout (config/config.yaml included), so a
default sweep that leaked into a user's `--configfile` would show up here: that is how the
bug was found (`--configfile config/examples/kimi-k2.5-eagle3.yaml` planned 30 cells, the
default's CPU stack, synthetic model and continuous-batching variant among them, and every
baseline carried `--device cpu`).
"""

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from fixtures.configs import GOLDEN_EXAMPLES, stub_model
from fixtures.paths import ROOT
from fixtures.workflow import planned_jobs, run_snakemake

EXAMPLES = ROOT / "config" / "examples"
FAULT_SERVER = ROOT / "tests" / "fixtures" / "fault_server.py"

pytestmark = pytest.mark.workflow

# The first seed's launch, verbatim (shared/seeds/000: "The Last Resort: Launching Expert
# Parallelism on Blackwell PCIe"), without its nohup and log redirection.
SEED_EP_COMMAND = (
    "/root/ml-env/bin/python3 -m sglang.launch_server --model /shared/kimi-k2.5-int4 "
    "--port 30000 --tp 8 --trust-remote-code --host 0.0.0.0 --cuda-graph-max-bs 128 "
    "--disable-custom-all-reduce --moe-a2a-backend flashinfer "
    "--moe-runner-backend flashinfer_cutlass"
)

KIMI_BASE = "--tp 8 --trust-remote-code --cuda-graph-max-bs 128 --enable-metrics"
KIMI_FLAGS = {
    "baseline": KIMI_BASE,
    "no-custom-ar": f"{KIMI_BASE} --disable-custom-all-reduce",
    "ep-flashinfer": f"{KIMI_BASE} --disable-custom-all-reduce --moe-a2a-backend flashinfer "
    "--moe-runner-backend flashinfer_cutlass",
    "eagle3": f"{KIMI_BASE} --speculative-algorithm EAGLE3 --speculative-draft-model-path "
    "/shared/kimi-k2.5-eagle3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4",
}
GLM_BASE = "--tp 8 --trust-remote-code --moe-runner-backend flashinfer_cutlass --enable-metrics"
GLM_FLAGS = {
    "baseline": GLM_BASE,
    "mscclpp": f"{GLM_BASE} --enable-mscclpp",
    "sbo": f"{GLM_BASE} --enable-mscclpp --enable-single-batch-overlap",
    "ep8": f"{GLM_BASE} --enable-mscclpp --ep-size 8 --moe-a2a-backend flashinfer",
    "piecewise-cuda-graph": f"{GLM_BASE} --enable-piecewise-cuda-graph",
}
SGLANG = "-m sglang.launch_server --model-path {model} --host 127.0.0.1 --port <auto>"
VLLM = "-m vllm.entrypoints.openai.api_server --model {model} --host 127.0.0.1 --port <auto>"


def golden(example: str, workdir: Path) -> dict[tuple[str, str, str], tuple[str, dict]]:
    """(stack, model, variant) -> (launch command, env) as written here by hand."""
    stacks = workdir / "resources" / "stacks"
    if example == "vllm-cpu.yaml":
        python = stacks / "vllm-cpu" / "venv" / "bin" / "python"
        model = (workdir / "resources" / "models" / "synthetic" / "files").resolve()
        head = f"{python} {VLLM.format(model=model)}"
        env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
        return {
            ("vllm-cpu", "synthetic", "baseline"): (head, env),
            ("vllm-cpu", "synthetic", "max-num-seqs-4"): (f"{head} --max-num-seqs 4", env),
        }
    if example == "kimi-k2.5-eagle3.yaml":
        name, model, flags, env = "kimi-k2.5-int4", "/shared/kimi-k2.5-int4", KIMI_FLAGS, {}
    else:
        name, model, flags = "glm5-nvfp4", "/shared/glm-5-nvfp4", GLM_FLAGS
        env = {"SGLANG_MSCCLPP_MAX_BYTES": "4MB"}
    out = {}
    for stack in ("sglang-cu128", "sglang-cu130"):
        python = stacks / stack / "venv" / "bin" / "python"
        for variant, variant_flags in flags.items():
            variant_env = {} if variant in ("baseline", "piecewise-cuda-graph") else env
            command = f"{python} {SGLANG.format(model=model)} {variant_flags}"
            out[(stack, name, variant)] = (command, variant_env)
    return out


def user_checkout(tmp_path: Path) -> Path:
    """A working directory laid out like the repository: the default sweep is there."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "config", work / "config")
    shutil.copytree(ROOT / "envs", work / "envs")
    return work


def plan(work: Path, *args: str) -> dict:
    result = run_snakemake(work, "--cores", "1", "results/plan.json", *args, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((work / "results" / "plan.json").read_text())


def run_cells(result) -> list[tuple[str, str, str]]:
    """The distinct cells of the planned run_cell jobs (each boot is a job)."""
    return sorted(
        {
            (w["stack"], w["model"], w["variant"])
            for rule, w in planned_jobs(result)
            if rule == "run_cell"
        }
    )


@pytest.mark.parametrize("example", GOLDEN_EXAMPLES)
def test_an_example_sweep_is_exactly_its_own_cells_and_commands(tmp_path, example):
    work = user_checkout(tmp_path)
    path = str(EXAMPLES / example)
    expected = golden(example, work)

    boots = 1 if example == "vllm-cpu.yaml" else 3
    dry = run_snakemake(work, "-n", "--cores", "1", "results/report.html", "--configfile", path)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert run_cells(dry) == sorted(expected)
    # Every boot of every cell is its own job (this is the example's Snakemake plan that
    # test_examples.py leaves to this test).
    assert sum(rule == "run_cell" for rule, _ in planned_jobs(dry)) == len(expected) * boots
    assert "stack=cpu" not in dry.stdout  # the default sweep's stack did not leak in

    planned = plan(work, "--configfile", path)
    assert planned["is_default"] is False and planned["sweep_files"] == [path]
    got = {
        (c["stack"], c["model"], c["variant"]): (c["command"], c["env"]) for c in planned["cells"]
    }
    assert sorted(got) == sorted(expected)
    assert len(planned["cells"]) == len(expected) * boots
    assert [c["repeat"] for c in planned["cells"]] == sorted(list(range(boots)) * len(expected))
    for key, (command, env) in expected.items():
        assert got[key][0] == shlex.split(command), key
        assert got[key][1] == env, key
    assert all(c["gpus"] == (0 if example == "vllm-cpu.yaml" else 8) for c in planned["cells"])


def test_the_seeds_expert_parallel_launch_is_the_kimi_ep_variant(tmp_path):
    work = user_checkout(tmp_path)
    planned = plan(work, "--configfile", str(EXAMPLES / "kimi-k2.5-eagle3.yaml"))
    cell = next(
        c
        for c in planned["cells"]
        if (c["stack"], c["variant"]) == ("sglang-cu128", "ep-flashinfer")
    )

    def options(argv: list[str]) -> dict[str, str | bool]:
        out, i = {}, 0
        while i < len(argv):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            out[argv[i]] = argv[i + 1] if has_value else True
            i += 2 if has_value else 1
        return out

    seed = shlex.split(SEED_EP_COMMAND)
    ours = cell["command"]
    assert ours[1:3] == seed[1:3] == ["-m", "sglang.launch_server"]
    seed_opts, our_opts = options(seed[3:]), options(ours[3:])
    # The differences, each deliberate: SGLang's `--model` is an alias of `--model-path`;
    # host and port come from the sweep's server section (loopback, a free port); the
    # example's baseline adds --enable-metrics so every variant pays the same.
    seed_opts["--model-path"] = seed_opts.pop("--model")
    seed_opts.update({"--host": "127.0.0.1", "--port": "<auto>", "--enable-metrics": True})
    assert our_opts == seed_opts


def small_user_sweep(work: Path) -> Path:
    """What a user writes: a command-engine server, its own model, a baseline with flags."""
    sweep = {
        "stacks": {"here": {"kind": "existing", "python": sys.executable}},
        "models": {"mini": stub_model()},
        "engine": "command",
        "server": {"boot_timeout_s": 20, "teardown_grace_s": 3},
        "variants": {
            "baseline": {
                "command": f"{{python}} {FAULT_SERVER} --host {{host}} --port {{port}}",
                "flags": {"tokens": 4},
            },
            "slow": {"extends": "baseline", "flags": {"gap-ms": 5}},
        },
        "benchmark": {
            "levels": [1, 2],
            "warmup": 0,
            "num_prompts": {"per_level": 1, "min": 4},
            "workload": {"kind": "random", "input_tokens": 8, "output_tokens": 4, "seed": 1},
            "stall_timeout_s": 5,
        },
    }
    path = work / "my-sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def test_a_users_sweep_runs_as_written_and_the_plan_shows_what_the_job_launched(tmp_path):
    work = user_checkout(tmp_path)
    path = str(small_user_sweep(work))
    head = f"{sys.executable} {FAULT_SERVER} --host 127.0.0.1 --port"
    expected = {"baseline": "--tokens 4", "slow": "--tokens 4 --gap-ms 5"}

    planned = plan(work, "--configfile", path)
    assert [(c["stack"], c["model"], c["variant"], c["repeat"]) for c in planned["cells"]] == [
        ("here", "mini", "baseline", 0),
        ("here", "mini", "slow", 0),
    ]
    for c in planned["cells"]:
        assert c["command"] == shlex.split(f"{head} <auto> {expected[c['variant']]}")

    run = run_snakemake(work, "--cores", "1", "results/report.html", "--configfile", path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for variant, flags in expected.items():
        cell = json.loads((work / f"results/cells/here/mini/{variant}/r0/cell.json").read_text())
        assert cell["status"] == "ok", cell["failure"]
        # What the job really launched: the plan's command with the port it picked.
        assert cell["command_str"] == f"{head} {cell['port']} {flags}"
    assert not (work / "resources" / "stacks" / "cpu").exists()

    # Snakemake's own report wraps ours, with the summary and the verdicts.
    wrapped = run_snakemake(work, "--report", str(work / "smk.html"), "--configfile", path)
    assert wrapped.returncode == 0, wrapped.stdout[-2000:] + wrapped.stderr[-2000:]
    text = (work / "smk.html").read_text()
    assert all(name in text for name in ("report.html", "summary.csv", "verdicts.csv"))

    # After the run the plan says so, with estimates from the cells' own records.
    again = plan(work, "--configfile", path)
    assert [c["state"] for c in again["cells"]] == ["current", "current"]
    assert {c["estimate_from"] for c in again["cells"]} == {"this cell's records"}
    assert again["totals"]["to_run"] == 0


def test_config_overrides_apply_on_top_of_whichever_sweep_is_in_force(tmp_path):
    work = user_checkout(tmp_path)
    path = str(small_user_sweep(work))

    # On the user's file: the override lands, nothing of the default appears.
    planned = plan(work, "--config", "benchmark={levels: [1, 2, 8]}", "--configfile", path)
    assert {c["variant"] for c in planned["cells"]} == {"baseline", "slow"}
    dry = run_snakemake(
        work, "-n", "--cores", "1", "--config", "server={gpus: 1}", "--configfile", path
    )
    assert dry.returncode == 0 and run_cells(dry) == [
        ("here", "mini", "baseline"),
        ("here", "mini", "slow"),
    ]

    # No file: the default sweep, with the override merged into it.
    planned = plan(work, "--config", "variants={extra: {extends: baseline}}")
    assert planned["is_default"] is True
    assert planned["sweep_files"] == [str(work / "config" / "config.yaml")]
    assert [c["variant"] for c in planned["cells"] if c["repeat"] == 0] == [
        "baseline",
        "continuous-batching",
        "extra",
    ]
    assert all(c["command"][-2:] != ["--device", "cpu"] or True for c in planned["cells"])
    assert all("--device" in c["command"] for c in planned["cells"])


def test_a_broken_default_sweep_is_one_line_naming_it(tmp_path):
    # (A broken --configfile is read by Snakemake itself before the workflow starts, and
    # Snakemake's own message is what the user sees then.)
    work = user_checkout(tmp_path)
    (work / "config" / "config.yaml").write_text("stacks: [unclosed\n")
    result = run_snakemake(work, "-n", "--cores", "1")
    lines = [ln for ln in (result.stdout + result.stderr).splitlines() if "config file" in ln]
    assert result.returncode != 0
    assert lines == [f"config file {work / 'config' / 'config.yaml'} line 2: not valid YAML"]
