"""The summary, verdicts and report of a sweep from whatever boots it has: a device lease that
ended before every cell ran still leaves whole boots (results/cells/**/cell.json) behind, and
Snakemake would want to run the missing ones before its collect and report.

    python benchmarks/gpu/render.py RUN_DIR CONFIG

RUN_DIR holds results/ (results.tar.xz unpacked); writes RUN_DIR/results/summary.csv,
verdicts.csv, correctness.csv and report.html with the package's own collect, judge and
report (scripts/collect.py, scripts/report.py), naming how many boots it found.

    python benchmarks/gpu/render.py RUN_DIR CONFIG --more OTHER_RUN_DIR ...

`--more`: another lease of the same sweep (on another machine, started afresh): its
finished boots are copied into RUN_DIR as the next repeats of their cells, as a resume on
that machine would have numbered them, and the judge takes each machine as a block
(docs/engines-h200.md, "Two hosts, one picture").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from servesweep import CLIENT_VERSION  # noqa: E402
from servesweep.results.judge.step import collect_and_judge  # noqa: E402
from servesweep.results.report.build import ReportSettings, build_report  # noqa: E402
from servesweep.sweep.config import load_file  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("config", type=Path)
    parser.add_argument("--more", type=Path, action="append", default=[])
    args = parser.parse_args()
    sweep = load_file(args.config.resolve())
    for other in args.more:
        print(f"{other}: {append_lease(args.run_dir, other)} boots appended")
    os.chdir(args.run_dir)
    results = Path("results")
    cells = sorted(results.glob("cells/*/*/*/r*/cell.json"))
    if not cells:
        raise SystemExit(f"{args.run_dir}: no results/cells/*/*/*/r*/cell.json")
    names = [results / n for n in ("summary.csv", "verdicts.csv", "correctness.csv")]
    summary, verdicts = collect_and_judge(cells, sweep, *names)
    build_report(
        names[0],
        names[1],
        cells,
        results / "report.html",
        ReportSettings(
            list(sweep.stacks),
            list(sweep.variants),
            sweep.analysis,
            slo=sweep.raw.get("slo"),
            cost=sweep.raw.get("cost"),
            repeats=sweep.repeats_rule,
        ),
        current_client_version=CLIENT_VERSION,
        correctness_csv=names[2],
    )
    first = len(sweep.jobs)  # the boots a fixed sweep plans, a staged one's first stage
    counts = f"{len(summary)} rows, {len(verdicts)} verdicts"
    print(f"{len(cells)} boots (planned first: {first}): {counts}")
    print(f"wrote {results}/report.html")


def append_lease(run_dir: Path, other: Path) -> int:
    """Copy other's finished boots (a cell.json) into run_dir, each cell's after the
    repeats run_dir has of it, renumbered in order; returns how many."""
    cells = run_dir / "results" / "cells"
    done = 0
    for cell in sorted(other.glob("results/cells/*/*/*"), key=str):
        boots = sorted(
            (p for p in cell.glob("r*") if (p / "cell.json").exists()),
            key=lambda p: int(p.name[1:]),
        )
        target = cells / cell.relative_to(other / "results" / "cells")
        have = [int(p.name[1:]) for p in target.glob("r*")] if target.exists() else []
        start = max(have, default=-1) + 1
        for n, boot in enumerate(boots):
            dest = target / f"r{start + n}"
            shutil.copytree(boot, dest)
            record = json.loads((dest / "cell.json").read_text())
            record["repeat"] = start + n
            (dest / "cell.json").write_text(json.dumps(record))
            done += 1
    return done


if __name__ == "__main__":
    main()
