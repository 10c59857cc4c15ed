"""Where a GPU sweep's noise is, from its packed records: machine, boot, in-boot repeat.

    python benchmarks/gpu/noise_components.py DIR [--out DIR/components.json]

DIR holds one folder per lease (a lent machine), each with the results.tar.xz its calls
brought back (benchmarks/gpu/wait.sh). Every boot's level files (L{level}_i{k}.json, one per
in-boot repeat) are read, finished boots (a cell.json) apart from a boot the lease cut
(level files only; shown, never pooled with the finished ones unless --partial).

Per metric and level, on the log scale, with the package's own nested ANOVA
(`servesweep.stats.variance_components`, configuration → boot → measurement):
  - `one_machine_each`: the leases as the groups, so σ_B is boot to boot on one machine;
  - `pooled`: every boot one configuration (the sweep's variants here are a no-op A/A on
    one GPU), so σ_B also holds the machines' difference;
  - each lease's geometric mean, the fastest over the slowest, and the scatter of the
    leases' geometric means (`sigma_machine_pct`, df leases - 1);
  - `by_lease`: each lease alone, its variants as the configurations (σ_B boot to boot on
    that machine), its first boot (cold caches) against that variant's later boots and the
    components without it (`without_first_boot`), and the
    boots a side (`servesweep.stats.boots_for_half_width`) a ±5 % or ±2 % interval needs
    with 1, 3 or 10 measurements (in-boot repeats of the level) a boot.
Degrees of freedom are tiny with a few boots: read the numbers with them.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from servesweep.stats import boots_for_half_width, variance_components  # noqa: E402

METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms")
PER_BOOT = (1, 3, 10)  # measurements a boot, for the boots-needed table
HALF_WIDTHS = (5.0, 2.0)  # ± % of the 95 % interval of a ratio


def read_lease(archive: Path) -> dict[str, dict]:
    """Boot (variant/rN) → {finished, status, boot_s, caches, machine, levels: {lv: [(i, rec)]}}."""
    boots: dict[str, dict] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) < 7 or parts[1] != "cells":
                continue
            key = f"{parts[4]}/{parts[5]}"
            boot = boots.setdefault(key, {"variant": parts[4], "finished": False, "levels": {}})
            data = tar.extractfile(member).read()
            if parts[6] == "cell.json":
                cell = json.load(io.BytesIO(data))
                facts = cell.get("boot_facts") or {}
                boot.update(
                    finished=True,
                    status=cell["status"],
                    boot_s=cell.get("boot_s"),
                    caches=facts.get("caches"),
                    machine=(cell.get("machine") or {}).get("key"),
                    started_at=cell.get("started_at"),
                )
            elif parts[6] == "levels" and parts[-1].endswith(".json"):
                rec = json.load(io.BytesIO(data))
                if rec.get("status") == "ok":
                    boot["levels"].setdefault(rec["level"], []).append((rec["in_boot"], rec))
    return boots


def logs(boot: dict, level: int, metric: str) -> list[float]:
    return [math.log(r[metric]) for _, r in sorted(boot["levels"].get(level, [])) if r.get(metric)]


def components(groups: list[list[list[float]]]) -> dict:
    vc = variance_components(groups)
    return {
        "sigma_boot_pct": round(100 * math.sqrt(max(vc.between, 0.0)), 2),
        "sigma_within_pct": round(100 * math.sqrt(vc.within), 2),
        "per_boot": round(vc.per_boot, 2),
        "df_boot": round(vc.between_df, 2),
        "df_within": round(vc.within_df, 1),
    }


def analyse(leases: dict[str, dict[str, dict]], partial: bool) -> dict:
    def counted(boot):
        return boot["finished"] or partial

    levels = sorted({lv for boots in leases.values() for b in boots.values() for lv in b["levels"]})
    out: dict = {"levels": levels, "metrics": {}}
    for metric in METRICS:
        rows = {}
        for lv in levels:
            by_lease = [
                [logs(b, lv, metric) for b in boots.values() if counted(b) and b["levels"]]
                for boots in leases.values()
            ]
            means = {}
            for name, groups in zip(leases, by_lease, strict=True):
                values = [x for g in groups for x in g]
                if values:
                    means[name] = round(math.exp(sum(values) / len(values)), 3)
            row = {
                "one_machine_each": components(by_lease),
                "pooled": components([[g for groups in by_lease for g in groups]]),
                "lease_geomean": means,
            }
            if len(means) >= 2:
                row["lease_ratio"] = round(max(means.values()) / min(means.values()), 3)
                row["sigma_machine_pct"] = round(
                    100 * statistics.stdev(math.log(m) for m in means.values()), 2
                )  # the leases' geometric means' scatter, df leases - 1 (with their boots')
            rows[str(lv)] = row
        out["metrics"][metric] = rows
    out["by_lease"] = {name: one_lease(boots, levels) for name, boots in leases.items()}
    return out


def one_lease(boots: dict[str, dict], levels: list[int]) -> dict:
    """One lease alone: its finished boots by variant, in boot order."""
    done = sorted(
        (b for b in boots.values() if b["finished"] and b["levels"]),
        key=lambda b: b.get("started_at") or "",
    )
    variants: dict[str, list[dict]] = {}
    for b in done:
        variants.setdefault(b["variant"], []).append(b)
    first = done[0] if done else None
    out: dict = {"boots_a_side": {v: len(bs) for v, bs in variants.items()}, "metrics": {}}
    for metric in METRICS:
        rows = {}
        for lv in levels:
            groups = [[logs(b, lv, metric) for b in bs] for bs in variants.values()]
            row = components(groups)
            vc = variance_components(groups)
            row["boots_needed"] = {
                f"{r}x_{hw:g}pct": boots_for_half_width(
                    max(vc.between, 0.0), vc.within, r, hw, configurations=vc.configurations
                )
                for r in PER_BOOT
                for hw in HALF_WIDTHS
            }
            later = (
                [b for b in variants.get(first["variant"], []) if b is not first] if first else []
            )
            warm = [[logs(b, lv, metric) for b in bs if b is not first] for bs in variants.values()]
            if sum(len(g) for g in warm) > len(warm):
                row["without_first_boot"] = components(warm)
            if first and later and logs(first, lv, metric):
                rest = [x for b in later for x in logs(b, lv, metric)]
                row["first_boot"] = {
                    "boot": f"{first['variant']}/{first.get('caches')}",
                    "ratio_to_later": round(
                        math.exp(
                            statistics.fmean(logs(first, lv, metric)) - statistics.fmean(rest)
                        ),
                        3,
                    ),
                }
            rows[str(lv)] = row
        out["metrics"][metric] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--partial", action="store_true", help="pool a cut boot's levels too")
    args = parser.parse_args()
    leases = {p.parent.name: read_lease(p) for p in sorted(args.dir.glob("*/results.tar.xz"))}
    if not leases:
        raise SystemExit(f"{args.dir}: no */results.tar.xz")
    result = {
        "boots": {
            name: {
                key: {k: v for k, v in b.items() if k not in ("levels", "variant")}
                | {"measurements": sum(len(v) for v in b["levels"].values())}
                for key, b in sorted(boots.items())
            }
            for name, boots in leases.items()
        },
        "finished": analyse(leases, partial=False),
        "with_cut_boots": analyse(leases, partial=True),
    }
    text = json.dumps(result, indent=1)
    (args.out or args.dir / "components.json").write_text(text + "\n")
    for metric, rows in result["finished"]["metrics"].items():
        for lv, row in rows.items():
            one, pooled = row["one_machine_each"], row["pooled"]
            print(
                f"{metric:18} L{lv:>4}: one machine σ_B {one['sigma_boot_pct']:5.1f} % "
                f"σ_W {one['sigma_within_pct']:5.1f} % (df {one['df_boot']}/{one['df_within']}); "
                f"pooled σ_B {pooled['sigma_boot_pct']:5.1f} %; leases {row['lease_geomean']}"
            )


if __name__ == "__main__":
    main()
