"""Which machine a boot ran on: its host, CPU and GPUs, and one short key for them.

Measured on two lent H100s (docs/sglang-h200.md, "Where the GPU's noise is"): boots on one
machine differed by 1-14 % (mostly their own requests' scatter), the same configuration on
the other machine, of the same kind, by 27-30 %. A sweep that moves (a resumed archive,
SLURM nodes) can mix machines, and the judge would then read a machine's effect as boot
scatter or, where a variant's boots sit on one machine, as its Δ. So every boot records its
machine (`cell.json` `machine`), summary.csv carries its key, and the report says when a
table's boots come from more than one.

The key names the hardware, not the container: the GPUs' UUIDs where NVML sees GPUs, else
the host name and CPU model. Nothing here raises: a fact that cannot be read is None."""

from __future__ import annotations

import hashlib
import os
import socket

from servesweep.records import MachineFacts, MachineGpu
from servesweep.server.telemetry import nvml_session


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def host_gpus() -> tuple[list[MachineGpu], str | None]:
    """Every GPU NVML sees (index, name, UUID) and the driver's version; [] without NVML."""
    gpus: list[MachineGpu] = []
    driver = None
    with nvml_session() as nvml:
        if nvml is None:
            return [], None
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                gpus.append(
                    MachineGpu(
                        index=i,
                        name=_text(nvml.nvmlDeviceGetName(handle)),
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    )
                )
        except Exception:  # a GPU that fell off the bus: what was read stands
            pass
    return gpus, driver


def machine_key(hostname: str, cpu: str | None, gpus: list[MachineGpu]) -> str:
    uuids = sorted(g["uuid"] for g in gpus if g["uuid"])
    what = "gpus:" + ",".join(uuids) if uuids else f"host:{hostname}|{cpu}"
    return hashlib.sha256(what.encode()).hexdigest()[:12]


def machine_facts() -> MachineFacts:
    hostname = socket.gethostname()
    cpu = cpu_model()
    gpus, driver = host_gpus()
    return MachineFacts(
        key=machine_key(hostname, cpu, gpus),
        hostname=hostname,
        cpu_model=cpu,
        cpus=os.cpu_count(),
        gpus=gpus,
        driver=driver,
    )


def elsewhere_note(cells: list[dict], here: MachineFacts) -> str | None:
    """The plan's line when finished boots (cell.json records) ran on another machine than
    this one, e.g. a sweep resumed from an archive: what is mixed and what to do. None when
    every boot that names its machine ran here (older records name none)."""
    keys = [(c.get("machine") or {}).get("key") for c in cells]
    other = [c["machine"] for c, k in zip(cells, keys, strict=True) if k and k != here["key"]]
    if not other:
        return None
    hosts = sorted({f"{m.get('hostname')} ({m['key']})" for m in other})
    return (
        f"{len(other)} of {sum(k is not None for k in keys)} finished boots ran on another "
        f"machine than this one ({here['hostname']}, {here['key']}): {', '.join(hosts)}. "
        "Boots measured here will be judged with them and the report warns: two H100s of one "
        "kind differed by 25-37 % on one configuration. Rerun every arm here, or give each "
        "machine its own baseline."
    )
