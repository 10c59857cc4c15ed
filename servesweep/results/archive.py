"""A sweep's results as one file, to resume it anywhere.

`pack` writes what a resume needs into one reproducible `.tar.xz`: every finished boot
(its directory under results/cells, holding cell.json, which is written last, so a boot
cut mid-level, which has none, is left out whole) and the hunt (results/hunt/: its steps
and hunt.json). Not the plan, the tables and the report: the plan rule and collect and
report make them again from the boots (an unpacked plan would pass for current, since
Snakemake's metadata does not travel, and say what the packing machine would run). Not
the logs, not resources/ (a fresh clone
builds them again; each boot's cell.json copies the manifests it was measured on, and the
workflow keeps it while the rebuilt resources have the same identity:
servesweep.sweep.resume). The same records give the same bytes: names sorted, one mtime
(SOURCE_DATE_EPOCH, else a fixed date), owner root, modes 0644 / 0755.

`unpack` puts an archive's results/ into a working directory (a fresh clone), refusing
any member outside results/; then the same `snakemake` target runs only what is missing.

    python -m servesweep.results.archive pack [--root .] [--out results/sweep.tar.xz]
    python -m servesweep.results.archive unpack ARCHIVE [--root .]
"""

from __future__ import annotations

import argparse
import io
import lzma
import os
import sys
import tarfile
from pathlib import Path
from typing import NamedTuple

from servesweep.sweep.layout import Paths

DEFAULT_OUT = "results/sweep.tar.xz"
FIXED_MTIME = 946684800  # 2000-01-01T00:00:00Z, unless SOURCE_DATE_EPOCH says otherwise
KEPT_DIRS = ("results/hunt",)


class Packed(NamedTuple):
    path: Path
    boots: int  # finished boots packed
    left_out: int  # boot directories without cell.json (cut mid-boot)
    files: int
    bytes: int  # the archive's size


def finished_boots(paths: Paths) -> tuple[list[Path], list[Path]]:
    """(finished, unfinished) boot directories under results/cells."""
    dirs = sorted(p for p in (paths.results / "cells").glob("*/*/*/r*") if p.is_dir())
    return [d for d in dirs if (d / "cell.json").is_file()], [
        d for d in dirs if not (d / "cell.json").is_file()
    ]


def members(root: Path) -> tuple[list[Path], int]:
    """The files a resume needs, relative to root and sorted; and how many boot
    directories were left out as unfinished."""
    paths = Paths(Path(root))
    done, cut = finished_boots(paths)
    files = [f for d in done for f in d.rglob("*") if f.is_file()]
    for kept in KEPT_DIRS:
        files += [f for f in (root / kept).rglob("*") if f.is_file() and not f.name.startswith(".")]
    # Temporary files of an atomic write in flight are no record.
    files = [f for f in files if not (f.name.startswith(".") and f.name.endswith(".tmp"))]
    return sorted({f.relative_to(root) for f in files}, key=str), len(cut)


def _info(name: str, size: int, mtime: int, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 0 if directory else size
    info.mtime = mtime
    info.mode = 0o755 if directory else 0o644
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def pack(root: Path = Path("."), out: Path | None = None) -> Packed:
    """Write the archive (atomically) and say what it holds."""
    root = Path(root)
    out = Path(out) if out else root / DEFAULT_OUT
    files, cut = members(root)
    files = [f for f in files if (root / f).resolve() != out.resolve()]
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", FIXED_MTIME))
    dirs = sorted({str(p) for f in files for p in f.parents if str(p) != "."})
    buffer = io.BytesIO()
    # The tar is built in memory and compressed apart, so no timestamp or name of the
    # output file enters the bytes (xz stores none; gzip would).
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(dirs + [str(f) for f in files]):
            if name in dirs:
                tar.addfile(_info(name, 0, mtime, directory=True))
            else:
                data = (root / name).read_bytes()
                tar.addfile(_info(name, len(data), mtime), io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_bytes(lzma.compress(buffer.getvalue(), preset=6))
    tmp.replace(out)
    boots = sum(1 for f in files if f.name == "cell.json")
    return Packed(out, boots, cut, len(files), out.stat().st_size)


def unpack(archive: Path, root: Path = Path(".")) -> int:
    """Extract an archive's results/ into root; return the number of files. A member
    outside results/ (or a link, a device) is refused with one line naming it."""
    root = Path(root)
    with tarfile.open(archive, mode="r:*") as tar:
        infos = tar.getmembers()
        for info in infos:
            parts = Path(info.name).parts
            if (
                not parts
                or parts[0] != "results"
                or ".." in parts
                or not (info.isfile() or info.isdir())
            ):
                raise ValueError(f"{archive}: member {info.name!r} is not a file under results/")
        tar.extractall(root, filter="data")
    return sum(1 for info in infos if info.isfile())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m servesweep.results.archive", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="pack what a resume needs into one .tar.xz")
    p.add_argument("--root", default=".", help="the working directory (default: .)")
    p.add_argument("--out", default=None, help=f"the archive (default: ROOT/{DEFAULT_OUT})")
    u = sub.add_parser("unpack", help="unpack an archive's results/ into a working directory")
    u.add_argument("archive")
    u.add_argument("--root", default=".", help="the working directory (default: .)")
    args = parser.parse_args(argv)
    if args.command == "pack":
        packed = pack(Path(args.root), Path(args.out) if args.out else None)
        print(
            f"{packed.path}: {packed.boots} finished boots, {packed.files} files, "
            f"{packed.bytes} bytes"
            + (f"; {packed.left_out} unfinished boots left out" if packed.left_out else "")
        )
        return 0
    try:
        count = unpack(Path(args.archive), Path(args.root))
    except (OSError, ValueError, tarfile.TarError) as exc:
        print(f"unpack: {exc}", file=sys.stderr)
        return 1
    print(f"{args.archive}: {count} files into {Path(args.root) / 'results'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
