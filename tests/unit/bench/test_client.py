"""The benchmark client against the scripted SSE server over real loopback HTTP.

Accuracy is judged against what the server actually did: it records, in perf_counter_ns
(CLOCK_MONOTONIC, shared by every process), when each request's bytes were read off its
socket and when each chunk was written, so its own sleep jitter does not count against the
client. Where the machine has two cores, the server runs on one and the client's workers on
the other, so the two do not queue behind each other.
"""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from fixtures.raw_http import RawServer, chunked, completion_events, sse
from fixtures.sse_server import WORDS, ServerProcess
from fixtures.timing import NoiseProbe, timing_errors
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from servesweep.bench import client as cl
from servesweep.bench import sse as cw
from servesweep.bench.client import ClientSettings, generate_once, run_level
from servesweep.bench.metrics import itl_gaps
from servesweep.bench.sse import parse_stream
from servesweep.level import Level
from servesweep.workloads.base import Prompt, count_tokens
from servesweep.workloads.random_tokens import random_prompts
from servesweep.workloads.sharegpt import sharegpt_prompts

TWO_CORES = {0, 1} <= os.sched_getaffinity(0)


@pytest.fixture(scope="module")
def server():
    with ServerProcess(cpu=1 if TWO_CORES else None) as srv:
        yield srv


@contextlib.contextmanager
def client_core():
    """Client workers (children of this process) on core 0, the server on core 1."""
    before = os.sched_getaffinity(0)
    if TWO_CORES:
        os.sched_setaffinity(0, {0})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@pytest.fixture(scope="module")
def word_tokenizer():
    """Counts the fixture's words exactly: one token per ' tokN'."""
    vocab = {w: i for i, w in enumerate([*WORDS, "[UNK]"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def prompts(n, output_tokens=16, tag="p"):
    return [Prompt(f"{tag}{i} a b c", 4, output_tokens) for i in range(n)]


def run(server, tmp_path, script, ps, concurrency, warmup=0, **settings):
    server.set_script(script)
    settings = ClientSettings(server.url, **settings)
    path = tmp_path / "requests.jsonl"
    with client_core():
        summary = run_level(
            settings, ps, concurrency, warmup, path, Level("concurrency", concurrency), 0
        )
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return summary, records, {t["prompt"]: t for t in server.truth()}


# ---- accuracy -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "concurrency, n, tokens, gap_ms, bound_ms",
    [(1, 100, 16, 2.0, 1.0), (256, 768, 12, 50.0, 5.0)],
)
def test_timing_accuracy(server, tmp_path, concurrency, n, tokens, gap_ms, bound_ms):
    # Each request's TTFT differs (5-47 ms), so requests do not end and restart in waves.
    # The warmup opens the connections the measured requests then use.
    script = {"ttft_ms": [5.0 + 3.0 * k for k in range(15)], "gap_ms": gap_ms}
    ps = prompts(concurrency + n, tokens)
    with NoiseProbe() as noise:
        summary, records, truth = run(server, tmp_path, script, ps, concurrency, concurrency)
    assert summary["status"] == "ok" and summary["completed"] == n
    err = timing_errors(summary, records, truth, ps)
    print(f"\nconcurrency {concurrency}, machine noise p99 {noise.p99_ms:.3f} ms")
    for name, e in err.items():
        print(f"  {name:9s}" + "  ".join(f"{k} {v:7.3f}" for k, v in e.items()))
    assert err["delivery"]["min"] > -0.01  # an arrival never precedes its write
    assert err["request"]["min"] > -0.01  # nor a request's read its send
    # The bound holds at p99 on a quiet machine (docs/metrics.md, "Accuracy"). On a shared
    # one the kernel wakes the client late now and then; the p90 is left alone by that, the
    # p99 gets the lateness measured meanwhile (twice: an error can span two wake-ups).
    for name in ("ttft", "e2el", "tpot", "itl"):
        assert err[name]["p90"] <= bound_ms, (name, err[name])
        assert err[name]["p99"] <= bound_ms + 2 * noise.p99_ms, (name, err[name])
    # Token accounting is exact; tpot and itl come out at the scripted gap (give or take the
    # server's own wake-up lateness).
    measured = [r for r in records if not r["warmup"]]
    assert all(r["output_tokens"] == tokens for r in measured)
    assert all(r["chunk_tokens"] == [1] * tokens for r in measured)
    assert summary["total_output_tokens"] == tokens * n
    assert summary["median_itl_ms"] == pytest.approx(gap_ms, abs=1.0)
    assert summary["median_tpot_ms"] == pytest.approx(gap_ms, abs=1.0)
    assert summary["achieved_concurrency"] >= 0.95 * concurrency


def test_workers_share_one_level(server, tmp_path):
    script = {"ttft_ms": [5.0, 9.0, 13.0], "gap_ms": 2.0}
    ps = prompts(8 + 256)
    summary, records, truth = run(server, tmp_path, script, ps, 64, 8, workers=2)
    assert summary["client_workers"] == 2 and summary["completed"] == 256
    assert {r["worker"] for r in records} == {0, 1}
    assert sorted(r["index"] for r in records) == list(range(len(ps)))
    # The two workers together keep the level's 64 in flight, never more.
    events = sorted(
        [(r["sent_s"], 1) for r in records if not r["warmup"]]
        + [(r["end_s"], -1) for r in records if not r["warmup"]],
        key=lambda e: (e[0], e[1]),
    )
    assert max(np.cumsum([step for _, step in events])) <= 64
    assert summary["achieved_concurrency"] >= 0.95 * 64
    # Both workers' stamps are on the server's clock: nothing arrives before it was sent.
    origin = summary["clock_origin_ns"]
    for r in records:
        t = truth[ps[r["index"]].text]
        assert t["recv_ns"] >= origin + r["sent_s"] * 1e9 - 1e4
        assert t["content_ns"][0] <= origin + (r["sent_s"] + r["ttft_ms"] / 1e3) * 1e9 + 1e4


def test_perf_counter_is_one_clock_for_all_processes():
    assert "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation
    before = time.perf_counter_ns()
    child = subprocess.run(
        [sys.executable, "-c", "import time; print(time.perf_counter_ns())"],
        capture_output=True,
        text=True,
        check=True,
    )
    after = time.perf_counter_ns()
    assert before < int(child.stdout) < after


def test_chat_role_and_empty_chunks_do_not_count(server, tmp_path, word_tokenizer):
    # Role-only and empty chunks come at once; a client counting them would see TTFT ~0.
    script = {"ttft_ms": 30.0, "gap_ms": 5.0, "role_chunk": True, "empty_chunk": True}
    ps = prompts(4)
    summary, records, _ = run(
        server, tmp_path, script, ps, 1, endpoint="chat", tokenizer=word_tokenizer
    )
    assert summary["completed"] == 4
    assert min(r["ttft_ms"] for r in records) >= 30.0
    assert all(len(r["chunk_times_ms"]) == 16 for r in records)


def test_multi_token_chunks_and_reasoning(server, tmp_path, word_tokenizer):
    # Chunks of 1, 3, 2 tokens; the first two chunks are reasoning. Usage only at the end,
    # so tokens per chunk come from retokenizing each chunk's text.
    script = {"ttft_ms": 10.0, "gap_ms": 6.0, "tokens_per_chunk": [1, 3, 2], "reasoning_chunks": 2}
    ps = prompts(6, output_tokens=18)
    summary, records, truth = run(
        server, tmp_path, script, ps, 2, endpoint="chat", tokenizer=word_tokenizer
    )
    assert summary["completed"] == 6 and summary["usage_mismatch"] == 0
    errors = []
    for r in records:
        t = truth[ps[r["index"]].text]
        assert r["chunk_tokens"] == t["tokens"] == [1, 3, 2] * 3
        assert r["output_tokens"] == r["retokenized_tokens"] == 18
        # One value per token after the first chunk's, each its chunk's gap split over the
        # chunk's tokens (6 ms gaps: 2, 2, 2, 3, 3, 6 ms per cycle), as the server wrote them.
        measured = itl_gaps(r["chunk_times_ms"], r["chunk_tokens"])
        written = itl_gaps((np.array(t["content_ns"]) - t["recv_ns"]) / 1e6, t["tokens"])
        assert len(measured) == len(written) == 17
        errors.extend(np.abs(measured - written))
    assert np.percentile(errors, 90) <= 1.0
    assert summary["mean_itl_ms"] == pytest.approx(6.0 * 8 / 17, abs=0.5)
    assert summary["median_chunk_gap_ms"] == pytest.approx(6.0, abs=1.0)
    assert summary["median_tpot_ms"] == pytest.approx(6.0 * 8 / 17, abs=0.5)


def test_usage_on_every_chunk_gives_exact_tokens_without_tokenizer(server, tmp_path):
    script = {"tokens_per_chunk": [2, 1], "usage_every_chunk": True, "gap_ms": 2.0}
    summary, records, _ = run(server, tmp_path, script, prompts(3, 9), 1)
    assert all(r["chunk_tokens"] == [2, 1, 2, 1, 2, 1] for r in records)
    assert all(r["retokenized_tokens"] is None for r in records)


def test_stream_without_done_and_with_crlf(server, tmp_path):
    script = {"done": False, "crlf": True, "gap_ms": 1.0}
    summary, records, _ = run(server, tmp_path, script, prompts(5, 8), 2)
    assert summary["completed"] == 5 and summary["failed"] == 0
    assert all(r["output_tokens"] == 8 and len(r["chunk_times_ms"]) == 8 for r in records)


def test_records_file_and_warmup(server, tmp_path, word_tokenizer):
    summary, records, _ = run(
        server, tmp_path, {"gap_ms": 1.0}, prompts(10, 4), 3, warmup=3, tokenizer=word_tokenizer
    )
    assert [r["index"] for r in records] == list(range(10))
    assert [r["warmup"] for r in records] == [True] * 3 + [False] * 7
    assert (summary["num_prompts"], summary["warmup"], summary["completed"]) == (7, 3, 7)
    assert summary["client_cpu_s"] > 0 and summary["client_max_loop_lag_ms"] >= 0
    assert summary["client_workers"] == 1 and 0 < summary["client_cpu_share"] < 1
    fields = {
        "index", "warmup", "ok", "error", "error_detail", "status_code", "prompt_tokens",
        "output_tokens", "retokenized_tokens", "retokenized_whole_tokens", "usage_reported",
        "worker", "sent_s", "end_s", "ttft_ms", "e2el_ms", "tpot_ms", "chunk_times_ms",
        "chunk_tokens",
    }  # fmt: skip
    assert all(set(r) == fields for r in records)
    r = records[-1]
    assert (r["output_tokens"], r["retokenized_tokens"], r["retokenized_whole_tokens"]) == (4, 4, 4)
    assert r["usage_reported"] and r["prompt_tokens"] == 4  # "p9 a b c", from usage
    assert 0 <= r["sent_s"] < r["end_s"]
    assert r["end_s"] == pytest.approx(r["sent_s"] + r["e2el_ms"] / 1e3, abs=1e-5)


def _max_in_flight(records) -> int:
    events = sorted(
        [(r["sent_s"], 1) for r in records] + [(r["end_s"], -1) for r in records],
        key=lambda e: (e[0], e[1]),
    )
    return int(max(np.cumsum([step for _, step in events])))


def test_warmup_runs_at_the_levels_own_concurrency_before_the_measured_requests(server, tmp_path):
    # The `auto` warm-up of a level of 24 streams: 24 requests with all 24 in flight (a
    # two-request warm-up reached a batch of 2 only), every one ended before the first
    # measured request is sent.
    script = {"ttft_ms": 30.0, "gap_ms": 2.0}
    summary, records, _ = run(server, tmp_path, script, prompts(24 + 36, 8), 24, warmup=24)
    warm = [r for r in records if r["warmup"]]
    measured = [r for r in records if not r["warmup"]]
    assert len(warm) == 24 and summary["warmup"] == 24 and summary["completed"] == 36
    assert _max_in_flight(warm) == 24
    assert max(r["end_s"] for r in warm) <= min(r["sent_s"] for r in measured)
    # The measured requests' figures are their own: the summary counts none of the warm-up.
    assert summary["total_output_tokens"] == 36 * 8


def test_all_at_once_level_has_no_steady_window(server, tmp_path):
    # num_prompts == level: all sent at once, then the level only drains.
    summary, _, _ = run(server, tmp_path, {"gap_ms": 1.0}, prompts(8, 4), 8)
    assert summary["achieved_concurrency"] is None and summary["steady_window_s"] is None
    assert summary["concurrency"] > 0 and summary["client_bound"] is False


# ---- faults ---------------------------------------------------------------------------------


def test_http_errors_counted(server, tmp_path):
    script = {"http_error_rate": 0.25, "gap_ms": 1.0}
    summary, records, _ = run(server, tmp_path, script, prompts(20, 4), 4)
    assert summary["status"] == "ok"
    assert summary["errors"] == {"http_500": 5} and summary["completed"] == 15
    bad = [r for r in records if not r["ok"]]
    assert all(r["status_code"] == 500 and r["ttft_ms"] is None for r in bad)


def test_error_rate_fails_level(server, tmp_path):
    summary, _, _ = run(server, tmp_path, {"http_error_rate": 0.75}, prompts(8, 4), 4)
    assert (summary["status"], summary["cause"]) == ("failed", "http_errors")
    server.set_script({"http_error_rate": 0.75})
    summary = run_level(
        ClientSettings(server.url),
        prompts(8, 4),
        4,
        0,
        tmp_path / "r.jsonl",
        Level("concurrency", 4),
        0,
        error_rate_threshold=0.8,
    )
    assert summary["status"] == "ok"


def test_stall_fails_level_as_hung(server, tmp_path):
    script = {"stall_rate": 1.0, "fault_after": 2, "gap_ms": 1.0}
    started = time.monotonic()
    summary, records, _ = run(server, tmp_path, script, prompts(8), 4, stall_timeout_s=1.0)
    elapsed = time.monotonic() - started
    assert (summary["status"], summary["cause"]) == ("failed", "hung")
    assert elapsed < 1.0 + 1.5
    assert summary["errors"] == {"stalled": 4} and summary["completed"] == 0


def test_request_timeout(server, tmp_path):
    # Half the requests go silent; the others keep the level alive, so it is not a stall.
    script = {"stall_rate": 0.5, "fault_after": 1, "gap_ms": 1.0}
    summary, _, _ = run(
        server, tmp_path, script, prompts(4, 4), 2, request_timeout_s=0.5, stall_timeout_s=10
    )
    assert summary["errors"] == {"timeout": 2} and summary["completed"] == 2
    assert summary["status"] == "ok"  # 50 % errors is not above the threshold


def test_malformed_sse_is_bad_stream(server, tmp_path):
    script = {"malformed_rate": 0.5, "gap_ms": 1.0}
    summary, records, _ = run(server, tmp_path, script, prompts(8, 6), 2)
    assert summary["errors"] == {"bad_stream": 4} and summary["completed"] == 4


def test_disconnect(server, tmp_path):
    script = {"disconnect_rate": 0.5, "gap_ms": 1.0}
    summary, _, _ = run(server, tmp_path, script, prompts(6, 6), 2)
    assert summary["errors"] == {"disconnect": 3} and summary["completed"] == 3


def test_connection_refused_does_not_raise(tmp_path):
    settings = ClientSettings("http://127.0.0.1:9")  # nothing listens on the discard port
    summary = run_level(
        settings, prompts(3, 2), 2, 0, tmp_path / "r.jsonl", Level("concurrency", 2), 0
    )
    assert summary["status"] == "failed" and summary["errors"] == {"connect": 3}


def test_kept_compressed_and_parsed_at_once_give_the_same_records(
    server, tmp_path, word_tokenizer, monkeypatch
):
    # Raw bytes are kept for after the level while a budget lasts, then kept compressed,
    # then parsed as each request ends: the records must not depend on which.
    script = {"ttft_ms": 5.0, "gap_ms": 1.0, "tokens_per_chunk": [1, 3, 2]}
    ps = prompts(24, 12)
    runs = []
    for raw, packed in [(1 << 30, 1 << 30), (0, 1 << 30), (0, 0)]:
        monkeypatch.setattr(cl, "DEFER_BUDGET_BYTES", raw)
        monkeypatch.setattr(cl, "PACKED_BUDGET_BYTES", packed)
        summary, records, _ = run(server, tmp_path, script, ps, 4, tokenizer=word_tokenizer)
        assert summary["completed"] == 24
        runs.append(
            [(r["output_tokens"], r["chunk_tokens"], len(r["chunk_times_ms"])) for r in records]
        )
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] == (12, [1, 3, 2, 1, 3, 2], 6)


def test_worker_count():
    s = ClientSettings("http://x")
    with client_core():
        cores = len(os.sched_getaffinity(0))
        assert cl.worker_count(s, 1) == 1
        assert cl.worker_count(s, 256) == 1
        assert cl.worker_count(s, 1024) == min(cores, 4)
    assert cl.worker_count(ClientSettings("http://x", workers=3), 2) == 2


# ---- HTTP framing, against exact bytes -------------------------------------------------------

OK_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def raw_level(srv, tmp_path, n, concurrency=1):
    summary = run_level(
        ClientSettings(srv.url, request_timeout_s=10, stall_timeout_s=5),
        prompts(n, 5),
        concurrency,
        0,
        tmp_path / "r.jsonl",
        Level("concurrency", concurrency),
        0,
    )
    return summary, [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]


def test_content_length_body_split_over_reads(tmp_path):
    body = sse(completion_events(5))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    head += b"Content-Length: %d\r\n\r\n" % len(body)
    answer = head + body
    pieces = [answer[i : i + 40] for i in range(0, len(answer), 40)]
    with RawServer(lambda c, n, b: (pieces, "keep")) as srv:
        summary, records = raw_level(srv, tmp_path, 3)
    assert summary["completed"] == 3
    assert all(r["output_tokens"] == 5 and len(r["chunk_times_ms"]) == 5 for r in records)
    # Events complete at different reads, so their stamps differ.
    assert all(len(set(r["chunk_times_ms"])) > 1 for r in records)


def test_close_delimited_http10_body(tmp_path):
    answer = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    answer += sse(completion_events(5), done=False)
    with RawServer(lambda c, n, b: ([answer], "close")) as srv:
        summary, records = raw_level(srv, tmp_path, 3)
    assert summary["completed"] == 3 and len(srv.requests) == 3
    assert all(r["output_tokens"] == 5 for r in records)


def test_chunk_lines_split_byte_by_byte_after_100_continue(tmp_path):
    body = chunked([sse(completion_events(5)[:2], done=False), sse(completion_events(5)[2:])])
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + OK_CHUNKED + body
    pieces = [answer[: len(answer) - 40]] + [
        answer[i : i + 1] for i in range(len(answer) - 40, len(answer))
    ]
    with RawServer(lambda c, n, b: (pieces, "keep")) as srv:
        summary, records = raw_level(srv, tmp_path, 2)
    assert summary["completed"] == 2
    assert all(r["output_tokens"] == 5 and len(r["chunk_times_ms"]) == 5 for r in records)


def test_kept_alive_connection_dropped_by_server_is_retried(tmp_path):
    # Each connection answers one request, then closes when the next one arrives (a server
    # whose keep-alive ran out just as the client reused the connection).
    answer = OK_CHUNKED + chunked([sse(completion_events(5))])
    with RawServer(lambda c, n, b: ([answer], "keep" if n == 0 else "drop")) as srv:
        summary, records = raw_level(srv, tmp_path, 4)
    assert summary["completed"] == 4 and summary["failed"] == 0
    assert len(srv.requests) == 4 + 3  # three sends hit a dropped connection


def test_garbage_and_http_errors(tmp_path):
    def answer(conn, n, body):
        if json.loads(body)["prompt"].startswith("p0"):
            return [b"SSH-2.0-OpenSSH\r\n\r\n"], "close"
        err = b'{"detail": "unknown field ignore_eos"}'
        head = b"HTTP/1.1 422 Unprocessable Entity\r\nContent-Length: %d\r\n\r\n" % len(err)
        return [head + err], "keep"

    with RawServer(answer) as srv:
        summary, records = raw_level(srv, tmp_path, 2)
    assert summary["errors"] == {"bad_stream": 1, "http_422": 1}
    assert "ignore_eos" in records[1]["error_detail"] and records[1]["status_code"] == 422


def test_dechunk_at_every_split():
    payloads = [b"data: one\n\n", b"data: two\n\ndata: thr", b"ee\n\n"]
    raw = chunked(payloads)
    for cut in range(1, len(raw)):
        reads = [(1, raw[:cut]), (2, raw[cut:])]
        body = cw.dechunk(reads)
        assert b"".join(d for _, d in body) == b"".join(payloads)
        assert [t for t, _ in body] == sorted({t for t, d in body})
    with pytest.raises(cw.BadStream):
        cw.dechunk([(1, raw[:-5])])  # no last chunk


def test_generate_once(server):
    server.set_script({"gap_ms": 1.0})
    assert asyncio.run(generate_once(ClientSettings(server.url), "hello", 5)) == 5
    chat = ClientSettings(server.url, endpoint="chat", model="scripted")
    assert asyncio.run(generate_once(chat, "hello", 3)) == 3
    server.set_script({"http_error_rate": 1.0})
    with pytest.raises(RuntimeError, match="http_500"):
        asyncio.run(generate_once(ClientSettings(server.url), "hello", 5))


# ---- request body and stream parsing ------------------------------------------------------


def test_request_body():
    s = ClientSettings("http://x", endpoint="chat", model="m", extra_body={"ignore_eos": True})
    body = cl.request_body(s, "hi", 7)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["model"] == "m" and body["max_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    plain = cl.request_body(ClientSettings("http://x"), "hi", 7)
    assert plain["prompt"] == "hi" and "model" not in plain
    assert "ignore_eos" not in plain and "min_tokens" not in plain


def event(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_parse_stream_stamps_events_with_completing_read():
    role = event({"choices": [{"delta": {"role": "assistant"}}]})
    a = event({"choices": [{"delta": {"reasoning": "think"}}]})
    b = event({"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]})
    usage = event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    reads = [(1, role + a[:10]), (2, a[10:]), (3, b + b": keep-alive\n\n" + usage)]
    s = parse_stream(reads)
    assert s.chunk_ns == [2, 3] and s.texts == ["think", "hi"]
    assert (s.prompt_tokens, s.completion_tokens, s.finished, s.error) == (3, 2, True, None)
    assert parse_stream([(1, b'data: {"choices": [\n\n')]).error == "bad_stream"
    assert parse_stream([(1, b"<html>oops</html>")]).error == "bad_stream"
    assert parse_stream([(1, event({"error": {"message": "x"}}))]).error == "stream_error"


# ---- workloads ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bpe():
    """A small byte-level BPE trained on a few KB of text, like the synthetic model's."""
    text = " ".join(
        f"def f{i}(x, y): return x * {i} + y  # n={i**2} caf\u00e9 na\u00efve \u2603 \U0001f600"
        for i in range(300)
    )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text[i : i + 500] for i in range(0, len(text), 500)], trainer)
    return tok


@pytest.mark.parametrize("n_tokens", [1, 7, 128, 1000])
def test_random_prompts_exact_lengths(bpe, n_tokens):
    ps = random_prompts(bpe, 12, n_tokens, 32, seed=5)
    assert all(count_tokens(bpe, p.text) == p.input_tokens == n_tokens for p in ps)
    assert all(p.output_tokens == 32 for p in ps)
    assert len({p.text for p in ps}) == 12
    assert ps == random_prompts(bpe, 12, n_tokens, 32, seed=5)  # seeded
    assert ps != random_prompts(bpe, 12, n_tokens, 32, seed=6)


def test_sharegpt_prompts(bpe, tmp_path):
    convs = [
        {
            "conversations": [
                {"from": "human", "value": f"question number {i} " * 3},
                {"from": "gpt", "value": f"answer {i} " * 5},
            ]
        }
        for i in range(5)
    ] + [{"conversations": [{"from": "gpt", "value": "no human first"}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs))
    ps = sharegpt_prompts(path, bpe, 8, None, seed=1)
    assert len(ps) == 8 and len({p.text for p in ps}) == 5
    assert all(p.input_tokens == count_tokens(bpe, p.text) for p in ps)
    assert all(p.output_tokens >= 4 for p in ps)
    assert all(p.output_tokens == 64 for p in sharegpt_prompts(path, bpe, 3, 64, seed=1))
    assert ps == sharegpt_prompts(path, bpe, 8, None, seed=1)
