"""Model sources: make a model available locally and describe it in a manifest.

A source is one of
  {"synthetic": {...}}   a tiny random-weight Qwen3-MoE built offline (no hub, no torch),
  {"hf": "org/name@rev"} a pinned Hugging Face Hub snapshot,
  {"path": "/some/dir"}  a directory used in place.
`materialize` writes `dest/manifest.json` (see docs/records.md) last, so a crash never
leaves a manifest that describes half a model.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from servesweep.jsonfile import write_json
from servesweep.resources.setup import SetupError
from servesweep.resources.synthetic import SyntheticModelError, build_synthetic

SOURCE_KINDS = ("synthetic", "hf", "path")


class ModelSourceError(SetupError):
    """A model source that cannot be materialized; the message is one line naming the model,
    and a cause (servesweep.resources.setup.SETUP_CAUSES; a bad source entry by default)."""

    def __init__(self, message: str, cause: str = "bad_source"):
        super().__init__(message, cause)


def materialize(name: str, source: dict, dest: Path) -> dict:
    """Make the model available under dest/ and write dest/manifest.json; return the manifest."""
    start = time.perf_counter()
    kind, value = parse_source(name, source)
    dest = Path(dest)
    extra: dict[str, Any] = {}
    if kind == "path":
        path = resolve_path(name, value)
    dest.mkdir(parents=True, exist_ok=True)
    if kind == "synthetic":
        try:
            path, extra = build_synthetic(name, value, dest / "files")
        except SyntheticModelError as exc:
            raise ModelSourceError(str(exc), "build_failed") from None
    elif kind == "hf":
        repo_id, revision = value  # parse_source's pair
        path = download_hf(name, repo_id, revision, dest / "files")
    files = file_list(path)
    manifest = {
        "model": name,
        "source": source,
        "path": str(path),
        "synthetic": kind == "synthetic",
        "files": files,
        "total_bytes": sum(f["size"] for f in files),
        "built_s": round(time.perf_counter() - start, 3),
        **extra,
    }
    write_json(dest / "manifest.json", manifest)
    return manifest


def model_path(name: str, source: dict, models_dir: Path) -> Path:
    """The directory a server will load (once download_model ran): what the plan shows
    before a manifest exists."""
    kind, value = parse_source(name, source)
    if kind == "path":
        return Path(value).expanduser().resolve()
    return (Path(models_dir) / name / "files").resolve()


def parse_source(name: str, source: Any) -> tuple[str, Any]:
    """Return (kind, value) of a source entry, or raise ModelSourceError."""
    if not isinstance(source, dict) or len(source) != 1:
        keys = sorted(source) if isinstance(source, dict) else type(source).__name__
        raise ModelSourceError(
            f"model {name!r}: source must have exactly one of {', '.join(SOURCE_KINDS)}; got {keys}"
        )
    ((kind, value),) = source.items()
    if kind not in SOURCE_KINDS:
        raise ModelSourceError(
            f"model {name!r}: unknown source kind {kind!r} (expected one of "
            f"{', '.join(SOURCE_KINDS)})"
        )
    if kind == "synthetic" and value is not None and not isinstance(value, dict):
        raise ModelSourceError(f"model {name!r}: 'synthetic' takes a mapping of parameters")
    if kind in ("hf", "path") and (not isinstance(value, str) or not value):
        raise ModelSourceError(f"model {name!r}: {kind!r} takes a non-empty string")
    if kind == "hf":
        # A pinned revision, so a rerun months later measures the same weights.
        repo_id, sep, revision = value.partition("@")
        if not (repo_id and sep and revision):
            raise ModelSourceError(
                f"model {name!r}: hf source {value!r} must be 'org/name@revision' "
                "(a pinned revision, e.g. a commit hash)"
            )
        value = (repo_id, revision)
    return kind, value


# --- path -------------------------------------------------------------------------


def resolve_path(name: str, value: str) -> Path:
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise ModelSourceError(f"model {name!r}: path {value!r} is not a directory", "path_missing")
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"model {name!r}: path {value!r} has no config.json", "path_missing")
    return path


# --- hf ---------------------------------------------------------------------------


def download_hf(name: str, repo_id: str, revision: str, files_dir: Path) -> Path:
    fetch = f"{repo_id}@{revision}"
    try:
        import huggingface_hub  # optional dependency, so imported only when needed
    except ImportError:
        raise ModelSourceError(
            f"model {name!r}: huggingface_hub is not installed, so {fetch} cannot be fetched; "
            "pip install huggingface_hub, or download it elsewhere and use 'path:'",
            "tool_missing",
        ) from None
    try:
        huggingface_hub.snapshot_download(repo_id, revision=revision, local_dir=files_dir)
    except Exception as exc:
        # Matched by class name so that neither the hub's nor its HTTP library's exception
        # classes need importing; offline mode and DNS failures end as LocalEntryNotFound.
        names = " ".join(cls.__name__ for cls in type(exc).__mro__)
        if any(k in names for k in ("RepositoryNotFound", "RevisionNotFound", "GatedRepo")):
            problem, cause = "the Hugging Face Hub refused", "hub_refused"
        elif any(k in names for k in ("Connect", "Timeout", "Offline", "LocalEntry", "HTTP")):
            problem, cause = "cannot reach the Hugging Face Hub to fetch", "hub_unreachable"
        else:
            problem, cause = "failed to fetch", "fetch_failed"
        raise ModelSourceError(
            f"model {name!r}: {problem} {fetch} ({_short(exc)}); "
            "download it elsewhere and use 'path:'",
            cause,
        ) from None
    return files_dir.resolve()


def _short(exc: Exception, limit: int = 160) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_list(root: Path) -> list[dict]:
    """Every file under root as {path, size, sha256}, sorted; `.cache` dirs skipped."""
    root = Path(root)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".cache"]
        for fname in filenames:
            full = Path(dirpath) / fname
            with open(full, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
            files.append(
                {
                    "path": full.relative_to(root).as_posix(),
                    "size": full.stat().st_size,
                    "sha256": digest,
                }
            )
    return sorted(files, key=lambda f: f["path"])


def main(argv: list[str] | None = None) -> int:
    """python -m servesweep.resources.models NAME SOURCE_JSON DEST"""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m servesweep.resources.models NAME SOURCE_JSON DEST", file=sys.stderr)
        return 2
    try:
        manifest = materialize(args[0], json.loads(args[1]), Path(args[2]))
    except ModelSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    summary = {k: v for k, v in manifest.items() if k != "files"}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
