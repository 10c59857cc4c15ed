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
  - each lease's geometric mean, and their ratio.
Degrees of freedom are tiny with a few boots: read the numbers with them.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from servesweep.stats import variance_components  # noqa: E402

METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms")


def read_lease(archive: Path) -> dict[str, dict]:
    """Boot (variant/rN) → {finished, status, boot_s, caches, machine, levels: {lv: [(i, rec)]}}."""
    boots: dict[str, dict] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) < 7 or parts[1] != "cells":
                continue
            key = f"{parts[4]}/{parts[5]}"
            boot = boots.setdefault(key, {"finished": False, "levels": {}})
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
            if len(means) == 2:
                a, b = means.values()
                row["lease_ratio"] = round(max(a, b) / min(a, b), 3)
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
                key: {k: v for k, v in b.items() if k != "levels"}
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
