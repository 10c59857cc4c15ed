"""The summary, verdicts and report of a sweep from whatever boots it has: a device lease that
ended before every cell ran still leaves whole boots (results/cells/**/cell.json) behind, and
Snakemake would want to run the missing ones before its collect and report.

    python benchmarks/gpu/render.py RUN_DIR CONFIG

RUN_DIR holds results/ (results.tar.xz unpacked); writes RUN_DIR/results/summary.csv,
verdicts.csv, correctness.csv and report.html with the package's own collect, judge and
report (scripts/collect.py, scripts/report.py), naming how many boots it found.
"""

from __future__ import annotations

import argparse
import os
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
    args = parser.parse_args()
    sweep = load_file(args.config.resolve())
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


if __name__ == "__main__":
    main()
