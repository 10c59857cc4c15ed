"""What a stack or model is, not when or where it was built: its identity.

A resource's identity has two parts, both 12-hex hashes:
- `spec`: what it is built from (the sweep file's entry for it, and the requirements or
  environment file's content), known before anything is built;
- `content`: what the build gave, read from its manifest (a stack's Python and package
  versions and the hash of its `pip freeze`; a model's files, by name, size and sha256).
  Paths, build times and the host (CPU, GPUs, driver) are no part of it: a stack rebuilt
  in another folder or on another machine of the same software is the same stack.

A boot's cell.json copies both manifests, so whether a finished boot still stands for the
resources in force is a comparison of identities (`changes`), whatever the files' times.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# The facts of a stack manifest that say which software the server runs on.
STACK_CONTENT_KEYS = (
    "kind",
    "python_version",
    "torch",
    "torch_cuda",
    "transformers",
    "sglang",
    "vllm",
    "flashinfer",
    "sgl_kernel",
    "triton",
    "freeze_sha256",
    "container_image_id",
)
# Of those, the ones a change is named by in words (the rest: "its pip freeze").
STACK_NAMED_KEYS = ("python_version", "torch", "transformers", "sglang", "vllm", "flashinfer")
SPEC_FILE_KEYS = ("requirements", "env_file")
SPEC_CHANGED = "its sweep-file entry or spec file changed"


def _hash(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _file_sha256(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def spec_identity(config: dict) -> str:
    """The hash of a stack's (model's) sweep-file entry, with the content of the file it
    is built from (a requirements or environment file), not its path's mtime."""
    files = {key: _file_sha256(config[key]) for key in SPEC_FILE_KEYS if key in config}
    return _hash({"config": config, "files": files})


def content_identity(manifest: dict | None) -> str | None:
    """The hash of what a manifest describes; None for no manifest or a failed setup."""
    if not isinstance(manifest, dict) or manifest.get("status") == "failed":
        return None
    if "model" in manifest:
        files = [
            (f.get("path"), f.get("size"), f.get("sha256")) for f in manifest.get("files") or []
        ]
        return _hash({"files": files})
    return _hash({key: manifest.get(key) for key in STACK_CONTENT_KEYS})


def identity(config: dict, manifest: dict) -> dict:
    """The `identity` field a setup adds to its manifest."""
    return {"spec": spec_identity(config), "content": content_identity(manifest)}


def changes(recorded: dict | None, current: dict | None, current_spec: str | None) -> str | None:
    """Why a boot measured on the `recorded` manifest no longer stands for the resource in
    force (its `current` manifest, None before it is built, and the spec identity of the
    sweep file's entry), in words; None while it does. A manifest written before
    identities existed is compared by content only."""
    if not isinstance(recorded, dict):
        return None
    was = recorded.get("identity") or {}
    if current_spec and was.get("spec") and was["spec"] != current_spec:
        return SPEC_CHANGED
    if current is None:
        return None  # to be built: compared once it is
    old, new = content_identity(recorded), content_identity(current)
    if old is None or new is None or old == new:
        return None
    if "model" in current:
        return "its files differ"
    named = [
        f"{key} {recorded.get(key)} → {current.get(key)}"
        for key in STACK_NAMED_KEYS
        if recorded.get(key) != current.get(key)
    ]
    return ", ".join(named) if named else "its pip freeze differs"
