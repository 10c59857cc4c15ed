"""A sweep that moves: interrupted the way machines are interrupted, packed into one
archive, unpacked in a fresh working directory elsewhere (no resources/, no .snakemake)
and resumed with the same command: only the missing boots run, and the tables equal
those of the same boots collected in one go."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from fixtures.faults import config, fault_hunt, kill_if_running, wait_for, write
from fixtures.workflow import jobs_run, processes_in, run_snakemake, snakemake_cmd

from servesweep.server.procs import descendants

pytestmark = pytest.mark.workflow

TABLES = ("summary.csv", "verdicts.csv", "correctness.csv")
CELLS = "results/cells/test/tiny"


def sweep_config(variants=3, boots=3):
    # One short level; gap-ms makes it last ~0.5 s, so a boot is mid-level when stopped.
    names = ["baseline", "v1", "v2"][:variants]
    cfg = config(
        {name: {"flags": {"gap-ms": 20 + 5 * i, "boot-s": 0.2}} for i, name in enumerate(names)},
        levels=(4,),
        min_prompts=12,
    )
    cfg["benchmark"]["repeats"] = boots
    cfg["correctness"] = False
    return cfg


def finished(workdir):
    return sorted(str(p.relative_to(workdir)) for p in (workdir / CELLS).glob("*/r*/cell.json"))


def level_started(workdir, count):
    """True once `count` boots are finished and the next one is in its level."""
    if len(finished(workdir)) != count:
        return False
    logs = (workdir / "results/logs/run_cell/test/tiny").glob("*/r*.log")
    return any(
        "level 4 (L4_i0" in log.read_text()
        for log in logs
        if not (workdir / CELLS / log.parent.name / log.stem / "cell.json").exists()
    )


def stop_after(workdir, cfg_path, boots, how):
    """Run the sweep and stop it the way `how` says once `boots` boots are finished and
    the next is mid-level; return the seconds until no process was left in workdir."""
    owner = subprocess.Popen(
        snakemake_cmd(workdir, "results/report.html", "--cores", "1", "--configfile", cfg_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd=workdir,
    )
    try:
        wait_for(lambda: level_started(workdir, boots), 120, f"boot {boots + 1}'s level")
        if how == "SIGTERM-tree":
            # A spot reclaim: every process of the sweep gets SIGTERM at once.
            for pid in [owner.pid, *descendants(owner.pid)]:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        else:
            owner.send_signal(signal.SIGKILL)  # Snakemake itself, no chance to clean up
        start = time.monotonic()
        owner.wait(timeout=60)
        wait_for(lambda: not processes_in(workdir), 30, "no process left in the sweep's dir")
        return time.monotonic() - start
    finally:
        kill_if_running(owner)


def pack(workdir, out):
    done = subprocess.run(
        [sys.executable, "-m", "servesweep.results.archive", "pack", "--out", str(out)],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def move_and_resume(tmp_path, cfg, done: list[str], total: int | None):
    """Pack `here`, unpack in a fresh directory elsewhere, resume there with the same
    command; check that exactly the missing boots ran (`total` boots in all; None: as
    many as the sweep ends with, a hunt's); return the new directory."""
    here, elsewhere = tmp_path / "here", tmp_path / "other" / "clone"
    elsewhere.mkdir(parents=True)
    started = {p: json.loads((here / p).read_text())["started_at"] for p in done}
    archive = tmp_path / "sweep.tar.xz"
    assert f"{len(done)} finished boots" in pack(here, archive)
    unpacked = subprocess.run(
        [sys.executable, "-m", "servesweep.results.archive", "unpack", str(archive)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    assert finished(elsewhere) == done

    resumed = run_snakemake(
        elsewhere, "results/report.html", "--cores", "1", "--configfile", write(elsewhere, cfg)
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    ran = [f"{CELLS}/{w['variant']}/r{w['repeat']}/cell.json" for w in jobs_run(resumed)]
    total = total or len(finished(elsewhere))
    assert len(ran) == len(set(ran)) == total - len(done), sorted(ran)
    assert not set(ran) & set(done)  # none rerun
    for path, when in started.items():
        assert json.loads((elsewhere / path).read_text())["started_at"] == when
    assert len(finished(elsewhere)) == total
    assert not processes_in(elsewhere)
    return elsewhere


def test_a_sweep_stopped_by_sigterm_to_every_process_moves_and_resumes(tmp_path):
    # The bar: 3 variants x 3 boots, stopped after 4 boots as a spot reclaim stops a
    # machine, packed, unpacked elsewhere, resumed: 5 boots run, 0 rerun.
    here = tmp_path / "here"
    here.mkdir()
    cfg = sweep_config()
    assert stop_after(here, write(here, cfg), 4, "SIGTERM-tree") < 20
    done = finished(here)
    assert len(done) == 4
    elsewhere = move_and_resume(tmp_path, cfg, done, 9)

    # The same boots collected in one go, in a third place: the same tables, byte for
    # byte (an uninterrupted run's own boots would differ by their timings, so the
    # honest comparison is the same records through collect without the move).
    again = tmp_path / "again"
    shutil.copytree(elsewhere / "results" / "cells", again / "results" / "cells")
    collected = run_snakemake(
        again, "results/summary.csv", "--cores", "1", "--configfile", write(again, cfg)
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert jobs_run(collected) == []
    for table in TABLES:
        assert (again / "results" / table).read_bytes() == (
            elsewhere / "results" / table
        ).read_bytes(), table
    dry = run_snakemake(elsewhere, "-n", "--cores", "1", "--configfile", write(elsewhere, cfg))
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-2000:]


def test_a_sweep_whose_snakemake_is_sigkilled_leaves_nothing_and_resumes(tmp_path):
    # The job follows its Snakemake (it unwinds through teardown, the server ends with
    # it), so the boot cut mid-level leaves no cell.json and is measured again.
    here = tmp_path / "here"
    here.mkdir()
    cfg = sweep_config(variants=2, boots=1)
    assert stop_after(here, write(here, cfg), 1, "SIGKILL-snakemake") < 20
    done = finished(here)
    assert done == [f"{CELLS}/baseline/r0/cell.json"]
    assert (here / CELLS / "v1" / "r0" / "levels").exists()  # what it measured before
    move_and_resume(tmp_path, cfg, done, 2)


def hunt_config():
    """A hunt of one clear winner, 2 boots a side: round 1 (4 boots), then its confirm."""
    start = {"greedy": True, "gap-ms": 40, "scatter-cv": 0.03, "seed": 7, "boot-s": 0.2}
    return fault_hunt(
        start,
        candidates={"fast": {"env": {"FAULT_BOOST_A": "3.0"}}},
        min_effect_pct=5,
        boots={"min": 2, "max": 2},
        budget={"boot_minutes": 0.1},
        ablate=False,
        design="sequential",  # its round 1 is the place to stop mid-round
    )


def test_a_hunt_stopped_mid_round_moves_and_asks_exactly_for_what_is_missing(tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    cfg = hunt_config()
    assert stop_after(here, write(here, cfg), 2, "SIGTERM-tree") < 20
    done = finished(here)
    assert len(done) == 2 and not (here / "results/hunt/hunt.json").exists()
    steps = sorted(p.name for p in (here / "results/hunt/steps").glob("s*.json"))
    assert steps == ["s0.json"]  # round 1's first step needs its 4 boots
    elsewhere = move_and_resume(tmp_path, cfg, done, None)
    hunt = json.loads((elsewhere / "results/hunt/hunt.json").read_text())
    assert hunt["incumbent"] == ["fast"]
    assert sorted(hunt["cells"]) == finished(elsewhere)
    assert hunt["spent"]["boots"] == len(finished(elsewhere))
