"""Workloads that exercise serving optimizations (docs/load_modes.md): prompts in groups
that share a prefix (prefix / radix caching), and input and output lengths drawn from a
range. Seeded like `servesweep.workloads.basic`'s random prompts, with exact token counts."""

from __future__ import annotations

import math

import numpy as np

from servesweep.workloads.basic import Prompt, count_tokens, random_prompts


def lengths(rng: np.random.Generator, n: int, length: int, ratio: float | None) -> list[int]:
    """n lengths drawn uniformly from the integers in [ceil(ratio × length), length];
    all `length` without a ratio."""
    if ratio is None:
        return [length] * n
    low = max(1, math.ceil(ratio * length))
    return rng.integers(low, length + 1, size=n).tolist()


def ranged_prompts(tokenizer, n: int, workload: dict, seed: int) -> list[Prompt]:
    """Random prompts whose input and output lengths are each drawn from
    [range_ratio × length, length] (InferenceX's random workload uses 0.8)."""
    rng = np.random.default_rng([seed, 1])
    ratio = workload.get("range_ratio")
    ins = lengths(rng, n, workload["input_tokens"], ratio)
    outs = lengths(rng, n, workload["output_tokens"], ratio)
    prompts: list[Prompt | None] = [None] * n
    for length in sorted(set(ins)):
        where = [i for i, v in enumerate(ins) if v == length]
        made = random_prompts(tokenizer, len(where), length, 1, seed * 7919 + length)
        for i, p in zip(where, made, strict=True):
            prompts[i] = Prompt(p.text, length, outs[i])
    return prompts


def shared_prefix_prompts(tokenizer, n: int, workload: dict, seed: int) -> list[Prompt]:
    """n prompts in `groups` groups: request i belongs to group i mod groups and starts
    with that group's `prefix_tokens`-token prefix, followed by its own `input_tokens`
    random tokens (as SGLang's generated-shared-prefix dataset: a system prompt, then a
    question). A newline separates them, so their tokens do not merge; `input_tokens` of
    each prompt is its whole length, counted."""
    groups, prefix = workload["groups"], workload["prefix_tokens"]
    heads = random_prompts(tokenizer, groups, prefix, 1, seed * 31 + 1)
    rng = np.random.default_rng([seed, 2])
    ratio = workload.get("range_ratio")
    ins = lengths(rng, n, workload["input_tokens"], ratio)
    outs = lengths(rng, n, workload["output_tokens"], ratio)
    tails = ranged_prompts(
        tokenizer, n, {**workload, "range_ratio": None, "input_tokens": max(ins)}, seed
    )
    out = []
    for i in range(n):
        tail_text = tails[i].text
        if ins[i] < max(ins):
            ids = tokenizer.encode(tail_text, add_special_tokens=False).ids[: ins[i]]
            tail_text = tokenizer.decode(ids)
        text = heads[i % groups].text + "\n" + tail_text
        out.append(Prompt(text, count_tokens(tokenizer, text), outs[i]))
    return out
