"""The correctness pass (servesweep.correctness.answers) against real servers on loopback, and the
comparison math (servesweep.correctness.compare) on hand-built records.

The fault server's greedy mode fixes every answer by a rule on the prompt's hash, and its
planted flip changes one token of a seeded share of prompts; the truth each test checks is
computed from that rule (tests/fixtures/fault_server.py), never from the module under test.
"""

import asyncio
import csv
import json
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from fixtures.fault_server import (
    FLIP_BASELINE_DROP,
    FLIP_CHOSEN_DROP,
    flip_position,
    greedy_answer,
    token_text,
)
from fixtures.paths import ROOT

from servesweep.bench.client import ClientSettings, probe_generation
from servesweep.correctness.answers import MODES, parse_answer, parse_logprobs, run_correctness
from servesweep.correctness.compare import (
    CSV_COLUMNS,
    DEFAULT_THRESHOLD,
    SELF_MODE,
    compare_answers,
    compare_modes,
    compare_records,
    csv_rows,
    sweep_rows,
    write_csv,
)
from servesweep.server.engines import get_engine
from servesweep.server.process import ServerProcess, free_port
from servesweep.server.readiness import wait_ready
from servesweep.sweep.config import must_match_exactly
from servesweep.workloads.base import load_tokenizer

FAULT_SERVER = ROOT / "tests" / "fixtures" / "fault_server.py"
COMMAND = f"{{python}} {FAULT_SERVER} --host {{host}} --port {{port}}"
CONFIG = {"prompts": 32, "max_tokens": 64, "seed": 0, "top_logprobs": 5}


@contextmanager
def live(engine, python: str, model_path: str, flags: dict, log_path: Path):
    """A real server launched the way a cell launches it, ready, torn down after."""
    port = free_port()
    command = engine.command(python, model_path, "127.0.0.1", port, flags)
    server = ServerProcess(command, engine.env({}), log_path, "127.0.0.1", port)
    try:
        settings = ClientSettings(
            base_url=server.base_url,
            model=engine.served_model_name(model_path),
            request_timeout_s=120,
            extra_body=engine.request_extras(),
        )
        generate = lambda t: asyncio.run(probe_generation(settings, "Hello", 4, t))  # noqa: E731
        wait_ready(
            server, engine.health_path, engine.models_path, settings.model, 120, generate, print
        )
        yield settings
    finally:
        teardown = server.stop(grace_s=5)
        assert teardown.clean, teardown


def run_pass(tmp_path, name, flags, tokenizer, model_path, config=CONFIG, engine=None, python=None):
    engine = engine or get_engine("command", {"command": COMMAND})
    out = tmp_path / f"{name}.json"
    lines: list[str] = []
    with live(engine, python or sys.executable, model_path, flags, tmp_path / f"{name}.log") as s:
        summary = run_correctness(s, tokenizer, engine, config, out, log=lines.append)
    record = json.loads(out.read_text())
    assert record["summary"] == summary
    return record


@pytest.fixture(scope="module")
def fault_records(tmp_path_factory, tiny_model):
    """Baseline and flipped variant, with and without logprobs: four real passes."""
    tmp = tmp_path_factory.mktemp("correctness")
    path = tiny_model["path"]
    tokenizer = load_tokenizer(Path(path))
    runs = {
        "baseline": {"greedy": True},
        "flip": {"greedy": True, "flip-fraction": 0.25},
        "baseline-nolp": {"greedy": True, "no-logprobs": True},
        "flip-nolp": {"greedy": True, "flip-fraction": 0.25, "no-logprobs": True},
    }
    records = {name: run_pass(tmp, name, f, tokenizer, path) for name, f in runs.items()}
    return records, tokenizer


def truth(prompt: str, fraction: float) -> str:
    """The fixture's answer text to prompt, from its own rule."""
    return "".join(token_text(t) for t, _, _ in greedy_answer(prompt, 64, 5, 0, fraction))


def test_the_pass_records_what_the_server_answered(fault_records):
    records, _ = fault_records
    record = records["flip"]
    assert record["summary"]["prompts"] == 32 and record["summary"]["failed"] == 0
    assert record["summary"]["logprobs"] is True
    assert record["summary"]["token_source"] == "server"
    assert record["request_fields"] == {"logprobs": 5}
    texts = [p["text"] for p in record["prompts"]]
    assert len(set(texts)) == 32  # distinct prompts
    assert texts == [p["text"] for p in records["baseline"]["prompts"]]
    for mode in MODES:
        for answer, prompt in zip(record["modes"][mode], texts, strict=True):
            assert answer["ok"] and answer["text"] == truth(prompt, 0.25)
            assert len(answer["tokens"]) == len(answer["logprobs"]) == 64
            assert all(len(top) == 5 for top in answer["top_logprobs"])


def test_a_planted_flip_is_measured_exactly(fault_records):
    records, _ = fault_records
    prompts = [p["text"] for p in records["baseline"]["prompts"]]
    flips = {i: flip_position(p, 64, 0, 0.25) for i, p in enumerate(prompts)}
    flipped = {i: k for i, k in flips.items() if k is not None}
    assert 2 <= len(flipped) < 32  # the fixture planted something to find, and not all
    comparisons = compare_records(records["flip"], records["baseline"])
    assert [c.mode for c in comparisons] == list(MODES)
    for c in comparisons:
        assert c.token_basis == "server_tokens" and c.logprobs is True
        assert (c.compared, c.failed) == (32, 0)
        assert c.exact_matches == 32 - len(flipped)
        assert c.exact_match_rate == pytest.approx((32 - len(flipped)) / 32)
        assert {d.index: d.first_diff for d in c.diffs if not d.match} == flipped
        assert c.mean_first_diff == pytest.approx(sum(flipped.values()) / len(flipped))
        assert c.changes_outputs is True
        # A near-tie flip: the displaced token is the variant's runner-up.
        assert c.max_abs_logprob_delta == pytest.approx(FLIP_CHOSEN_DROP)
        assert c.baseline_in_top_k_share == 1.0
        assert c.max_baseline_margin == pytest.approx(FLIP_BASELINE_DROP - FLIP_CHOSEN_DROP)
        assert c.max_prefix_logprob_delta == 0.0
        assert c.note == ""
    # Against itself the baseline matches, and batching does not change the fixture.
    same = compare_records(records["baseline"], records["baseline"])
    assert all(c.exact_match_rate == 1.0 and c.changes_outputs is False for c in same)
    assert compare_modes(records["flip"]).exact_match_rate == 1.0


def test_without_logprobs_it_degrades_to_token_ids_and_says_so(fault_records):
    records, tokenizer = fault_records
    assert records["flip-nolp"]["summary"]["logprobs"] is False
    assert records["flip-nolp"]["summary"]["token_source"] == "retokenized"
    prompts = [p["text"] for p in records["baseline-nolp"]["prompts"]]
    expected = {}
    for i, p in enumerate(prompts):
        if flip_position(p, 64, 0, 0.25) is None:
            continue
        a = tokenizer.encode(truth(p, 0.0), add_special_tokens=False).ids
        b = tokenizer.encode(truth(p, 0.25), add_special_tokens=False).ids
        expected[i] = next(k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    for c in compare_records(records["flip-nolp"], records["baseline-nolp"]):
        assert c.token_basis == "retokenized" and c.logprobs is False
        assert "no logprobs" in c.note and "re-encoded" in c.note
        assert c.exact_matches == 32 - len(expected)
        assert {d.index: d.first_diff for d in c.diffs if not d.match} == expected
        assert c.max_abs_logprob_delta is None and c.baseline_in_top_k_share is None
        assert c.changes_outputs is True


def test_refused_logprobs_are_dropped_and_recorded(tmp_path, tiny_model):
    path = tiny_model["path"]
    flags = {"greedy": True, "refuse-logprobs": True}
    config = {**CONFIG, "prompts": 4, "max_tokens": 8}
    record = run_pass(tmp_path, "strict", flags, load_tokenizer(Path(path)), path, config)
    assert record["refused"]["fields"] == ["logprobs"] and record["refused"]["status"] == 422
    assert record["request_fields"] == {}
    assert record["summary"]["answered"] == 8 and record["summary"]["logprobs"] is False


def test_server_faults_are_recorded_never_raised(tmp_path, tiny_model):
    path = tiny_model["path"]
    flags = {"greedy": True, "fault": "http_500", "fraction": 0.5}
    config = {**CONFIG, "prompts": 8, "max_tokens": 8}
    record = run_pass(tmp_path, "flaky", flags, load_tokenizer(Path(path)), path, config)
    errors = [a["error"] for answers in record["modes"].values() for a in answers]
    assert set(errors) == {None, "http_500"}
    assert record["summary"]["failed"] == errors.count("http_500")
    # Nothing listening: every answer fails, quickly.
    settings = ClientSettings(base_url=f"http://127.0.0.1:{free_port()}", request_timeout_s=5)
    engine = get_engine("command", {"command": COMMAND})
    summary = run_correctness(settings, None, engine, config, tmp_path / "dead.json", lambda m: 0)
    assert summary["answered"] == 0 and summary["failed"] == 16 and summary["seconds"] < 10
    late = run_correctness(settings, None, engine, {**config, "timeout_s": 0}, tmp_path / "l.json")
    assert late["failed"] == 16
    answers = json.loads((tmp_path / "l.json").read_text())["modes"]["one_at_a_time"]
    assert {a["error"] for a in answers} == {"deadline"}


@pytest.mark.slow
@pytest.mark.engine
def test_transformers_serve_baseline_vs_continuous_batching(engine_sweep):
    """What transformers serve 5.24 really does: it returns no logprobs and no token ids
    (the pass asks for neither: it ignores the one and answers 422 to the other); on the
    tiny fp32 model continuous batching answers exactly as the baseline does, one at a time
    and all together, while bfloat16 (a real numeric change) is caught. The passes are the
    ones the session's real-engine sweep ran in its boots (tests/fixtures/engine_sweep.py:
    32 prompts, 64 tokens), read from the records each boot wrote."""
    assert engine_sweep.run.returncode == 0, engine_sweep.run.stderr[-4000:]
    assert engine_sweep.config["correctness"] == CONFIG
    records = {}
    for name in ("baseline", "continuous-batching", "bf16"):
        cell_dir = engine_sweep.cell_dir(name)
        records[name] = json.loads((cell_dir / "correctness.json").read_text())
        summary = records[name]["summary"]
        # The boot's record carries the summary the pass returned.
        cell = json.loads((cell_dir / "cell.json").read_text())
        assert cell["correctness"] == {"status": "done", **summary}
        assert (summary["answered"], summary["failed"]) == (64, 0)
        assert summary["logprobs"] is False and summary["token_source"] == "retokenized"
        assert records[name]["request_fields"] == {} and records[name]["refused"] is None
        answers = [a for mode in MODES for a in records[name]["modes"][mode]]
        assert {a["completion_tokens"] for a in answers} == {64}  # eos_token_id: []
        assert len({a["text"] for a in answers}) == 32  # every prompt its own answer
        # Without continuous batching it serves one request at a time, so the modes agree;
        # with it, batching the 32 together changes no token either.
        assert compare_modes(records[name]).exact_match_rate == 1.0
    for c in compare_records(records["continuous-batching"], records["baseline"]):
        assert c.token_basis == "retokenized" and "no logprobs" in c.note
        assert (c.compared, c.failed) == (32, 0)
        assert (c.exact_match_rate, c.changes_outputs) == (1.0, False), c.example
    for c in compare_records(records["bf16"], records["baseline"]):
        assert c.changes_outputs is True, c


# The comparison math, on hand-built records.


def answer(index, seq, logprobs=None, top=None, ids=False, ok=True):
    """An answer whose tokens are `seq` (strings), retokenized as their ordinals."""
    seq = list(seq)
    return {
        "index": index,
        "ok": ok,
        "error": None if ok else "http_500",
        "text": "".join(seq) if ok else None,
        "token_ids": [ord(t) for t in seq] if ids and ok else None,
        "tokens": seq if logprobs is not None and ok else None,
        "logprobs": logprobs if ok else None,
        "top_logprobs": top if ok else None,
        "retokenized_ids": [ord(t) for t in seq] if ok else None,
    }


def record(answers, **config):
    prompts = [{"index": a["index"], "text": f"p{a['index']}"} for a in answers]
    config = {"prompts": len(answers), "seed": 0, "max_tokens": 4, **config}
    return {"config": config, "prompts": prompts, "modes": {"one_at_a_time": answers}}


LP = [-0.1, -0.2, -0.3, -0.4]


def test_identical_answers_match_exactly():
    base = [answer(i, "abcd", LP, [{"x": -1.0}] * 4) for i in range(4)]
    (c,) = compare_records(record(base), record(base))
    assert (c.exact_matches, c.exact_match_rate, c.mean_first_diff) == (4, 1.0, None)
    assert c.changes_outputs is False and c.logprobs is True and c.example is None
    assert c.max_prefix_logprob_delta == 0.0 and c.max_abs_logprob_delta is None


def test_a_mismatch_at_position_k():
    base = [answer(i, "abcd") for i in range(4)]
    variant = [answer(0, "abXd"), answer(1, "abcd"), answer(2, "Xbcd"), answer(3, "abc")]
    c = compare_answers(variant, base, "one_at_a_time")
    assert [d.first_diff for d in c.diffs] == [2, None, 0, 3]  # a prefix differs at its end
    assert c.exact_match_rate == 0.25 and c.mean_first_diff == pytest.approx(5 / 3)
    assert c.changes_outputs is True and c.token_basis == "retokenized"
    assert c.example == {"index": 0, "first_diff": 2, "baseline": "abcd", "variant": "abXd"}


def test_logprob_delta_and_top_k_containment():
    top_base = [{"a": -0.1}, {"b": -0.2}, {"c": -0.3, "Y": -0.9}, {"d": -0.4}]
    base = [answer(i, "abcd", LP, top_base) for i in range(3)]
    v_lp = [-0.1, -0.25, -0.35, -0.5]
    with_c = [{"a": -0.1}, {"b": -0.25}, {"X": -0.35, "c": -0.6}, {"d": -0.5}]
    without = [{"a": -0.1}, {"b": -0.25}, {"X": -0.35, "Z": -0.7}, {"d": -0.5}]
    variant = [
        answer(0, "abXd", v_lp, with_c),  # c displaced to the runner-up: a near tie
        answer(1, "abXd", v_lp, without),  # c not in the variant's top-k at all
        answer(2, "abcd", v_lp, with_c),
    ]
    c = compare_answers(variant, base, "all_together")
    d0, d1, d2 = c.diffs
    assert d0.first_diff == 2 and d0.logprob_delta == pytest.approx(-0.05)
    assert d0.baseline_in_top_k is True and d0.baseline_margin == pytest.approx(0.25)
    assert d0.prefix_logprob_delta == pytest.approx(0.05)  # position 1: -0.25 vs -0.2
    assert d1.baseline_in_top_k is False and d1.baseline_margin is None
    assert d2.match and d2.logprob_delta is None
    assert d2.prefix_logprob_delta == pytest.approx(0.1)  # over the whole answer
    assert c.baseline_in_top_k_share == 0.5 and c.max_baseline_margin == pytest.approx(0.25)
    assert c.max_abs_logprob_delta == pytest.approx(0.05)
    assert c.max_prefix_logprob_delta == pytest.approx(0.1)
    assert c.token_basis == "server_tokens" and c.logprobs is True


def test_server_ids_are_preferred_and_mixed_sources_fall_back():
    base = [answer(0, "abcd", LP, ids=True)]
    assert compare_answers([answer(0, "abcd", LP, ids=True)], base, "m").token_basis == (
        "server_ids"
    )
    # One side without ids: both compared on the logprobs' tokens.
    assert compare_answers([answer(0, "abcd", LP)], base, "m").token_basis == "server_tokens"
    # One side without tokens at all: both re-encoded, and logprobs are not used.
    c = compare_answers([answer(0, "abXd")], base, "m")
    assert (c.token_basis, c.logprobs, c.diffs[0].logprob_delta) == ("retokenized", False, None)
    no_tokenizer = answer(0, "abXd") | {"retokenized_ids": None}
    c = compare_answers([no_tokenizer], base, "m")
    assert (c.token_basis, c.diffs[0].first_diff) == ("text", 2)
    assert "characters" in c.note


def test_failures_are_counted_not_compared():
    base = [answer(0, "abcd"), answer(1, "abcd"), answer(2, "abcd", ok=False)]
    variant = [answer(0, "abcd"), answer(1, "abcd", ok=False), answer(2, "abcd")]
    c = compare_answers(variant, base, "m")
    assert (c.prompts, c.compared, c.failed, c.exact_match_rate) == (3, 1, 2, 1.0)
    assert "2 prompts failed" in c.note
    nothing = compare_answers([answer(0, "a", ok=False)], [answer(0, "a")], "m")
    assert nothing.exact_match_rate is None and nothing.changes_outputs is None
    assert nothing.note == "1 prompts failed on a side, not compared"


def test_the_threshold_and_the_must_match_switch():
    base = [answer(i, "abcd") for i in range(32)]
    one_off = [answer(0, "abXd")] + base[1:]
    two_off = [answer(0, "abXd"), answer(1, "Xbcd")] + base[2:]
    assert DEFAULT_THRESHOLD == 0.95
    assert compare_answers(one_off, base, "m").changes_outputs is False  # 31/32 = 0.97
    assert compare_answers(two_off, base, "m").changes_outputs is True  # 30/32 = 0.94
    strict = compare_answers(one_off, base, "m", must_match=True)
    assert strict.changes_outputs is True and strict.threshold == 1.0
    assert "must match exactly" in strict.note
    assert compare_answers(two_off, base, "m", threshold=0.9).changes_outputs is False
    edge = [answer(0, "abXd"), answer(1, "abcd"), answer(2, "abcd"), answer(3, "abcd")]
    assert compare_answers(edge, base[:4], "m", threshold=0.75).changes_outputs is False


def test_speculative_flags_must_match_exactly():
    assert must_match_exactly({"speculative-algorithm": "EAGLE", "tp": 8})
    assert must_match_exactly([["tp", 8], ["speculative-config", {"method": "ngram"}]])
    assert must_match_exactly({"--speculative_config": '{"method": "eagle3"}'})
    assert must_match_exactly({"speculative-draft-model-path": "/m"})
    assert not must_match_exactly({"speculative-algorithm": None, "tp": 8})
    assert not must_match_exactly([["speculative-config", False]])
    assert not must_match_exactly({"continuous-batching": True})


def test_records_with_other_prompts_are_not_compared():
    base = [answer(i, "abcd") for i in range(2)]
    (c,) = compare_records(record(base), record(base, max_tokens=8))
    assert c.compared == 0 and c.changes_outputs is None and "max_tokens" in c.note
    (c,) = compare_records(record(base, seed=1), record(base), must_match=True)
    assert c.threshold == 1.0 and "seed" in c.note


def test_a_record_against_its_own_modes():
    one = [answer(i, "abcd") for i in range(4)]
    rec = {"modes": {"one_at_a_time": one, "all_together": [answer(0, "abcX")] + one[1:]}}
    c = compare_modes(rec)
    assert c.mode == SELF_MODE and c.exact_match_rate == 0.75 and c.diffs[0].first_diff == 3
    assert compare_modes({"modes": {"one_at_a_time": one}}) is None


def test_csv_rows_are_tidy(tmp_path):
    base = record([answer(i, "abcd") for i in range(2)])
    base["modes"]["all_together"] = [answer(0, "abcd"), answer(1, "abXd")]
    variant = json.loads(json.dumps(base))
    variant["modes"]["one_at_a_time"][1] = answer(1, "Xbcd")
    comparisons = compare_records(variant, base) + [compare_modes(variant)]
    rows = csv_rows("cpu", "tiny", "cb", "cpu", "baseline", comparisons)
    assert [r["mode"] for r in rows] == ["one_at_a_time", "all_together", SELF_MODE]
    assert all(list(r) == CSV_COLUMNS for r in rows)
    assert [r["exact_match_rate"] for r in rows] == [0.5, 1.0, 0.5]
    write_csv(tmp_path / "correctness.csv", rows)
    with open(tmp_path / "correctness.csv") as f:
        back = list(csv.DictReader(f))
    assert [r["changes_outputs"] for r in back] == ["True", "False", "True"]
    assert back[0]["compared_to_variant"] == "baseline"


def test_sweep_rows_pair_every_variant_with_its_reference():
    base = [answer(i, "abcd") for i in range(32)]
    one_off = [answer(0, "abXd")] + base[1:]
    cpu_base = record(base)
    cpu_base["modes"]["all_together"] = one_off
    records = {
        ("cpu", "m", "baseline"): cpu_base,
        ("cpu", "m", "spec"): record(one_off),
        ("cpu", "m", "skipped"): {"status": "skipped"},  # a pass that did not run
        ("gpu", "m", "baseline"): record(one_off),
        ("gpu", "m", "spec"): record(one_off),
    }
    rows = sweep_rows(records, must_match={"spec": True}, reference_stack="cpu")
    got = {
        (r["stack"], r["variant"], r["compared_to_stack"], r["compared_to_variant"], r["mode"]): (
            r["exact_match_rate"],
            r["changes_outputs"],
        )
        for r in rows
    }
    assert got == {
        ("cpu", "baseline", "cpu", "baseline", SELF_MODE): (31 / 32, False),
        ("cpu", "spec", "cpu", "baseline", "one_at_a_time"): (31 / 32, True),  # must match
        ("gpu", "baseline", "cpu", "baseline", "one_at_a_time"): (31 / 32, False),
        ("gpu", "spec", "gpu", "baseline", "one_at_a_time"): (1.0, False),
        ("gpu", "spec", "cpu", "spec", "one_at_a_time"): (1.0, False),
    }  # no row for the skipped pass, nor self rows for records of one mode


def test_answers_are_parsed_from_either_spelling_and_never_raise():
    chat = {
        "content": [
            {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}]},
            {"token": "b", "logprob": -0.2, "top_logprobs": []},
        ]
    }
    assert parse_logprobs(chat, "chat") == (["a", "b"], [-0.1, -0.2], [{"a": -0.1}, None])
    legacy = {"tokens": ["a"], "token_logprobs": [-0.1], "top_logprobs": [{"a": -0.1}]}
    assert parse_logprobs(legacy, "completions") == (["a"], [-0.1], [{"a": -0.1}])
    assert parse_logprobs(None, "completions") == (None, None, None)
    body = {"choices": [{"message": {"content": "ab"}, "token_ids": [1, 2], "logprobs": chat}]}
    got = parse_answer(0, 200, json.dumps(body).encode(), 0.1, "chat", None, False)
    assert got["ok"] and got["text"] == "ab" and got["token_ids"] == [1, 2]
    assert got["tokens"] == ["a", "b"]
    bad = parse_answer(1, 200, b"not json", 0.1, "completions", None, False)
    assert (bad["ok"], bad["error"]) == (False, "bad_answer")
    odd = parse_answer(2, 200, b'{"choices": []}', 0.1, "completions", None, False)
    assert odd["error"] == "bad_answer"
    http = parse_answer(3, 503, b"busy", 0.1, "completions", None, False)
    assert (http["error"], http["detail"]) == ("http_503", "busy")
    assert parse_answer(4, 0, b"", 5.0, "completions", None, True)["error"] == "timeout"
