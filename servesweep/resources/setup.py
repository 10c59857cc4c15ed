"""A failed setup is a result: a stack that cannot be built or a model that cannot be had
gets a manifest that says so (`status: failed`, stage, cause, message, the setup log's
tail), the setup job itself succeeds, and every cell using it becomes a failed result
without a launch (servesweep.run.cell), so the other cells run and the report is written.

A failed setup is set up again on the next invocation, always (once per invocation): its
rule's params carry the attempt after a failure (`setup_params`), as a cell's carry a
retried boot's. A setup failure is no measurement, and is mostly cured outside anything
Snakemake sees (the network, a registry, a tool installed); a manifest that succeeded
keeps its attempt, so nothing reruns after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servesweep.jsonfile import read_json, utc_now, write_json
from servesweep.records import SetupFailure
from servesweep.resources.identity import identity as resource_identity
from servesweep.server.failures import log_tail

# Why a setup failed: stage `stack` or `model`, and one of these causes.
SETUP_CAUSES = {
    "spec_missing": "the requirements or environment file is not there",
    "install_failed": "the installer (pip, uv, conda, docker pull, apptainer pull) failed",
    "tool_missing": "a tool the setup needs is not on PATH (uv, conda, docker, huggingface_hub)",
    "interpreter_missing": "an existing stack's interpreter (or prefix) is not there",
    "probe_failed": "the stack's interpreter could not be run or probed",
    "path_missing": "a path model's directory (or its config.json) is not there",
    "hub_refused": "the Hugging Face Hub refused: no such repository or revision, or gated",
    "hub_unreachable": "the Hugging Face Hub could not be reached",
    "fetch_failed": "fetching the model failed otherwise",
    "build_failed": "building the synthetic model failed",
    "bad_source": "the model's source entry is not usable",
    "unknown": "anything else",
}
STAGES = ("stack", "model")
LOG_TAIL_LINES = 50
ATTEMPT_KEY = "setup_attempt"  # in the params only, never in a config


class SetupError(Exception):
    """A stack or model that cannot be set up: one line naming it, and a cause."""

    def __init__(self, message: str, cause: str = "unknown"):
        super().__init__(message)
        self.cause = cause if cause in SETUP_CAUSES else "unknown"


def next_setup_attempt(manifest_path: Path) -> int:
    """The attempt the next setup would carry: the recorded one, moved on after a failure."""
    manifest = read_json(Path(manifest_path))
    if not isinstance(manifest, dict):
        return 0
    attempt = int(manifest.get("attempt") or 0)
    return attempt + 1 if manifest.get("status") == "failed" else attempt


def setup_params(config: dict, manifest_path: Path) -> dict:
    """The setup rule's param: the stack's (model's) config as it always was, with the
    attempt added only once a setup failed (so no manifest from before this rule changed
    reruns)."""
    attempt = next_setup_attempt(manifest_path)
    return dict(config) if attempt == 0 else {**config, ATTEMPT_KEY: attempt}


def split_params(params: dict) -> tuple[dict, int]:
    """(config, attempt) from `setup_params`."""
    config = dict(params)
    return config, int(config.pop(ATTEMPT_KEY, 0))


def run_setup(
    stage: str,
    name: str,
    build: Callable[[], dict],
    dest: Path,
    log_path: Path,
    attempt: int = 0,
    identity: dict | None = None,
    log=print,
    config: dict | None = None,
) -> dict:
    """Run `build` (which writes dest/manifest.json); on a SetupError write a failed
    manifest instead. Either way the manifest carries `status`, `attempt` and, given the
    sweep file's entry (`config`), its `identity` (servesweep.resources.identity). The
    `identity` argument names the stack or model in a failed manifest (`stack`/`kind`,
    `model`/`source`)."""
    start = time.monotonic()
    path = Path(dest) / "manifest.json"
    try:
        manifest = build()
    except SetupError as exc:
        log(f"FAILED: {stage} {name!r}: {exc.cause}: {exc}")
        manifest = {
            **(identity or {}),
            "status": "failed",
            "failure": {
                "stage": stage,
                "cause": exc.cause,
                "message": str(exc),
                "log_tail": log_tail(Path(log_path), LOG_TAIL_LINES),
            },
            "built_at": utc_now(),
            # the manifests' own names: a stack's build_s, a model's built_s
            ("build_s" if stage == "stack" else "built_s"): round(time.monotonic() - start, 1),
        }
    else:
        manifest = {**manifest, "status": "ok"}
    manifest["attempt"] = attempt
    if config is not None:
        manifest["identity"] = resource_identity(config, manifest)
    Path(dest).mkdir(parents=True, exist_ok=True)
    write_json(path, manifest)
    return manifest


def setup_failure(
    stack_manifest: Mapping[str, Any] | None, model_manifest: Mapping[str, Any] | None
) -> SetupFailure | None:
    """The failure a cell inherits from its stack's or model's setup (the stack's first),
    as a cell record's `failure` less `level` and `repeat`; None when both are set up."""
    failed: list[tuple[str, Mapping[str, Any]]] = [
        (stage, manifest or {})  # a failed manifest is never empty
        for stage, manifest in (("stack", stack_manifest), ("model", model_manifest))
        if (manifest or {}).get("status") == "failed"
    ]
    if not failed:
        return None
    (stage, manifest), others = failed[0], failed[1:]
    failure = manifest.get("failure") or {}
    message = f"{stage} {manifest.get(stage)!r} could not be set up: {failure.get('message')}"
    for other_stage, other in others:
        message += f"; {other_stage} {other.get(other_stage)!r} failed too"
    return {
        "stage": stage,
        "cause": failure.get("cause") or "unknown",
        "message": message,
        "log_tail": failure.get("log_tail") or [],
    }
