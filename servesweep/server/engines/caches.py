"""Compile caches that outlive a boot: where an engine keeps them, and what they held.

A first boot on a fresh host compiles kernels (Triton, FlashInfer's and tvm-ffi's JIT,
torch.compile) into directories under the home directory or /tmp; later boots load them.
So boot times of one cell differ for that reason alone, and which boot found the caches
warm is a fact of the boot (`Engine.cache_state`, recorded in the cell's `boot_facts`).

Each engine names its directories (`Engine.cache_dirs`) from the server's environment:
the variables that move them are honoured, so the state read is the state the server saw.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

# A cache directory is walked to count what it holds; stop counting past this many files
# (the count is then a lower bound, said so by `truncated`).
MAX_FILES = 200_000


def home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def xdg_cache(env: Mapping[str, str]) -> Path:
    return Path(env.get("XDG_CACHE_HOME") or home(env) / ".cache")


def triton_cache(env: Mapping[str, str]) -> Path:
    """Triton's kernel cache: TRITON_CACHE_DIR, else TRITON_HOME (default ~)/.triton/cache."""
    if env.get("TRITON_CACHE_DIR"):
        return Path(env["TRITON_CACHE_DIR"])
    return Path(env.get("TRITON_HOME") or home(env)) / ".triton" / "cache"


def inductor_cache(env: Mapping[str, str]) -> Path:
    """torch.compile's (Inductor's) cache: TORCHINDUCTOR_CACHE_DIR, else
    <tmp>/torchinductor_<user>."""
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(env["TORCHINDUCTOR_CACHE_DIR"])
    user = env.get("USER") or env.get("LOGNAME") or _user()
    return Path(env.get("TMPDIR") or tempfile.gettempdir()) / f"torchinductor_{user}"


def flashinfer_cache(env: Mapping[str, str]) -> Path:
    """FlashInfer's JIT cache: FLASHINFER_WORKSPACE_BASE (default ~)/.cache/flashinfer."""
    return Path(env.get("FLASHINFER_WORKSPACE_BASE") or home(env)) / ".cache" / "flashinfer"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def dir_contents(path: Path) -> dict:
    """{"files": n, "bytes": b} under path (0 and 0 where it does not exist), and
    `truncated` where the walk stopped at MAX_FILES."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
            if files >= MAX_FILES:
                return {"files": files, "bytes": size, "truncated": True}
    return {"files": files, "bytes": size}


def cache_state(dirs: Mapping[str, Path]) -> dict:
    """What each cache directory held before a launch, and in one word: `caches` is `cold`
    (all empty or missing), `warm` (all hold files) or `partial`; {} without directories.

        {"caches": "partial",
         "cache_dirs": {"triton": {"path": "/root/.triton/cache", "files": 120,
                                   "bytes": 12582912}, ...}}
    """
    if not dirs:
        return {}
    found = {name: {"path": str(path), **dir_contents(path)} for name, path in dirs.items()}
    full = sum(1 for d in found.values() if d["files"])
    word = "cold" if full == 0 else "warm" if full == len(found) else "partial"
    return {"caches": word, "cache_dirs": found}


def note_growth(facts: dict, dirs: Mapping[str, Path]) -> None:
    """Add what each directory of `facts["cache_dirs"]` holds now (after the boot) as
    `files_after_boot` / `bytes_after_boot`: a boot that compiled grew them."""
    for name, entry in (facts.get("cache_dirs") or {}).items():
        if name in dirs:
            now = dir_contents(dirs[name])
            entry["files_after_boot"], entry["bytes_after_boot"] = now["files"], now["bytes"]
