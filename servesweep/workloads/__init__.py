"""The prompts a level sends, by workload kind: one module per kind, each with
`prompts(tokenizer, n, workload, seed)` and its KindKeys; `make_prompts` picks it by
`benchmark.workload.kind`. A new kind is one module here, its entry in _MODULES, and its
keys in the schema."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from servesweep.workloads import random_tokens, shared_prefix, sharegpt
from servesweep.workloads.base import KindKeys, Prompt

_MODULES = {"random": random_tokens, "sharegpt": sharegpt, "shared_prefix": shared_prefix}
KINDS: dict[str, Callable[..., list[Prompt]]] = {k: m.prompts for k, m in _MODULES.items()}
KIND_KEYS: dict[str, KindKeys] = {k: m.KEYS for k, m in _MODULES.items()}


def workload_problem(workload: dict) -> str | None:
    """What is wrong with a `benchmark.workload` for its kind, as `key: what`, by the kinds'
    own KindKeys (None: nothing)."""
    kind = workload.get("kind", "random")
    mine = KIND_KEYS[kind]
    for other, keys in KIND_KEYS.items():
        for key in keys.own:
            if key in workload and key not in mine.own:
                return f"{key}: only for kind {other}"
    for key in mine.required:
        if key not in workload:
            return f"{key}: required for kind {kind}"
    for key, why in mine.refused.items():
        if key in workload:
            return f"{key}: not for kind {kind} ({why})"
    return None


def make_prompts(tokenizer, n: int, workload: Mapping, seed: int) -> list[Prompt]:
    """n prompts of the workload's kind, seeded by `seed`."""
    return KINDS[workload["kind"]](tokenizer, n, workload, seed)
