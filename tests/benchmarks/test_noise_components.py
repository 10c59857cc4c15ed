"""benchmarks/gpu/noise_components.py on leases with known values: a machine's effect shows
in the pooled σ_B and the leases' ratio, not in the one-machine σ_B; a cut boot is counted
only when asked."""

import io
import json
import math
import subprocess
import sys
import tarfile

from fixtures.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu" / "noise_components.py"
IN_BOOT = [0.95, 1.0, 1.05]  # every boot's three in-boot repeats, relative


def lease(path, scale: float, boots: dict[str, float], cut: str | None = None):
    """A results.tar.xz: each boot's level-1 repeats at scale x boot factor x IN_BOOT."""
    path.parent.mkdir(parents=True)
    with tarfile.open(path, "w:xz") as tar:

        def add(name, obj):
            data = json.dumps(obj).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        for boot, factor in boots.items():
            d = f"results/cells/s/m/{boot}"
            if boot != cut:
                add(f"{d}/cell.json", {"status": "ok", "boot_s": 60.0, "boot_facts": {}})
            for i, x in enumerate(IN_BOOT):
                add(
                    f"{d}/levels/L1_i{i}.json",
                    {
                        "level": 1,
                        "in_boot": i,
                        "status": "ok",
                        "output_throughput": scale * factor * x,
                    },
                )


def test_a_machines_effect_is_in_the_pooled_scatter_and_the_ratio(tmp_path):
    lease(tmp_path / "a" / "results.tar.xz", 1000.0, {"base/r0": 1.0, "copy/r0": 1.02})
    lease(
        tmp_path / "b" / "results.tar.xz",
        750.0,
        {"base/r0": 1.0, "copy/r0": 1.02, "base/r1": 1.5},
        cut="base/r1",
    )
    out = tmp_path / "c.json"
    run = subprocess.run(
        [sys.executable, SCRIPT, tmp_path, "--out", out], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(out.read_text())
    assert got["boots"]["b"]["base/r1"] == {"finished": False, "measurements": 3}
    row = got["finished"]["metrics"]["output_throughput"]["1"]
    # The in-boot scatter, the same in every boot: the sd of log(IN_BOOT).
    logs = [math.log(x) for x in IN_BOOT]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert abs(row["one_machine_each"]["sigma_within_pct"] - 100 * sd) < 0.01
    # Boots 2 % apart on one machine; the machines 1000 : 750.
    assert row["one_machine_each"]["sigma_boot_pct"] < 2.0
    assert row["pooled"]["sigma_boot_pct"] > 10.0
    assert abs(row["lease_ratio"] - 1000 / 750) < 0.002
    # The cut boot (1.5 x) counts only in with_cut_boots.
    cut = got["with_cut_boots"]["metrics"]["output_throughput"]["1"]
    assert cut["one_machine_each"]["sigma_boot_pct"] > 15.0


def test_one_lease_alone_its_first_boot_and_the_boots_needed(tmp_path):
    boots = {"base/r0": 0.8, "copy/r0": 1.0, "base/r1": 1.0, "copy/r1": 1.0}
    boots |= {"base/r2": 1.0, "copy/r2": 1.0}
    lease(tmp_path / "c" / "results.tar.xz", 1000.0, boots)
    out = tmp_path / "c.json"
    run = subprocess.run(
        [sys.executable, SCRIPT, tmp_path, "--out", out], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(out.read_text())["finished"]["by_lease"]["c"]
    assert got["boots_a_side"] == {"base": 3, "copy": 3}
    row = got["metrics"]["output_throughput"]["1"]
    # No start times in these cells: the first boot is the archive's first, base/r0.
    assert row["first_boot"]["ratio_to_later"] == 0.8
    # Without it the boots are alike: only the in-boot scatter is left.
    assert row["without_first_boot"]["sigma_boot_pct"] == 0.0
    assert row["sigma_boot_pct"] > 5.0
    # More measurements a boot never ask for more boots; ±2 % never for fewer than ±5 %.
    need = row["boots_needed"]
    assert need["10x_5pct"] <= need["1x_5pct"] <= need["1x_2pct"]
