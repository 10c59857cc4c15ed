"""One end-to-end servesweep run through the package's own lifecycle (no Snakemake).

    PYTHONUNBUFFERED=1 PYTHONPATH=.:/tmp/site python3 benchmarks/gpu/gpu_smoke.py OUT [options]

For a GPU box without Snakemake (the lent H200 ran it with wheels carried in .whl and a
copy of the package in .gpu: PYTHONPATH=.gpu:/tmp/site).

Steps: report the packages -> setup_stack (kind existing) -> materialize (synthetic) ->
config.load -> run_cell per variant -> collect -> build_report. What comes back lands in
OUT, flat, at most 8 files: smoke.log, digest.json, summary.csv, report.html,
cell-<variant>.json and server-<variant>.log for each variant (copied as soon as a cell
ends, so a later crash cannot lose them).

Defaults are the GPU run (device cuda, a bf16 synthetic MoE of hidden 512 x 4 layers x
16 experts top-4). `--device cpu --model tiny --stack-python P` is the local rehearsal.
"""

from __future__ import annotations

import _thread
import argparse
import importlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

T0 = time.monotonic()
LOG_FILE = None
NVML_AFTER_READY: list[dict] = []

MODELS = {
    # The brief's GPU model: ~30 M parameters, bf16.
    "gpu": {
        "hidden_size": 512,
        "num_layers": 4,
        "num_experts": 16,
        "experts_per_token": 4,
        "moe_intermediate_size": 256,
        "dtype": "bfloat16",
    },
    # The CPU default's model (docs/design.md §7), for the local rehearsal.
    "tiny": {"hidden_size": 128, "num_layers": 2, "num_experts": 8, "experts_per_token": 2},
}

DRIVER_MODULES = [
    "servesweep", "numpy", "tokenizers", "aiohttp", "yarl", "multidict", "jsonschema",
    "referencing", "rpds", "yaml", "psutil", "pynvml", "pandas", "matplotlib", "jinja2",
    "tabulate", "uvloop",
]  # fmt: skip
SERVER_MODULES = [
    "torch", "transformers", "fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core",
    "openai", "httpx2", "httpcore2", "opentelemetry", "typer", "click", "h11", "anyio",
    "typing_extensions", "accelerate",
]  # fmt: skip


def log(msg: str) -> None:
    line = f"[{time.monotonic() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    if LOG_FILE is not None:
        with open(LOG_FILE, "a") as f:
            f.write(line + "\n")
    if msg.startswith("ready in"):
        # GPU memory right after the server's load and first generation.
        NVML_AFTER_READY.append({"t_s": round(time.monotonic() - T0, 1), **nvml_memory()})


def _deadline() -> None:
    log("DEADLINE reached: interrupting the cell in flight")
    _thread.interrupt_main()


def nvml_memory() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            out = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
                out[f"gpu{i}_used_mib"] = round(info.used / 2**20, 1)
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        return {"nvml": f"unavailable ({type(exc).__name__})"}


def module_report(names: list[str]) -> dict:
    """name -> version (or 'MISSING: error'), imports guarded one by one."""
    dist_of = {"yaml": "pyyaml", "rpds": "rpds-py", "pynvml": "nvidia-ml-py",
               "opentelemetry": "opentelemetry-api", "pydantic_core": "pydantic-core",
               "typing_extensions": "typing-extensions"}  # fmt: skip
    out = {}
    for name in names:
        try:
            mod = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001
            out[name] = f"MISSING: {type(exc).__name__}: {str(exc)[:120]}"
            continue
        try:
            version = md.version(dist_of.get(name, name))
        except md.PackageNotFoundError:
            version = getattr(mod, "__version__", "?")
        where = getattr(mod, "__file__", "") or ""
        out[name] = f"{version}{' (/tmp/site)' if where.startswith('/tmp/site') else ''}"
    return out


def server_module_report(python: str) -> dict:
    code = (
        "import importlib, importlib.metadata as md, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try:\n"
        "        m = importlib.import_module(n)\n"
        "        dist = n.replace('_', '-') if n != 'opentelemetry' else 'opentelemetry-api'\n"
        "        try: v = md.version(dist)\n"
        "        except Exception: v = getattr(m, '__version__', '?')\n"
        "        where = getattr(m, '__file__', '') or ''\n"
        "        out[n] = v + (' (/tmp/site)' if where.startswith('/tmp/site') else '')\n"
        "    except Exception as e:\n"
        "        out[n] = 'MISSING: %s: %s' % (type(e).__name__, str(e)[:120])\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run(
        [python, "-c", code, *SERVER_MODULES], capture_output=True, text=True, timeout=300
    )
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout)[-500:]}


def stack_python(given: str | None, work: Path) -> str:
    """An interpreter with the `transformers` console script beside it (the engine runs
    `<dir of python>/transformers serve`); else a two-script shim around this one."""
    python = Path(given or sys.executable)
    if (python.parent / "transformers").exists():
        return str(python)
    shim = work / "stackbin"
    shim.mkdir(parents=True, exist_ok=True)
    real = str(python.resolve())
    (shim / "python3").write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    (shim / "transformers").write_text(
        f'#!/bin/sh\nexec "{real}" -c "import sys; from transformers.cli.transformers '
        f'import main; sys.argv[0] = \'transformers\'; sys.exit(main())" "$@"\n'
    )
    for f in shim.iterdir():
        f.chmod(0o755)
    log(f"no transformers script beside {python}: using the shim {shim}/python3")
    return str(shim / "python3")


def lists_pinned_model(python: str) -> bool:
    """Whether the stack's `transformers serve` lists its pinned (local-path) model on
    /v1/models. transformers 5.17 does not: its /v1/models only scans the Hugging Face
    hub cache (and answers 500 when that folder does not exist); 5.24 has
    ModelManager.list_models, which lists the pinned model."""
    code = (
        "from transformers.cli.serving.model_manager import ModelManager as M; "
        "print(hasattr(M, 'list_models'))"
    )
    res = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    return res.stdout.strip().endswith("True")


def build_config(args, python: str) -> dict:
    cb = {"continuous-batching": True}
    if args.cb_sizing:
        cb.update({"cb-num-blocks": 2048, "cb-block-size": 32, "cb-max-batch-tokens": 4096})
    return {
        "stacks": {args.stack: {"kind": "existing", "python": python}},
        "models": {args.model_name: {"synthetic": MODELS[args.model]}},
        "engine": "transformers",
        "server": {"host": "127.0.0.1", "port": "auto", "boot_timeout_s": 300},
        "variants": {
            "baseline": {
                "description": "transformers serve as shipped (one request at a time)",
                "flags": {"device": args.device},
                # null = readiness skips the model listing (health + one generation).
                **({} if args.models_check else {"models_path": None}),
            },
            "continuous-batching": {
                "description": "paged-attention continuous batching",
                "extends": "baseline",
                "flags": cb,
            },
        },
        "benchmark": {
            "levels": args.levels,
            "repeats": 1,
            "endpoint": "completions",
            "warmup": 2,
            "num_prompts": {"per_level": 1, "min": 16},
            "workload": {"kind": "random", "input_tokens": 128, "output_tokens": 64, "seed": 0},
            "request_timeout_s": 600,
            "stall_timeout_s": 120,
        },
    }


def report(cell_paths, levels, work: Path, out: Path, digest: dict) -> None:
    """summary.csv and report.html over the cells that finished, copied to OUT."""
    from servesweep.results.collect.cells import collect
    from servesweep.results.report.build import build_report

    results = work / "results"
    df = collect(cell_paths, results / "summary.csv", levels=levels)
    shutil.copy(results / "summary.csv", out / "summary.csv")
    digest["summary_rows"] = len(df)
    build_report(results / "summary.csv", cell_paths, results / "report.html")
    shutil.copy(results / "report.html", out / "report.html")
    digest["report_bytes"] = (out / "report.html").stat().st_size
    log(f"summary.csv: {len(df)} rows; report.html: {digest['report_bytes']} bytes")


def level_digest(lev: dict) -> dict:
    gpu = lev.get("gpu") or {}
    g0 = (gpu.get("gpus") or [{}])[0] if gpu else {}
    keys = ["level", "status", "cause", "completed", "failed", "duration_s",
            "total_output_tokens", "output_throughput", "steady_output_throughput",
            "peak_output_throughput", "achieved_concurrency", "client_bound",
            "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms",
            "median_e2el_ms", "usage_mismatch", "client_cpu_s", "energy_j",
            "joules_per_output_token"]  # fmt: skip
    out = {k: lev.get(k) for k in keys}
    out["gpu_available"] = gpu.get("available")
    out["gpu_reason"] = gpu.get("reason")
    out["gpu_name"] = g0.get("name")
    out["mem_start_mib"] = g0.get("memory_used_start_mib")
    out["mem_peak_mib"] = g0.get("memory_used_peak_mib")
    out["power_mean_w"] = g0.get("power_mean_w")
    out["power_max_w"] = g0.get("power_max_w")
    out["energy_source"] = g0.get("energy_source")
    out["samples"] = g0.get("samples")
    return out


def fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def main() -> int:
    global LOG_FILE
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", choices=sorted(MODELS), default="gpu")
    ap.add_argument("--stack-python", default=None)
    ap.add_argument("--stack", default="h200")
    ap.add_argument("--model-name", default="synthetic-gpu")
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--order", default="continuous-batching,baseline",
                    help="variants in the order they run (CB first: the serialized baseline "
                         "is the long one)")  # fmt: skip
    ap.add_argument("--no-cb-sizing", dest="cb_sizing", action="store_false")
    ap.add_argument("--work", default="/tmp/smoke")
    ap.add_argument("--models-check", choices=["auto", "on", "off"], default="auto",
                    help="keep the engine's /v1/models readiness check (auto: only where "
                         "the stack's transformers lists the pinned model)")  # fmt: skip
    ap.add_argument("--deadline-s", type=float, default=540.0,
                    help="interrupt the cell in flight after this many seconds (it tears "
                         "down), then collect and report what finished")  # fmt: skip
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]

    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    LOG_FILE = out / "smoke.log"
    work = Path(args.work).absolute()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    digest: dict = {"args": {k: v for k, v in vars(args).items()}}
    cell_paths: list[Path] = []

    def save_digest():
        digest["elapsed_s"] = round(time.monotonic() - T0, 1)
        (out / "digest.json").write_text(json.dumps(digest, indent=2, default=str) + "\n")

    try:
        log(f"driver python {sys.executable} {sys.version.split()[0]}; cwd {os.getcwd()}")
        log(f"PYTHONPATH={os.environ.get('PYTHONPATH')}")
        digest["driver_modules"] = module_report(DRIVER_MODULES)
        for k, v in digest["driver_modules"].items():
            log(f"  driver  {k:18s} {v}")
        python = stack_python(args.stack_python, work)
        if args.deadline_s:
            timer = threading.Timer(args.deadline_s, _deadline)
            timer.daemon = True
            timer.start()
        digest["server_modules"] = server_module_report(python)
        for k, v in digest["server_modules"].items():
            log(f"  server  {k:18s} {v}")
        digest["nvml_idle"] = nvml_memory()
        log(f"NVML before anything: {digest['nvml_idle']}")
        save_digest()

        from servesweep.resources.models import materialize
        from servesweep.resources.stacks import setup_stack
        from servesweep.run.cell import run_cell
        from servesweep.sweep.config import load

        # 1. The stack, described from inside its own interpreter.
        t = time.monotonic()
        stack_manifest = setup_stack(
            args.stack, {"kind": "existing", "python": python}, work / "stacks" / args.stack, log
        )
        keep = ["python", "python_version", "torch", "torch_cuda", "torch_cuda_available",
                "torch_device_count", "torch_import_error", "transformers", "triton", "nccl",
                "driver", "driver_cuda", "nvcc", "gpus", "cpu_model", "freeze_count",
                "topology"]  # fmt: skip
        digest["stack_manifest"] = {k: stack_manifest.get(k) for k in keep}
        digest["stack_setup_s"] = round(time.monotonic() - t, 1)
        log(f"stack manifest: {json.dumps(digest['stack_manifest'], default=str)}")
        save_digest()

        # 2. The model.
        model_source = {"synthetic": MODELS[args.model]}
        model_manifest = materialize(
            args.model_name, model_source, work / "models" / args.model_name
        )
        digest["model"] = {k: v for k, v in model_manifest.items() if k != "files"}
        log(
            f"model {model_manifest['path']}: {model_manifest['total_bytes'] / 2**20:.1f} MiB, "
            f"built in {model_manifest['built_s']} s"
        )
        save_digest()

        # 3. Config and cells.
        if args.models_check == "auto":
            args.models_check = lists_pinned_model(python)
        else:
            args.models_check = args.models_check == "on"
        digest["models_check"] = args.models_check
        log(
            f"/v1/models readiness check: {'on' if args.models_check else 'off (models_path null)'}"
        )
        sweep = load(build_config(args, python))
        digest["cells"] = {}
        for variant in args.order.split(","):
            spec = sweep.spec(args.stack, args.model_name, variant)
            cell_dir = work / "results" / "cells" / args.stack / args.model_name / variant
            server_log = work / "logs" / f"server-{variant}.log"
            log(f"=== cell {variant}: {spec['command']}")
            t = time.monotonic()
            ready_before = len(NVML_AFTER_READY)
            try:
                cell = run_cell(spec, stack_manifest, model_manifest, cell_dir, server_log, log=log)
            finally:
                if server_log.exists():
                    data = server_log.read_bytes()
                    (out / f"server-{variant}.log").write_bytes(data[-2_000_000:])
            cell_paths.append(cell_dir / "cell.json")
            shutil.copy(cell_dir / "cell.json", out / f"cell-{variant}.json")
            digest["cells"][variant] = {
                "status": cell["status"],
                "failure": {k: v for k, v in (cell.get("failure") or {}).items() if k != "log_tail"}
                or None,
                "command_str": cell["command_str"],
                "boot_s": cell["boot_s"],
                "teardown": cell["teardown"],
                "cell_wall_s": round(time.monotonic() - t, 1),
                "nvml_after_ready": NVML_AFTER_READY[ready_before:],
                "levels": [level_digest(lev) for lev in cell["levels"]],
            }
            save_digest()

        report(cell_paths, args.levels, work, out, digest)

        # The headline, for the log.
        log("variant              level  status  out tok/s  TTFT p50  TPOT p50  memstart  "
            "mempeak  power W  J/tok")  # fmt: skip
        for variant, c in digest["cells"].items():
            for lv in c["levels"]:
                log(
                    f"{variant:20s} {lv['level']:5d}  {fmt(lv['status']):6s}  "
                    f"{fmt(lv['output_throughput']):>9s}  {fmt(lv['median_ttft_ms']):>8s}  "
                    f"{fmt(lv['median_tpot_ms'], 2):>8s}  {fmt(lv['mem_start_mib']):>8s}  "
                    f"{fmt(lv['mem_peak_mib']):>7s}  {fmt(lv['power_mean_w']):>7s}  "
                    f"{fmt(lv['joules_per_output_token'], 4)}"
                )
            log(f"{variant}: boot {c['boot_s']} s, teardown {c['teardown']}, "
                f"after ready {c['nvml_after_ready']}")  # fmt: skip
        digest["ok"] = True
        save_digest()
        return 0
    except BaseException:
        digest["ok"] = False
        digest["error"] = traceback.format_exc()[-4000:]
        log("DRIVER FAILED:\n" + digest["error"])
        save_digest()
        if cell_paths and "summary_rows" not in digest:
            try:
                report(cell_paths, args.levels, work, out, digest)
            except BaseException:
                log("report after failure failed:\n" + traceback.format_exc()[-2000:])
            save_digest()
        return 1
    finally:
        held = sorted(p.name for p in out.iterdir())
        log(f"done in {time.monotonic() - T0:.1f} s; OUT holds {held}")


if __name__ == "__main__":
    sys.exit(main())
