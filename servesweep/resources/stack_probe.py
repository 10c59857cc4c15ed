"""Describe the interpreter that runs this file, as JSON on stdout.

Run BY the stack's own interpreter (`<stack python> stack_probe.py PACKAGES`), so it may
use only the standard library; everything else is imported optionally. PACKAGES is JSON,
{fact: [distribution, ...]}: the version of the first distribution installed is the fact
(None when none is), what the engines ask (servesweep.server.engines.probed_packages).
"""

import os
import sys

# Run as a script, its own directory comes first on sys.path, and a module there named
# like one of the standard library's would shadow it for everything imported after:
# servesweep/http.py once lived beside this file, torch 2.11 with CUDA imports
# http.client, and it failed so on the H200.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import hashlib  # noqa: E402
import importlib.metadata as md  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
from typing import Any, cast  # noqa: E402


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


def plain(text):
    """Text without terminal escapes (nvidia-smi underlines its table header)."""
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text) if text else text


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def first_version(*dists):
    return next((v for v in map(version, dists) if v), None)


def torch_facts():
    facts: dict[str, Any] = {
        "torch_cuda": None,
        "nccl": None,
        "torch_cuda_available": None,
        "torch_device_count": None,
        "torch_import_error": None,
    }
    # The NCCL wheel torch was built against, as a fallback when torch cannot say.
    wheel_nccl = first_version("nvidia-nccl-cu13", "nvidia-nccl-cu12")
    if version("torch") is None:
        return facts
    try:
        import torch
    except Exception as exc:  # a broken torch is a fact too, not a crash
        facts["torch_import_error"] = f"{type(exc).__name__}: {exc}"[:300]
        facts["nccl"] = wheel_nccl
        return facts
    facts["torch_cuda"] = torch.version.cuda
    try:
        facts["torch_cuda_available"] = torch.cuda.is_available()
        facts["torch_device_count"] = torch.cuda.device_count()
    except Exception:
        pass
    try:
        if torch.version.cuda:
            # Reads the linked library's version; needs no GPU.
            facts["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:
        pass
    facts["nccl"] = facts["nccl"] or wheel_nccl
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


def driver_cuda():
    """The newest CUDA the driver supports ("CUDA Version: 13.0" in nvidia-smi's header)."""
    out = run(["nvidia-smi"])
    match = re.search(r"CUDA Version:\s*([0-9.]+)", out or "")
    return match.group(1) if match else None


# The communication variables a manifest records (servesweep.server.env.COMM_PREFIXES and
# COMM_NAMES; this file may import only the standard library, a test keeps them equal).
COMM_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_NCCL_", "TORCH_SYMM")
COMM_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
GPU_NAME = re.compile(r"GPU(\d+)$")
LINK = re.compile(r"(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|N/A)$")


def gpu_links(topology):
    """The link between each pair of GPUs in `nvidia-smi topo -m`'s matrix, as
    {"0-1": "NV18", ...} (lower index first); None without a matrix or with one GPU.

    The GPU columns come first in the header, then NICs and the affinity columns; cells
    are tab- or space-separated depending on the driver (and on where a sample was copied)."""
    columns, links = None, {}
    for line in plain(topology or "").splitlines():
        tokens = line.split()
        if not tokens or not GPU_NAME.match(tokens[0]):
            continue
        if columns is None:  # the header: GPU0 GPU1 ... NIC0 ... CPU Affinity ...
            columns = []
            for token in tokens:
                gpu_name = GPU_NAME.match(token)
                if not gpu_name:
                    break
                columns.append(gpu_name.group(1))
            continue
        row = cast("re.Match[str]", GPU_NAME.match(tokens[0])).group(1)  # a GPU's row
        for col, cell in zip(columns, tokens[1:], strict=False):
            if LINK.match(cell) and cell != "X" and int(row) < int(col):
                links[f"{row}-{col}"] = cell
    return links or None


def nvlink_status(text):
    """`nvidia-smi nvlink --status` per GPU: {"0": {"links", "active", "total_gb_s"}};
    None where it says nothing (no NVLink, or an older driver)."""
    out: dict[str, dict[str, Any]] = {}
    gpu = None
    for line in plain(text or "").splitlines():
        head = re.match(r"\s*GPU (\d+):", line)
        if head:
            gpu = out.setdefault(head.group(1), {"links": 0, "active": 0, "total_gb_s": 0.0})
            continue
        link = re.match(r"\s*Link \d+:\s*(.*)", line)
        if link and gpu is not None:
            gpu["links"] += 1
            speed = re.match(r"([0-9.]+)\s*GB/s", link.group(1))
            if speed:
                gpu["active"] += 1
                gpu["total_gb_s"] = round(gpu["total_gb_s"] + float(speed.group(1)), 3)
    return {k: v for k, v in out.items() if v["links"]} or None


def comm_env():
    """NCCL's, NVSHMEM's and PyTorch's communication variables in the stack's environment."""
    return {
        k: os.environ[k]
        for k in sorted(os.environ)
        if k.startswith(COMM_PREFIXES) or k in COMM_NAMES
    }


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: stack_probe.py PACKAGES_JSON")
    packages = {key: first_version(*dists) for key, dists in json.loads(sys.argv[1]).items()}
    freeze = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in md.distributions() if d.metadata["Name"]
    )
    gpu_list, driver = gpus()
    nvcc = run(["nvcc", "--version"])
    topology = plain(run(["nvidia-smi", "topo", "-m"]))
    facts = {
        "python": sys.executable,
        "python_version": platform.python_version(),
        **packages,
        "cpu_model": cpu_model(),
        "gpus": gpu_list,
        "driver": driver,
        "driver_cuda": driver_cuda() if driver else None,
        "nvcc": nvcc.splitlines()[-1] if nvcc else None,
        "topology": topology,
        "gpu_links": gpu_links(topology),
        "nvlink": nvlink_status(run(["nvidia-smi", "nvlink", "--status"])) if driver else None,
        "comm_env": comm_env(),
        "freeze_sha256": hashlib.sha256("\n".join(freeze).encode()).hexdigest(),
        "freeze_count": len(freeze),
    }
    facts.update(torch_facts())
    json.dump(facts, sys.stdout)


if __name__ == "__main__":
    main()
