"""Seeded benchmark workloads: prompts with exact token lengths under the model's tokenizer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Prompt:
    text: str
    input_tokens: int  # length under the model's tokenizer (no special tokens)
    output_tokens: int  # max_tokens to request


def load_tokenizer(model_dir: Path):
    """The model's fast tokenizer, from model_dir/tokenizer.json."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


# Token ids that decode to text which encodes back to exactly that id, per tokenizer.
# Sampling from these makes the decode/re-encode loop converge in a step or two.
_POOLS: dict[int, tuple[object, np.ndarray]] = {}


def _clean_ids(tokenizer) -> np.ndarray:
    cached = _POOLS.get(id(tokenizer))
    if cached is not None and cached[0] is tokenizer:
        return cached[1]
    added = set(tokenizer.get_added_tokens_decoder())
    ids = [i for i in range(tokenizer.get_vocab_size(with_added_tokens=False)) if i not in added]
    texts = tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
    keep = [(i, t) for i, t in zip(ids, texts, strict=True) if t.strip() and "\ufffd" not in t]
    encoded = tokenizer.encode_batch([t for _, t in keep], add_special_tokens=False)
    pool = np.array([i for (i, _), e in zip(keep, encoded, strict=True) if e.ids == [i]])
    if len(pool) == 0:
        raise ValueError("tokenizer has no token that round-trips through decode/encode")
    _POOLS[id(tokenizer)] = (tokenizer, pool)
    return pool


def _fit(tokenizer, rng: np.random.Generator, pool: np.ndarray, text: str, n: int) -> str:
    """Cut or extend one text until it encodes to exactly n tokens; start over from fresh ids
    if it will not settle."""
    for _ in range(20):
        for _ in range(50):
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            if len(ids) == n:
                return text
            if len(ids) > n:
                text = tokenizer.decode(ids[:n])
            else:
                text = text + tokenizer.decode(rng.choice(pool, size=n - len(ids)).tolist())
        text = tokenizer.decode(rng.choice(pool, size=n).tolist())
    raise RuntimeError(f"could not build a prompt of exactly {n} tokens")


def random_prompts(tokenizer, n: int, input_tokens: int, output_tokens: int, seed: int) -> list:
    """n prompts of random tokens, each exactly input_tokens long (without special tokens).
    The same tokenizer and seed always give the same prompts.

    Decoded random ids rarely re-encode to the same count (merges across token boundaries
    differ), so every text is re-encoded and cut or extended until its count is exact. This
    runs in rounds over the whole batch, since the batch calls are fast and parallel."""
    if input_tokens < 1:
        raise ValueError("input_tokens must be at least 1")
    rng = np.random.default_rng(seed)
    pool = _clean_ids(tokenizer)
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
        texts[i] = _fit(tokenizer, rng, pool, texts[i], input_tokens)
    return [Prompt(text, input_tokens, output_tokens) for text in texts]


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
