"""The GPU records under benchmarks/results/gpu read back: slim_requests.py keeps every request
and field but the chunk times, the same bytes twice; auto_stop.py on the committed records of
the fixed stop gives the table committed with them (docs/sglang-h200.md)."""

import io
import json
import lzma
import subprocess
import sys
import tarfile

from fixtures.paths import ROOT

GPU = ROOT / "benchmarks" / "gpu"
RECORDS = ROOT / "benchmarks" / "results" / "gpu"


def requests_archive(path) -> list[dict]:
    rows = [
        {
            "i": i,
            "output_tokens": 16,
            "end_s": 0.5 * i,
            "chunk_times_ms": [1.0, 2.0],
            "chunk_tokens": [8, 8],
        }
        for i in range(5)
    ]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    with tarfile.open(path, "w:xz") as tar:
        for name in ("results/cells/s/m/v/r0/levels/L1_i0.requests.jsonl", "results/x.json"):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return rows


def members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_slim_requests_drops_only_chunk_times(tmp_path):
    rows = requests_archive(tmp_path / "in.tar.xz")
    for out in ("a.tar.xz", "b.tar.xz"):
        subprocess.run(
            [
                sys.executable,
                str(GPU / "slim_requests.py"),
                str(tmp_path / "in.tar.xz"),
                str(tmp_path / out),
            ],
            check=True,
            capture_output=True,
        )
    assert (tmp_path / "a.tar.xz").read_bytes() == (tmp_path / "b.tar.xz").read_bytes()
    got = members(tmp_path / "a.tar.xz")
    before = members(tmp_path / "in.tar.xz")
    assert got["results/x.json"] == before["results/x.json"]  # not a .jsonl: as it was
    slim = [
        json.loads(x)
        for x in got["results/cells/s/m/v/r0/levels/L1_i0.requests.jsonl"].splitlines()
    ]
    expected = [{k: v for k, v in r.items() if not k.startswith("chunk_")} for r in rows]
    assert slim == expected


def test_auto_stop_table_matches_the_committed_records(tmp_path):
    run = RECORDS / "sglang-auto-fixed-h100"
    committed = json.loads((run / "auto_stop.json").read_text())
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("results.tar.xz", "requests.tar.xz"):
        (copy / name).write_bytes((run / name).read_bytes())
    subprocess.run(
        [sys.executable, str(GPU / "auto_stop.py"), str(copy)], check=True, capture_output=True
    )
    assert json.loads((copy / "auto_stop.json").read_text()) == committed
    by_level = {r["level"]: r for r in committed}
    # the fix the rerun shows: at one stream the recorded RSE and the requests' own agree
    assert abs(by_level[1]["rse_recorded"] / by_level[1]["rse_from_ends"] - 1) < 0.1
    assert lzma.decompress((run / "requests.tar.xz").read_bytes())  # a real xz stream
