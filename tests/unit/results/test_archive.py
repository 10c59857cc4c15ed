"""One archive of a sweep's results: what it holds, that it is reproducible, and that
unpacking it refuses anything outside results/."""

import io
import os
import tarfile

import pytest

from servesweep.results.archive import main, pack, unpack


def boot(root, variant, repeat, finished=True):
    d = root / "results" / "cells" / "s" / "m" / variant / f"r{repeat}"
    (d / "levels").mkdir(parents=True)
    (d / "levels" / "L1_i0.json").write_text('{"level": 1}\n')
    (d / "levels" / "L1_i0.requests.jsonl").write_text("{}\n" * 3)
    (d / "server.log").write_text("log\n")
    if finished:
        (d / "cell.json").write_text(f'{{"variant": "{variant}", "repeat": {repeat}}}\n')
    return d


def sweep(root):
    boot(root, "baseline", 0)
    boot(root, "cb", 0)
    boot(root, "cb", 1, finished=False)  # cut mid-level: no cell.json
    steps = root / "results" / "hunt" / "steps"
    steps.mkdir(parents=True)
    (steps / "s0.json").write_text('{"step": 0}\n')
    (root / "results" / "summary.csv").write_text("derived\n")
    (root / "results" / "plan.json").write_text("{}\n")
    (root / "results" / "cells" / "s" / "m" / "cb" / "r0" / ".cell.json.9.tmp").write_text("x")


def names(archive):
    with tarfile.open(archive) as tar:
        return [m.name for m in tar.getmembers() if m.isfile()]


def test_finished_boots_and_the_hunt_only(tmp_path):
    sweep(tmp_path)
    packed = pack(tmp_path)
    assert (packed.boots, packed.left_out) == (2, 1)
    held = names(packed.path)
    assert held == sorted(held)
    assert "results/cells/s/m/cb/r0/levels/L1_i0.requests.jsonl" in held
    assert "results/hunt/steps/s0.json" in held
    assert not [n for n in held if "/r1/" in n or n.endswith(".tmp")]
    assert not {"results/summary.csv", "results/plan.json"} & set(held)


def test_the_same_records_give_the_same_bytes(tmp_path):
    for where in ("a", "b"):
        sweep(tmp_path / where)
    first = pack(tmp_path / "a", tmp_path / "one.tar.xz").path.read_bytes()
    # Another folder, other file times: the same archive.
    for f in (tmp_path / "b").rglob("*"):
        os.utime(f, (1e9, 1e9))
    assert pack(tmp_path / "b", tmp_path / "two.tar.xz").path.read_bytes() == first
    with tarfile.open(tmp_path / "one.tar.xz") as tar:
        assert {(m.mtime, m.uid, m.uname) for m in tar.getmembers()} == {(946684800, 0, "root")}


def test_unpacked_in_another_folder_it_is_the_same_results(tmp_path):
    sweep(tmp_path / "a")
    packed = pack(tmp_path / "a")
    assert main(["unpack", str(packed.path), "--root", str(tmp_path / "b")]) == 0
    cell = "results/cells/s/m/cb/r0/cell.json"
    assert (tmp_path / "b" / cell).read_text() == (tmp_path / "a" / cell).read_text()
    assert not (tmp_path / "b" / "results/cells/s/m/cb/r1").exists()


@pytest.mark.parametrize("name", ["etc/passwd", "results/../../x", "/results/x"])
def test_a_member_outside_results_is_refused(tmp_path, name):
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="not a file under results/"):
        unpack(archive, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
