"""The prompts a level sends, by workload kind: one module per kind, each with
`prompts(tokenizer, n, workload, seed)`; `make_prompts` picks it by `benchmark.workload.kind`.
A new kind is one module here, its entry in KINDS, and its keys in the schema."""

from __future__ import annotations

from collections.abc import Callable

from servesweep.workloads import random_tokens, shared_prefix, sharegpt
from servesweep.workloads.base import Prompt

KINDS: dict[str, Callable[..., list[Prompt]]] = {
    "random": random_tokens.prompts,
    "sharegpt": sharegpt.prompts,
    "shared_prefix": shared_prefix.prompts,
}


def make_prompts(tokenizer, n: int, workload: dict, seed: int) -> list[Prompt]:
    """n prompts of the workload's kind, seeded by `seed`."""
    return KINDS[workload["kind"]](tokenizer, n, workload, seed)
