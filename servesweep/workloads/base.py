"""What every workload kind shares: the typed `Workload` each kind extends, the `Prompt`, the
model's tokenizer, and texts cut or extended to an exact token count under it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import ClassVar

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Workload:
    """`benchmark.workload`, read by attribute: the keys every kind reads. A kind is a
    subclass in its own module, and its keys are its fields: those it adds are its own (no
    other kind takes them), one without a default is a key it needs, and `REFUSED` names the
    shared keys it refuses, each with why. The sweep's checks read them
    (servesweep.workloads.workload_problem); the schema lists every key and fills the
    defaults (servesweep/sweep/schemas/config.schema.yaml), before `workload_of` builds one."""

    KIND: ClassVar[str]
    REFUSED: ClassVar[Mapping[str, str]] = {}

    input_tokens: int
    seed: int
    # max_tokens of every request; None: the kind's own (sharegpt: each reply's length). A
    # kind that needs it redeclares it without a default (the schema fills 16 for them).
    output_tokens: int | None = None
    range_ratio: float | None = None  # lengths drawn from [ratio × length, length]; None: exact
    path: str | None = None  # the sharegpt kind's file (the others refuse it)

    @property
    def kind(self) -> str:
        return self.KIND

    @classmethod
    def own(cls) -> tuple[str, ...]:
        """The keys only this kind takes."""
        shared = {f.name for f in fields(Workload)}
        return tuple(f.name for f in fields(cls) if f.name not in shared)

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The keys this kind needs (the shared ones the schema fills among them)."""
        return tuple(f.name for f in fields(cls) if f.default is MISSING)

    def prompts(self, tokenizer, n: int, seed: int) -> list[Prompt]:
        """n prompts of this kind, seeded by `seed`."""
        raise NotImplementedError(f"workload kind {self.KIND}")


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


def clean_ids(tokenizer) -> np.ndarray:
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


def fit_text(tokenizer, rng: np.random.Generator, pool: np.ndarray, text: str, n: int) -> str:
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
