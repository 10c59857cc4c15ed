"""Workload kind `sharegpt`: the first human turns of a ShareGPT file (`path`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from servesweep.workloads.base import Prompt, Workload, count_tokens


@dataclass(frozen=True, kw_only=True)
class ShareGPTWorkload(Workload):
    """Kind `sharegpt`: needs `path`, refuses `range_ratio`; without `output_tokens`, each
    request's max_tokens is the length of the reply that followed its prompt in the file."""

    KIND: ClassVar[str] = "sharegpt"
    REFUSED: ClassVar[Mapping[str, str]] = {"range_ratio": "its lengths come from the file"}

    # The ShareGPT JSON file, needed: field() without a default, else the shared field's
    # class attribute (None) would be taken for one.
    path: str = field()

    def prompts(self, tokenizer, n: int, seed: int) -> list[Prompt]:
        return sharegpt_prompts(Path(self.path), tokenizer, n, self.output_tokens, seed)


def sharegpt_prompts(path: Path, tokenizer, n: int, output_tokens: int | None, seed: int) -> list:
    """n prompts from a ShareGPT json file (a list of {"conversations": [{"from", "value"}]}):
    the first human turn is the prompt; max_tokens is output_tokens, or the length of the
    reply that followed it. Shuffled by seed; cycled when the file has fewer than n."""
    data = json.loads(Path(path).read_text())
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data))
    prompts: list[Prompt] = []
    for i in order:
        turns = data[i].get("conversations") or data[i].get("conversation") or []
        if len(turns) < 2 or turns[0].get("from") not in ("human", "user"):
            continue
        text, reply = turns[0].get("value") or "", turns[1].get("value") or ""
        in_tokens = count_tokens(tokenizer, text)
        out_tokens = output_tokens or count_tokens(tokenizer, reply)
        # Too-short turns say nothing about the server (same filter as vLLM's sampler).
        if in_tokens < 4 or out_tokens < 4:
            continue
        prompts.append(Prompt(text, in_tokens, out_tokens))
        if len(prompts) == n:
            return prompts
    if not prompts:
        raise ValueError(f"{path}: no usable conversations")
    return [prompts[i % len(prompts)] for i in range(n)]
