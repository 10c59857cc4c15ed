"""The multi-GPU rows of the report's manifest table: how each stack's GPUs are linked
(`nvidia-smi topo -m` pairs, NVLink status), the communication variables of the stack and
of its servers, and which GPUs its boots held. Plain strings; the template escapes them."""

from __future__ import annotations

from collections import Counter

from servesweep import fmt
from servesweep.records import CellRead, CellRecord, StackRead

NONE = fmt.MISSING


def links_text(links: dict[str, str] | None) -> str:
    """'NVLink: NV18 × 28 pairs', 'PCIe only: SYS × 16, PHB × 8 pairs', 'mixed: …'."""
    if not links:
        return NONE
    counts = Counter(links.values())
    nvlink = {kind for kind in counts if kind.startswith("NV")}
    label = "NVLink" if nvlink == set(counts) else "PCIe only" if not nvlink else "mixed"
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{label}: " + ", ".join(f"{kind} × {n}" for kind, n in parts) + " pairs"


def nvlink_text(status: dict[str, dict] | None) -> str:
    """'8 GPUs × 18/18 links, 478.116 GB/s each', or GPU by GPU where they differ."""
    if not status:
        return NONE
    shapes = {(s["active"], s["links"], s["total_gb_s"]) for s in status.values()}
    if len(shapes) == 1 and len(status) > 1:
        active, total_links, gb_s = shapes.pop()
        return f"{len(status)} GPUs × {active}/{total_links} links, {gb_s:g} GB/s each"
    return "; ".join(
        f"GPU {gpu}: {s['active']}/{s['links']} links, {s['total_gb_s']:g} GB/s"
        for gpu, s in sorted(status.items(), key=lambda kv: int(kv[0]))
    )


def env_text(env: dict[str, str] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) if env else NONE


def servers_env_text(cells: list[CellRecord]) -> str:
    """The communication variables the stack's servers got (CUDA_VISIBLE_DEVICES apart):
    'K=V' where every boot had it, 'K=V (n of m boots)' where only some did."""
    envs = [c.comm_env for c in map(CellRead.of, cells) if c.comm_env is not None]
    if not envs:
        return NONE
    seen = Counter((k, v) for env in envs for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES")
    parts = []
    for (key, value), n in sorted(seen.items()):
        parts.append(f"{key}={value}" + ("" if n == len(envs) else f" ({n} of {len(envs)} boots)"))
    return " ".join(parts) or NONE


def held_text(cells: list[CellRecord]) -> str:
    """Which GPUs the stack's boots held: 'CUDA_VISIBLE_DEVICES 0 | 1 (pool 0,1,2,3, config)'."""
    slots = [c.gpu_slots for c in map(CellRead.of, cells) if c.gpu_slots]
    if not slots:
        return NONE
    held = sorted(
        {s["cuda_visible_devices"] for s in slots if s["cuda_visible_devices"] is not None}
    )
    pools = sorted({f"{','.join(s['pool']) or 'none'}, {s['source']}" for s in slots})
    shown = " | ".join(repr(h) if h == "" else h for h in held) or "unset"
    return f"CUDA_VISIBLE_DEVICES {shown} (pool {'; '.join(pools)})"


def link_rows(names: list[str], stacks: dict[str, dict], cells: list[CellRecord]) -> list[dict]:
    """The manifest table's multi-GPU rows, one value per stack in `names`."""
    by_stack = {s: [c for c in cells if c["stack"] == s] for s in names}
    manifests = {s: StackRead.of(stacks[s]) for s in names}
    values = {
        "GPU links (topo -m)": [links_text(manifests[s].gpu_links) for s in names],
        "NVLink status": [nvlink_text(manifests[s].nvlink) for s in names],
        "NCCL env (stack)": [env_text(manifests[s].comm_env) for s in names],
        "NCCL env (servers)": [servers_env_text(by_stack[s]) for s in names],
        "GPUs held": [held_text(by_stack[s]) for s in names],
    }
    return [
        {"field": field, "values": vals, "differs": len(set(vals)) > 1}
        for field, vals in values.items()
    ]
