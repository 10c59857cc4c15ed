"""Repack a GPU run's requests.tar.xz (benchmarks/gpu/wait.sh) for the repo: every request's
record kept, without its per-chunk arrival times (`chunk_times_ms`, `chunk_tokens`), which
make up most of the bytes and which nothing in benchmarks/results/gpu reads back.

    python benchmarks/gpu/slim_requests.py IN/requests.tar.xz OUT/requests.tar.xz

Member names, order and every other field are kept; mtime 0 and owner 0, so a repack of the
same input is byte-identical.
"""

from __future__ import annotations

import io
import json
import lzma
import sys
import tarfile

DROPPED = ("chunk_times_ms", "chunk_tokens")


def slim_line(line: str) -> str:
    row = json.loads(line)
    for key in DROPPED:
        row.pop(key, None)
    return json.dumps(row, separators=(",", ":"))


def main(src: str, dst: str) -> None:
    buf = io.BytesIO()
    with (
        tarfile.open(src) as tin,
        tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tout,
    ):
        for m in tin.getmembers():
            if not m.isfile():
                continue
            data = tin.extractfile(m).read()
            if m.name.endswith(".jsonl"):
                text = data.decode()
                data = "".join(slim_line(x) + "\n" for x in text.splitlines() if x.strip()).encode()
            info = tarfile.TarInfo(m.name)
            info.size, info.mode = len(data), 0o644
            tout.addfile(info, io.BytesIO(data))
    with open(dst, "wb") as f:
        f.write(lzma.compress(buf.getvalue(), preset=9))
    print(f"{dst}: {len(buf.getvalue())} bytes of tar, written xz")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
