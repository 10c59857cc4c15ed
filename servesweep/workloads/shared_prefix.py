"""Workload kind `shared_prefix` (docs/load_modes.md): prompts in groups that share a prefix,
which exercises prefix / radix caching. Seeded like the random kind, with exact token
counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from servesweep.workloads.base import Prompt, Workload, count_tokens
from servesweep.workloads.random_tokens import lengths, random_prompts, ranged_prompts


@dataclass(frozen=True, kw_only=True)
class SharedPrefixWorkload(Workload):
    """Kind `shared_prefix`: its own keys, both needed, and `output_tokens`."""

    KIND: ClassVar[str] = "shared_prefix"
    REFUSED: ClassVar[Mapping[str, str]] = {"path": "its prompts are generated, not read"}

    output_tokens: int = field()

    groups: int  # groups of requests that share a prefix
    prefix_tokens: int  # tokens of each group's shared prefix

    def prompts(self, tokenizer, n: int, seed: int) -> list[Prompt]:
        """n prompts in `groups` groups: request i belongs to group i mod groups and starts
        with that group's `prefix_tokens`-token prefix, followed by its own `input_tokens`
        random tokens (as SGLang's generated-shared-prefix dataset: a system prompt, then a
        question). A newline separates them, so their tokens do not merge; `input_tokens`
        of each prompt is its whole length, counted."""
        groups, prefix = self.groups, self.prefix_tokens
        heads = random_prompts(tokenizer, groups, prefix, 1, seed * 31 + 1)
        rng = np.random.default_rng([seed, 2])
        ins = lengths(rng, n, self.input_tokens, self.range_ratio)
        outs = lengths(rng, n, self.output_tokens, self.range_ratio)
        tails = ranged_prompts(tokenizer, n, max(ins), self.output_tokens, None, seed)
        out = []
        for i in range(n):
            tail_text = tails[i].text
            if ins[i] < max(ins):
                ids = tokenizer.encode(tail_text, add_special_tokens=False).ids[: ins[i]]
                tail_text = tokenizer.decode(ids)
            text = heads[i % groups].text + "\n" + tail_text
            out.append(Prompt(text, count_tokens(tokenizer, text), outs[i]))
        return out
