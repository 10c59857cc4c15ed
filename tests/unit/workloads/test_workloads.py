"""Workloads that exercise optimizations: shared prefixes and length ranges, with exact
token counts under a real byte-level BPE."""

import json
from dataclasses import fields

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from servesweep.sweep.schema import filled, schema
from servesweep.workloads import KINDS, Workload, workload_of, workload_problem
from servesweep.workloads.base import count_tokens
from servesweep.workloads.random_tokens import RandomWorkload, random_prompts, ranged_prompts
from servesweep.workloads.shared_prefix import SharedPrefixWorkload
from servesweep.workloads.sharegpt import ShareGPTWorkload, sharegpt_prompts


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
    workload = SharedPrefixWorkload(
        groups=3, prefix_tokens=40, input_tokens=12, output_tokens=8, seed=0
    )
    ps = workload.prompts(bpe, 12, seed=2)
    heads = [p.text.split("\n", 1)[0] for p in ps]
    # Request i is in group i mod 3: three distinct 40-token prefixes, each shared by 4.
    assert len(set(heads)) == 3
    assert all(heads[i] == heads[i % 3] for i in range(12))
    assert all(count_tokens(bpe, h) == 40 for h in heads)
    # Every prompt differs after its prefix, and its count is its real length.
    assert len({p.text for p in ps}) == 12
    assert all(p.input_tokens == count_tokens(bpe, p.text) for p in ps)
    assert all(40 + 12 <= p.input_tokens <= 40 + 12 + 2 for p in ps)  # + the newline
    assert ps == workload.prompts(bpe, 12, seed=2)


def test_length_range(bpe):
    workload = RandomWorkload(input_tokens=20, output_tokens=10, seed=0, range_ratio=0.8)
    ps = ranged_prompts(bpe, 200, 20, 10, 0.8, seed=4)
    ins = [p.input_tokens for p in ps]
    outs = [p.output_tokens for p in ps]
    # Uniform over the integers [16, 20] and [8, 10]: every value turns up in 200 draws.
    assert set(ins) == {16, 17, 18, 19, 20} and set(outs) == {8, 9, 10}
    assert all(count_tokens(bpe, p.text) == p.input_tokens for p in ps)
    assert ps == ranged_prompts(bpe, 200, 20, 10, 0.8, seed=4)
    assert ps == workload.prompts(bpe, 200, seed=4)  # the random kind's, with a range


def test_every_kind_has_its_type_and_the_schema_lists_its_keys():
    # A kind's keys are its type's fields: checked by the sweep (workload_problem) and
    # validated by the schema. Every key a kind owns, needs or refuses is a schema property,
    # every property is some kind's field (or `kind`), and every kind the schema allows has
    # its type, whose required keys the schema fills or the kind alone needs.
    workload = schema()["properties"]["benchmark"]["properties"]["workload"]
    assert set(workload["properties"]["kind"]["enum"]) == set(KINDS)
    keys = set(workload["properties"]) - {"kind"}
    assert {f.name for cls in KINDS.values() for f in fields(cls)} == keys
    for kind, cls in KINDS.items():
        assert cls.KIND == kind and issubclass(cls, Workload)
        given = set(filled({"kind": kind}, *SECTION))  # the kind's own defaults included
        assert set(cls.required()) - given <= set(cls.own()) | {"path"}, kind
        for key in (*cls.own(), *cls.required(), *cls.REFUSED):
            assert key in workload["properties"], key
    assert SharedPrefixWorkload.own() == ("groups", "prefix_tokens")
    assert ShareGPTWorkload.own() == () and "path" in ShareGPTWorkload.required()
    assert RandomWorkload.own() == () and "path" not in RandomWorkload.required()


FILLED = {"kind": "random", "input_tokens": 32, "output_tokens": 16, "seed": 0}
SECTION = ("benchmark", "workload")


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({}, None),
        ({"range_ratio": 0.8}, None),
        # A file given to a kind that reads none: kind sharegpt forgotten, most likely.
        ({"path": "sg.json"}, "path: not for kind random (its prompts are generated, not read)"),
        (
            {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 4, "path": "sg.json"},
            "path: not for kind shared_prefix (its prompts are generated, not read)",
        ),
        ({"groups": 2}, "groups: only for kind shared_prefix"),
        ({"kind": "shared_prefix", "groups": 2}, "prefix_tokens: required for kind shared_prefix"),
        ({"kind": "sharegpt"}, "path: required for kind sharegpt"),
        (
            {"kind": "sharegpt", "path": "x.json", "range_ratio": 0.5},
            "range_ratio: not for kind sharegpt (its lengths come from the file)",
        ),
    ],
)
def test_a_workload_is_its_kinds_type_or_one_problem(given, problem):
    section = {**FILLED, **given}
    assert workload_problem(section) == problem
    if problem:
        with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            workload_of(section)
    else:
        typed = workload_of(section)
        assert type(typed) is KINDS[section["kind"]] and typed.kind == section["kind"]


def test_each_kind_reads_its_keys():
    shared = workload_of({**FILLED, "kind": "shared_prefix", "groups": 3, "prefix_tokens": 9})
    assert shared == SharedPrefixWorkload(
        groups=3, prefix_tokens=9, input_tokens=32, output_tokens=16, seed=0
    )
    # The schema fills output_tokens 16 for every kind but sharegpt, whose requests ask
    # for as many tokens as the reply in the file had (docs/load_modes.md).
    sharegpt = workload_of(filled({"kind": "sharegpt", "path": "sg.json", "seed": 4}, *SECTION))
    assert sharegpt == ShareGPTWorkload(path="sg.json", input_tokens=32, seed=4)
    assert sharegpt.output_tokens is None
    capped = {"kind": "sharegpt", "path": "sg.json", "output_tokens": 64}
    assert workload_of(filled(capped, *SECTION)).output_tokens == 64
    assert filled({}, *SECTION) == FILLED
    assert filled({"kind": "shared_prefix"}, *SECTION)["output_tokens"] == 16
    assert workload_of({**FILLED, "range_ratio": 0.5}).range_ratio == 0.5
    with pytest.raises(AttributeError):
        shared.groups = 4  # frozen


def test_a_kinds_prompts_are_its_functions(bpe, tmp_path):
    # The typed prompts send exactly what the functions send (what the dict-driven kinds
    # sent before they had types: tests/unit/bench/test_client.py pins those).
    random = workload_of({**FILLED, "input_tokens": 9, "output_tokens": 5})
    assert random.prompts(bpe, 6, seed=3) == random_prompts(bpe, 6, 9, 5, seed=3)
    convs = [
        {
            "conversations": [
                {"from": "human", "value": f"q {i} " * 4},
                {"from": "gpt", "value": "a " * (5 + i)},
            ]
        }
        for i in range(4)
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs))
    sharegpt = workload_of(filled({"kind": "sharegpt", "path": str(path)}, *SECTION))
    ps = sharegpt.prompts(bpe, 5, seed=1)
    assert ps == sharegpt_prompts(path, bpe, 5, None, seed=1)
    # max_tokens is each reply's own length, not the random kind's 16.
    replies = {f"q {i} " * 4: count_tokens(bpe, "a " * (5 + i)) for i in range(4)}
    assert [p.output_tokens for p in ps] == [replies[p.text] for p in ps]
    assert len(set(replies.values())) > 1
