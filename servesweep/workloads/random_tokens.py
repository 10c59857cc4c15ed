"""Workload kind `random`: prompts of random tokens with exact token counts, every one of
`input_tokens` (or, with `range_ratio`, lengths drawn from [range_ratio × length, length])."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, cast

import numpy as np

from servesweep.workloads.base import Prompt, Workload, clean_ids, fit_text


@dataclass(frozen=True, kw_only=True)
class RandomWorkload(Workload):
    """Kind `random`: the shared keys only, `output_tokens` needed."""

    KIND: ClassVar[str] = "random"
    REFUSED: ClassVar[Mapping[str, str]] = {"path": "its prompts are generated, not read"}

    output_tokens: int = field()

    def prompts(self, tokenizer, n: int, seed: int) -> list[Prompt]:
        if self.range_ratio is not None:
            return ranged_prompts(
                tokenizer, n, self.input_tokens, self.output_tokens, self.range_ratio, seed
            )
        return random_prompts(tokenizer, n, self.input_tokens, self.output_tokens, seed)


def random_prompts(tokenizer, n: int, input_tokens: int, output_tokens: int, seed: int) -> list:
    """n prompts of random tokens, each exactly input_tokens long (without special tokens).
    The same tokenizer and seed always give the same prompts.

    Decoded random ids rarely re-encode to the same count (merges across token boundaries
    differ), so every text is re-encoded and cut or extended until its count is exact. This
    runs in rounds over the whole batch, since the batch calls are fast and parallel."""
    if input_tokens < 1:
        raise ValueError("input_tokens must be at least 1")
    rng = np.random.default_rng(seed)
    pool = clean_ids(tokenizer)
    texts = tokenizer.decode_batch(rng.choice(pool, size=(n, input_tokens)).tolist())
    todo = list(range(n))
    for _ in range(10):
        if not todo:
            break
        encoded = tokenizer.encode_batch([texts[i] for i in todo], add_special_tokens=False)
        long, short = [], []
        for i, e in zip(todo, encoded, strict=True):
            if len(e.ids) > input_tokens:
                long.append((i, e.ids[:input_tokens]))
            elif len(e.ids) < input_tokens:
                short.append((i, input_tokens - len(e.ids)))
        for (i, _), text in zip(
            long, tokenizer.decode_batch([ids for _, ids in long]), strict=True
        ):
            texts[i] = text
        for i, missing in short:
            texts[i] += tokenizer.decode(rng.choice(pool, size=missing).tolist())
        todo = sorted(i for i, _ in long + short)
    for i in todo:  # the few that did not settle in the batch rounds
        texts[i] = fit_text(tokenizer, rng, pool, texts[i], input_tokens)
    return [Prompt(text, input_tokens, output_tokens) for text in texts]


def lengths(rng: np.random.Generator, n: int, length: int, ratio: float | None) -> list[int]:
    """n lengths drawn uniformly from the integers in [ceil(ratio × length), length];
    all `length` without a ratio."""
    if ratio is None:
        return [length] * n
    low = max(1, math.ceil(ratio * length))
    return rng.integers(low, length + 1, size=n).tolist()


def ranged_prompts(
    tokenizer, n: int, input_tokens: int, output_tokens: int, ratio: float | None, seed: int
) -> list[Prompt]:
    """Random prompts whose input and output lengths are each drawn from
    [ratio × length, length] (InferenceX's random workload uses 0.8)."""
    rng = np.random.default_rng([seed, 1])
    ins = lengths(rng, n, input_tokens, ratio)
    outs = lengths(rng, n, output_tokens, ratio)
    prompts: list[Prompt | None] = [None] * n
    for length in sorted(set(ins)):
        where = [i for i, v in enumerate(ins) if v == length]
        made = random_prompts(tokenizer, len(where), length, 1, seed * 7919 + length)
        for i, p in zip(where, made, strict=True):
            prompts[i] = Prompt(p.text, length, outs[i])
    return cast(list[Prompt], prompts)  # every index is some length's
