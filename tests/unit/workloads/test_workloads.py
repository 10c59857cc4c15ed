"""Workloads that exercise optimizations: shared prefixes and length ranges, with exact
token counts under a real byte-level BPE."""

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from servesweep.workloads import shared_prefix
from servesweep.workloads.base import count_tokens
from servesweep.workloads.random_tokens import ranged_prompts


@pytest.fixture(scope="module")
def bpe():
    text = " ".join(f"def f{i}(x, y): return x * {i} + y  # n={i**2} caf\u00e9" for i in range(300))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([text[i : i + 500] for i in range(0, len(text), 500)], trainer)
    return tok


def test_shared_prefix_groups(bpe):
    workload = {"groups": 3, "prefix_tokens": 40, "input_tokens": 12, "output_tokens": 8}
    ps = shared_prefix.prompts(bpe, 12, workload, seed=2)
    heads = [p.text.split("\n", 1)[0] for p in ps]
    # Request i is in group i mod 3: three distinct 40-token prefixes, each shared by 4.
    assert len(set(heads)) == 3
    assert all(heads[i] == heads[i % 3] for i in range(12))
    assert all(count_tokens(bpe, h) == 40 for h in heads)
    # Every prompt differs after its prefix, and its count is its real length.
    assert len({p.text for p in ps}) == 12
    assert all(p.input_tokens == count_tokens(bpe, p.text) for p in ps)
    assert all(40 + 12 <= p.input_tokens <= 40 + 12 + 2 for p in ps)  # + the newline
    assert ps == shared_prefix.prompts(bpe, 12, workload, seed=2)


def test_length_range(bpe):
    workload = {"input_tokens": 20, "output_tokens": 10, "range_ratio": 0.8}
    ps = ranged_prompts(bpe, 200, workload, seed=4)
    ins = [p.input_tokens for p in ps]
    outs = [p.output_tokens for p in ps]
    # Uniform over the integers [16, 20] and [8, 10]: every value turns up in 200 draws.
    assert set(ins) == {16, 17, 18, 19, 20} and set(outs) == {8, 9, 10}
    assert all(count_tokens(bpe, p.text) == p.input_tokens for p in ps)
    assert ps == ranged_prompts(bpe, 200, workload, seed=4)


def test_every_kind_has_its_keys_and_the_schema_lists_them():
    # A kind's keys are checked by the sweep (servesweep.workloads.workload_problem) and
    # validated by the schema: a key a kind owns, needs or refuses is a schema property,
    # and every kind the schema allows has its KindKeys and its prompts.
    from pathlib import Path

    import yaml

    from servesweep.workloads import KIND_KEYS, KINDS

    schema = Path(__file__).parents[3] / "servesweep/sweep/schemas/config.schema.yaml"
    text = yaml.safe_load(schema.read_text())
    workload = text["properties"]["benchmark"]["properties"]["workload"]
    assert set(workload["properties"]["kind"]["enum"]) == set(KINDS) == set(KIND_KEYS)
    for keys in KIND_KEYS.values():
        for key in (*keys.own, *keys.required, *keys.refused):
            assert key in workload["properties"], key
