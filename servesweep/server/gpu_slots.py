"""GPU slots on one host: which GPUs a cell's server may use, held for the whole job.

Snakemake's `gpu` resource bounds how many GPUs the running cells hold together; it does not
say which ones. A cell takes its GPUs here, out of the host's pool, by holding one `flock`
lock per GPU in a lock directory every cell on the host shares (`gpu_slots.lock_dir`), and
its server gets `CUDA_VISIBLE_DEVICES` naming exactly those. A lock belongs to an open file:
it goes when every process holding the file is gone, so an owner killed with SIGKILL leaves
no stale lock; the server inherits the descriptors, so a GPU stays held until the server
that uses it is gone too. A cell takes all its GPUs at once or none (never holding some while
waiting for more, which could deadlock two cells), waits at most `gpu_slots.wait_s`, and
otherwise fails with cause `gpu_slots`.

The pool, first that applies:
- `slurm`: inside a SLURM job with CUDA_VISIBLE_DEVICES set, the job's own GPUs, as they are
  (the scheduler gave them to this job alone: no locks);
- `inherited`: CUDA_VISIBLE_DEVICES set in the workflow's environment: those GPUs;
- `config`: `gpu_slots.host_gpus`, a count (0..n-1) or a list of indices / UUIDs;
- `detected`: every GPU NVML (else `nvidia-smi -L`) sees;
- `none`: no GPU. A cell that needs none then gets no CUDA_VISIBLE_DEVICES at all; where the
  host has GPUs, a cell that holds none sees none (CUDA_VISIBLE_DEVICES="").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from servesweep.records import GpuSlotRecord

POLL_S = (0.2, 0.5)  # how often a waiting cell tries again (uniform in this range)


class SlotsUnavailable(Exception):
    """The cell cannot have its GPUs (too few on the host, or not free in time)."""


class HostGpus(NamedTuple):
    """The GPUs cells on this host share, as CUDA_VISIBLE_DEVICES names them."""

    pool: list[str]
    source: str  # slurm | inherited | config | detected | none
    locked: bool  # False: the scheduler gave this job its GPUs alone


class GpuLease(NamedTuple):
    """GPUs held by this process (and the server it passes `fds` to)."""

    held: list[str]
    host: HostGpus
    waited_s: float
    fds: tuple[int, ...]
    lock_dir: str | None

    @property
    def cuda_visible_devices(self) -> str | None:
        """What the server's CUDA_VISIBLE_DEVICES is; None: leave it unset (no GPUs here)."""
        return None if self.host.source == "none" else ",".join(self.held)

    def env(self) -> dict[str, str]:
        value = self.cuda_visible_devices
        return {} if value is None else {"CUDA_VISIBLE_DEVICES": value}

    def as_record(self) -> GpuSlotRecord:
        return {
            "needed": len(self.held),
            "held": list(self.held),
            "cuda_visible_devices": self.cuda_visible_devices,
            "pool": list(self.host.pool),
            "source": self.host.source,
            "lock_dir": self.lock_dir,
            "waited_s": round(self.waited_s, 3),
        }


# Engine flags whose product is how many GPUs one server spreads over (SGLang, vLLM).
TENSOR_FLAGS = ("tp", "tp-size", "tensor-parallel-size")
PIPELINE_FLAGS = ("pp", "pp-size", "pipeline-parallel-size")


def parallel_gpus(flags: dict) -> tuple[int, str]:
    """The GPUs a variant's parallelism flags need (tensor x pipeline), and how it reads."""

    def size(names):
        for name in names:
            value = flags.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return value, name
            if isinstance(value, str) and value.isdigit():
                return int(value), name
        return 1, None

    (tp, tp_name), (pp, pp_name) = size(TENSOR_FLAGS), size(PIPELINE_FLAGS)
    said = " x ".join(f"{name} {n}" for n, name in ((tp, tp_name), (pp, pp_name)) if name)
    return tp * pp, said


def detected_gpus() -> int | None:
    """How many GPUs this host has: NVML's count, else `nvidia-smi -L`'s; None: no GPU."""
    from servesweep.server.telemetry import nvml_session

    with nvml_session() as nvml, contextlib.suppress(Exception):
        if nvml is not None:
            return int(nvml.nvmlDeviceGetCount())
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def _entries(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def host_gpus(settings: dict, environ=None, detect=detected_gpus) -> HostGpus:
    """The host's pool of GPUs (see the module's docstring for the order)."""
    environ = os.environ if environ is None else environ
    inherited = environ.get("CUDA_VISIBLE_DEVICES")
    if inherited is not None:
        source = "slurm" if environ.get("SLURM_JOB_ID") else "inherited"
        return HostGpus(_entries(inherited), source, source != "slurm")
    configured = settings.get("host_gpus")
    if configured is not None:
        if isinstance(configured, int):
            return HostGpus([str(i) for i in range(configured)], "config", True)
        return HostGpus([str(g) for g in configured], "config", True)
    count = detect()
    if count:
        return HostGpus([str(i) for i in range(count)], "detected", True)
    return HostGpus([], "none", False)


def _lock_name(entry: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", entry) + ".lock"


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        return ""
    return f" ({text})" if text else ""


def _try_take(pool: list[str], count: int, lock_dir: Path, owner: str):
    """All `count` GPUs as [(entry, fd)], or None (holding nothing) and the busy ones."""
    taken: list[tuple[str, int]] = []
    busy: list[str] = []
    for entry in pool:
        if len(taken) == count:
            break
        path = lock_dir / _lock_name(entry)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            busy.append(entry)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner.encode(), 0)
        taken.append((entry, fd))
    if len(taken) == count:
        return taken, busy
    for _, fd in taken:
        os.close(fd)
    return None, busy


def _lock_dir(settings: dict) -> Path:
    path = Path(settings["lock_dir"])
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        # Every user's cells on the host share it, like /tmp.
        with contextlib.suppress(OSError):
            path.chmod(0o1777)
    return path


@contextlib.contextmanager
def hold(
    count: int, settings: dict, owner: str = "", environ=None, detect=detected_gpus, log=print
):
    """Hold `count` of the host's GPUs for the block; yields a GpuLease. Raises
    SlotsUnavailable (one line saying why) when the host has too few or they stay taken
    longer than `settings["wait_s"]`."""
    host = host_gpus(settings, environ, detect)
    if count > len(host.pool):
        raise SlotsUnavailable(
            f"the cell needs {count} GPU(s); the host's pool has {len(host.pool)} "
            f"({host.source}: {','.join(host.pool) or 'none'}; see gpu_slots.host_gpus)"
        )
    if not host.locked or count == 0:
        yield GpuLease(host.pool[:count], host, 0.0, (), None)
        return
    lock_dir = _lock_dir(settings)
    owner = f"pid {os.getpid()} {owner}".strip()
    start = time.monotonic()
    deadline = start + settings["wait_s"]
    said = False
    while True:
        taken, busy = _try_take(host.pool, count, lock_dir, owner)
        if taken is not None:
            break
        if time.monotonic() >= deadline:
            holders = ", ".join(f"{e}{_holder(lock_dir / _lock_name(e))}" for e in busy)
            raise SlotsUnavailable(
                f"{count} of the host's GPUs ({','.join(host.pool)}) were not free within "
                f"gpu_slots.wait_s = {settings['wait_s']} s; held: {holders}"
            )
        if not said:
            log(f"waiting for {count} free GPU(s) of {','.join(host.pool)} (busy: {busy})")
            said = True
        time.sleep(random.uniform(*POLL_S))
    fds = tuple(fd for _, fd in taken)
    try:
        yield GpuLease([e for e, _ in taken], host, time.monotonic() - start, fds, str(lock_dir))
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
