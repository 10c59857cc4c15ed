"""The environment a cell's server gets beyond its spec: its GPUs and NVLink multicast off.

NVLink multicast (NCCL's NVLS, PyTorch's symmetric-memory multicast, NVSHMEM's NVLS) is kept
off on every server unless the variant's own `env:` sets the variable: a program that uses it
can put a shared host's GPUs out of service for a day or more. These are applied at launch,
outside the spec (no existing cell's spec hash changes), and recorded in the cell record
(`workflow_env`, and `comm_env`: every communication variable the server got).
"""

from __future__ import annotations

import os

# NCCL, PyTorch and NVSHMEM's switches for NVLink multicast (NVLS), all off.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# The variables the multi-GPU manifest reports (NCCL's, NVSHMEM's, PyTorch's NCCL and
# symmetric-memory ones, and which GPUs a process sees).
COMM_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_NCCL_", "TORCH_SYMM")
COMM_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def workflow_env(spec_env: dict[str, str], gpu_env: dict[str, str]) -> dict[str, str]:
    """What the workflow sets for the server on top of the spec's env: the multicast
    switches the variant does not set itself, and the GPUs the cell holds (which win over
    a variant's own CUDA_VISIBLE_DEVICES: two cells must never share a GPU)."""
    defaults = {k: v for k, v in MULTICAST_OFF.items() if k not in spec_env}
    return {**defaults, **gpu_env}


def server_env(spec_env: dict[str, str], gpu_env: dict[str, str]) -> dict[str, str]:
    """The variables the server gets on top of the job's own environment."""
    return {**MULTICAST_OFF, **spec_env, **gpu_env}


def comm_env(environ=None) -> dict[str, str]:
    """The communication variables in `environ` (default: this process's), sorted."""
    environ = os.environ if environ is None else environ
    return {
        k: environ[k] for k in sorted(environ) if k.startswith(COMM_PREFIXES) or k in COMM_NAMES
    }
