"""The prompts a level sends, by workload kind: one module per kind, each with its typed
settings (a `Workload` subclass: its keys, those it needs and refuses, and its `prompts`);
`workload_of` builds the one `benchmark.workload.kind` names. A new kind is one module here,
its type in KINDS, and its keys in the schema."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from servesweep.workloads.base import Prompt, Workload
from servesweep.workloads.random_tokens import RandomWorkload
from servesweep.workloads.shared_prefix import SharedPrefixWorkload
from servesweep.workloads.sharegpt import ShareGPTWorkload

KINDS: dict[str, type[Workload]] = {
    k.KIND: k for k in (RandomWorkload, ShareGPTWorkload, SharedPrefixWorkload)
}


def workload_problem(workload: Mapping) -> str | None:
    """What is wrong with a `benchmark.workload` for its kind, as `key: what`, by the kinds'
    own types (None: nothing)."""
    kind = workload["kind"]
    mine = KINDS[kind]
    for other, cls in KINDS.items():
        for key in cls.own():
            if key in workload and key not in mine.own():
                return f"{key}: only for kind {other}"
    for key in mine.required():
        if key not in workload:
            return f"{key}: required for kind {kind}"
    for key, why in mine.REFUSED.items():
        if key in workload:
            return f"{key}: not for kind {kind} ({why})"
    return None


def workload_of(workload: Mapping) -> Workload:
    """A `benchmark.workload` (the schema's defaults filled) as its kind's type; ValueError
    `key: what` (workload_problem) when it does not fit the kind."""
    problem = workload_problem(workload)
    if problem:
        raise ValueError(problem)
    cls = KINDS[workload["kind"]]
    return cls(**{f.name: workload[f.name] for f in fields(cls) if f.name in workload})


__all__ = ["KINDS", "Prompt", "Workload", "workload_of", "workload_problem"]
