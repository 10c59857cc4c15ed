"""How long the plan takes on a big matrix: 3 stacks x 20 variants x 4 levels (60 cells).

    python -m benchmarks.workflow.plan_speed [--runs 5]

Each run is a fresh `snakemake --cores 1 results/plan.txt` in a scratch working directory
(the plan's files deleted first, so it is rebuilt), timed as a whole process; the peer is
Snakemake's own dry run of the same sweep (`snakemake -n results/report.html`), which
builds the same DAG and evaluates the same cell specs. Runs alternate, plan then peer.
Prints the medians and their ratio, and writes benchmarks/results/plan_speed.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.support import ROOT
from benchmarks.support.record import write_result

STACKS, VARIANTS, LEVELS = 3, 20, [1, 10, 256, 1024]


def sweep(model_dir: Path) -> dict:
    variants = {"baseline": {"flags": {"tp": 8, "trust-remote-code": True}}}
    for i in range(1, VARIANTS):
        variants[f"v{i:02d}"] = {
            "extends": "baseline" if i == 1 else f"v{i - 1:02d}",
            "flags": {f"option-{i}": i},
        }
    return {
        "stacks": {
            f"stack{i}": {"kind": "existing", "python": sys.executable} for i in range(STACKS)
        },
        "models": {"model": {"path": str(model_dir)}},
        "engine": "sglang",
        "server": {"gpus": 8},
        "variants": variants,
        "benchmark": {"levels": LEVELS, "repeats": 3},
    }


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="servesweep-plan-") as tmp:
        work = Path(tmp)
        (work / "model").mkdir()
        (work / "model" / "config.json").write_text("{}")
        config = work / "sweep.yaml"
        config.write_text(yaml.safe_dump(sweep(work / "model"), sort_keys=False))
        snakemake = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
        plan_cmd = [*snakemake, "--cores", "1", "results/plan.txt", "--configfile", str(config)]
        peer_cmd = [*snakemake, "-n", "--cores", "1", "results/report.html"]
        peer_cmd += ["--configfile", str(config)]
        plans, peers = [], []
        for _ in range(args.runs):
            for name in ("plan.txt", "plan.json"):
                (work / "results" / name).unlink(missing_ok=True)
            plans.append(timed(plan_cmd, work))
            peers.append(timed(peer_cmd, work))
        text = (work / "results" / "plan.txt").read_text()
        cells = text.splitlines()[1].split()[0]
    plan_s, peer_s = statistics.median(plans), statistics.median(peers)
    print(f"matrix: {STACKS} stacks x {VARIANTS} variants x {len(LEVELS)} levels = {cells} cells")
    print(f"plan (snakemake --cores 1 results/plan.txt): median {plan_s:.2f} s of {plans}")
    print(f"peer (snakemake -n results/report.html):     median {peer_s:.2f} s of {peers}")
    print(f"ratio={plan_s / peer_s:.2f}")
    path = write_result(
        "plan_speed",
        {
            "matrix": {"stacks": STACKS, "variants": VARIANTS, "levels": LEVELS, "cells": cells},
            "runs": args.runs,
            "plan_s": plans,
            "peer_dry_run_s": peers,
            "plan_median_s": round(plan_s, 3),
            "peer_median_s": round(peer_s, 3),
            "ratio": round(plan_s / peer_s, 3),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
