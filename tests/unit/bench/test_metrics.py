"""Metric math on hand-built timelines (servesweep.bench.metrics; docs/metrics.md)."""

import json

import numpy as np
import pytest
from fixtures.paths import FIXTURES

from servesweep.bench import metrics as m
from servesweep.level import Level


def rec(index, sent_s, ttft_ms, gaps_ms=(), tokens=None, ok=True, warmup=False, tail_ms=0, **kw):
    """A request record: first content chunk at ttft_ms, then one chunk per gap; the last
    byte tail_ms after the last chunk."""
    times = [float(t) for t in np.cumsum([ttft_ms, *gaps_ms])]
    tokens = list(tokens) if tokens is not None else [1] * len(times)
    out = sum(tokens)
    e2el = times[-1] + tail_ms
    r = {
        "index": index,
        "warmup": warmup,
        "ok": ok,
        "error": None if ok else kw.pop("error", "http_500"),
        "prompt_tokens": kw.pop("prompt_tokens", 10),
        "output_tokens": out if ok else None,
        "retokenized_tokens": kw.pop("retokenized_tokens", out),
        "usage_reported": True,
        "sent_s": sent_s,
        "end_s": sent_s + e2el / 1e3,
        "ttft_ms": ttft_ms if ok else None,
        "e2el_ms": e2el if ok else None,
        "tpot_ms": (e2el - ttft_ms) / (out - 1) if ok and out > 1 else None,
        "chunk_times_ms": times if ok else [],
        "chunk_tokens": tokens if ok else [],
    }
    r.update(kw)
    return r


# ---- one request ---------------------------------------------------------------------------


def test_apportion_keeps_total_and_proportions():
    assert m.apportion([1, 1, 2], 8) == [2, 2, 4]
    assert sum(m.apportion([3, 1, 1], 7)) == 7
    assert m.apportion([1, 1, 1], 2) == [1, 1, 0]  # ties go to the earlier chunk
    assert m.apportion([0, 0], 4) == [2, 2]
    assert m.apportion([], 5) == []


def test_tokens_per_chunk_sources():
    # Cumulative usage on every chunk: exact deltas.
    assert m.tokens_per_chunk([1, 3, 4, 8], None, 8) == [1, 2, 1, 4]
    # Usage only at the end: one each, the rest in proportion to the retokenized counts.
    assert m.tokens_per_chunk([None, None, None], [1, 2, 1], 8) == [2, 4, 2]
    # Retokenizing the chunks overcounts (BPE merges differ): still one token per chunk.
    assert m.tokens_per_chunk([None] * 5, [1, 1, 3, 1, 2], 5) == [1] * 5
    assert m.tokens_per_chunk([None] * 3, [1, 1, 3], 4) == [1, 1, 2]
    # Fewer tokens than chunks (odd, but possible): plain scaling.
    assert m.tokens_per_chunk([None] * 3, [1, 1, 2], 2) == [1, 0, 1]
    # No tokenizer: the total split evenly.
    assert m.tokens_per_chunk([None, None], None, 5) == [3, 2]
    # Nothing at all: one per chunk.
    assert m.tokens_per_chunk([None, None], None, None) == [1, 1]


def test_request_metrics_ttft_e2el_tpot():
    ms = 1_000_000
    sent = 5 * ms
    r = m.request_metrics(sent, sent + 100 * ms, [sent + 20 * ms, sent + 60 * ms], [1, 9], 10)
    assert r["ttft_ms"] == 20.0
    assert r["e2el_ms"] == 100.0
    assert r["tpot_ms"] == pytest.approx(80 / 9, abs=1e-4)
    assert r["chunk_times_ms"] == [20.0, 60.0]
    # One output token: tpot is undefined.
    assert m.request_metrics(sent, sent + 30 * ms, [sent + 30 * ms], [1], 1)["tpot_ms"] is None


def test_itl_splits_multi_token_chunks():
    # Chunks at 10, 20, 40 ms carrying 1, 2, 4 tokens: every token 5 ms apart.
    gaps = m.itl_gaps([10, 20, 40], [1, 2, 4])
    assert gaps.tolist() == [5.0] * 6
    # chunk_gap keeps the raw gaps.
    assert m.chunk_gaps([10, 20, 40]).tolist() == [10.0, 20.0]
    # A chunk that carried no token hands its time on to the next.
    assert m.itl_gaps([10, 15, 30], [1, 0, 2]).tolist() == [10.0, 10.0]
    assert m.itl_gaps([10], [3]).size == 0


def test_usage_mismatch_is_a_consistency_check():
    def r(usage, retok, chunks):
        return {"output_tokens": usage, "retokenized_tokens": retok, "chunk_times_ms": [0] * chunks}

    # One token per chunk: consistent whatever the chunk texts retokenize to (random tokens
    # often re-encode to more than one token each).
    assert not m.usage_mismatch(r(100, 110, 100))
    # Fewer tokens than content chunks: usage undercounts (each chunk came from a token).
    assert not m.usage_mismatch(r(98, 120, 100))
    assert m.usage_mismatch(r(97, 120, 100))
    # More tokens than the chunks' texts retokenize to is no inconsistency: several tokens in
    # one chunk can encode together to fewer (the H200 records below).
    assert not m.usage_mismatch(r(103, 100, 80))
    assert not m.usage_mismatch(r(100, None, 100))  # no tokenizer: the chunk count still holds
    assert m.usage_mismatch(r(90, None, 100))
    assert not m.usage_mismatch({**r(50, 50, 100), "usage_reported": False})


H200 = json.loads((FIXTURES / "vllm_h200_records.json").read_text())


def test_vllm_coalesced_chunks_are_no_usage_mismatch():
    """Records our client wrote against vLLM 0.26.0 on the H200, which the retokenized rule
    flagged (levels 1 and 256 of every variant were excluded for it), and vLLM's own token
    ids for the same prompt: the usage count was right; the last chunk carried two tokens
    ("********" twice) whose text encodes alone as one ("****************")."""
    record = H200["records"]["sweep_L1_9"]
    truth = H200["probe_sweep_L1_9"]
    chunks = truth["chunks"]
    assert truth["usage"] == sum(len(c["token_ids"]) for c in chunks) == 32
    assert [len(c["token_ids"]) for c in chunks] == [1] * 30 + [2]
    assert chunks[-1]["token_ids"] == [1007, 1007] and chunks[-1]["text"] == "*" * 16
    assert truth["last_chunk_alone"] == 1
    # What the client saw: 31 content chunks, usage 32, the texts retokenize to 31; the old
    # rule (usage > 1.02 x retokenized) flagged it.
    assert (record["output_tokens"], record["retokenized_tokens"]) == (32, 31)
    assert len(record["chunk_times_ms"]) == 31
    assert record["output_tokens"] > 1.02 * record["retokenized_tokens"]
    assert not m.usage_mismatch(record)
    # At 1,024 streams one request's whole 128-token output came in one chunk, whose
    # repetitive text encodes to 15 tokens: consistent (128 tokens >= 1 chunk).
    whole = H200["records"]["parity_L1024_r1_2009"]
    assert (whole["output_tokens"], whole["retokenized_tokens"]) == (128, 15)
    assert len(whole["chunk_times_ms"]) == 1 and not m.usage_mismatch(whole)
    # The same record with a count below its chunks is still caught.
    assert m.usage_mismatch({**record, "output_tokens": 30})


# ---- one level -----------------------------------------------------------------------------


def test_stats_percentiles():
    s = m.stats(range(1, 101))
    assert s["mean"] == 50.5
    assert s["median"] == 50.5
    assert s["p90"] == pytest.approx(90.1)
    assert s["p99"] == pytest.approx(99.01)
    assert s["std"] == pytest.approx(np.std(np.arange(1, 101)), abs=1e-4)
    assert m.stats([]) == dict.fromkeys(m.STATS)


def test_steady_window():
    # Target 2: reached when the second request is sent at 0.1; last send at 1.0.
    intervals = [(0.0, 0.5), (0.1, 0.6), (0.5, 1.2), (0.6, 1.3), (1.0, 1.5)]
    assert m.steady_window(intervals, 2) == (0.1, 1.0)
    assert m.mean_inflight(intervals, 0.1, 1.0) == pytest.approx(2.0)
    # A slot freed and refilled at the same instant is not an overlap.
    assert m.steady_window([(0, 1), (1, 2)], 2) is None
    # Target reached only by the last send: empty window.
    assert m.steady_window([(0, 1), (0.5, 1)], 2) is None


def test_peak_bucket():
    arrivals = np.array([0.1, 0.2, 0.9, 1.1, 1.2, 2.5])
    tokens = np.array([1, 1, 1, 5, 1, 2])
    assert m.peak_throughput(arrivals, tokens, 0.0) == 6.0  # bucket [1, 2)
    assert m.peak_throughput(arrivals, tokens, 0.5) == 7.0  # buckets from 0.5: [0.5, 1.5)


def level_records(n=8, concurrency=2):
    """One warmup, then n requests of exactly 1 s (10 one-token chunks at 50, 150, ... 950 ms),
    `concurrency` at a time, back to back from 0.1 s."""
    recs = [rec(0, 0.0, 7, [5] * 9, warmup=True)]
    for i in range(n):
        sent = 0.1 + (i // concurrency) * 1.0
        recs.append(rec(i + 1, sent, 50, [100] * 9, tail_ms=50))
    return recs


def test_summarize_level():
    recs = level_records()
    s = m.level_summary(
        recs, level=Level("concurrency", 2), repeat=1, client_cpu_s=0.2, client_cpu_share=0.04
    )
    assert (s["level"], s["repeat"], s["status"], s["cause"]) == (2, 1, "ok", None)
    assert (s["num_prompts"], s["warmup"], s["completed"], s["failed"]) == (8, 1, 8, 0)
    assert s["duration_s"] == pytest.approx(4.0)
    assert s["total_output_tokens"] == 80
    assert s["output_throughput"] == pytest.approx(20.0)
    assert s["request_throughput"] == pytest.approx(2.0)
    assert s["total_token_throughput"] == pytest.approx(40.0)
    # Two in flight from 0.1 until the last send at 3.1.
    assert s["steady_window_s"] == pytest.approx(3.0)
    # Six requests' 10 tokens each arrive inside the window.
    assert s["steady_output_throughput"] == pytest.approx(60 / 3.0)
    assert s["peak_output_throughput"] == 20.0
    assert s["achieved_concurrency"] == pytest.approx(2.0)
    assert s["concurrency"] == pytest.approx(2.0)
    assert s["client_bound"] is False
    assert s["median_ttft_ms"] == 50.0
    assert s["mean_tpot_ms"] == pytest.approx(950 / 9, abs=1e-4)
    assert s["p99_itl_ms"] == pytest.approx(100.0)
    assert s["median_e2el_ms"] == 1000.0
    assert s["mean_chunk_gap_ms"] == 100.0
    assert s["client_cpu_share"] == pytest.approx(0.04)


def test_summarize_excludes_warmup_and_failures_from_latencies():
    recs = level_records()
    recs.append(rec(99, 0.5, 5000, [1], ok=False))  # a failure with absurd numbers
    s = m.level_summary(recs, level=Level("concurrency", 2), repeat=0)
    assert s["median_ttft_ms"] == 50.0  # the warmup's 7 ms and the failure's 5 s do not count
    assert s["mean_ttft_ms"] == 50.0
    assert s["failed"] == 1 and s["errors"] == {"http_500": 1}


def test_client_bound_when_concurrency_not_held():
    # Target 4, but the client only ever kept 2 in flight.
    recs = level_records(concurrency=2)
    s = m.level_summary(recs, level=Level("concurrency", 4), repeat=0)
    assert s["steady_window_s"] is None  # 4 were never in flight
    # Mean in flight from the first send (0.1 s) to the last (3.1 s).
    assert s["achieved_concurrency"] == pytest.approx(2.0)
    assert s["client_bound"] is True
    # Reached, but not held: 4 in flight for the first second, then 2.
    recs = [rec(i, 0.0, 50, [100] * 9, tail_ms=50) for i in range(4)]
    recs += [rec(4 + i, 1.0 + (i // 2), 50, [100] * 9, tail_ms=50) for i in range(6)]
    s = m.level_summary(recs, level=Level("concurrency", 4), repeat=0)
    assert s["steady_window_s"] == pytest.approx(3.0)
    assert s["achieved_concurrency"] == pytest.approx((4 + 2 + 2) / 3, abs=1e-3)
    assert s["client_bound"] is True
    # A saturated client worker counts too.
    s = m.level_summary(
        level_records(), level=Level("concurrency", 2), repeat=0, client_cpu_share=0.95
    )
    assert s["client_bound"] is True


def test_drain_does_not_make_a_perfect_client_client_bound():
    # Level 2 held exactly until the last send at 2.0 s; then one long request drains for
    # 10 s. The whole level's mean in flight is far under 2, the steady window's is 2.
    recs = [rec(i, float(i // 2), 50, [100] * 9, tail_ms=50) for i in range(5)]
    recs.append(rec(5, 2.0, 50, [1000] * 9, tail_ms=950))
    s = m.level_summary(recs, level=Level("concurrency", 2), repeat=0)
    assert s["achieved_concurrency"] == pytest.approx(2.0)
    assert s["concurrency"] == pytest.approx(15.0 / 12.0)
    assert s["client_bound"] is False


def test_all_requests_at_once_has_no_steady_window():
    # num_prompts == level: everything is sent at once, then the level only drains.
    recs = [rec(i, 0.001 * i, 50, [100] * 9, tail_ms=50) for i in range(4)]
    s = m.level_summary(recs, level=Level("concurrency", 4), repeat=0)
    assert s["steady_window_s"] is None and s["steady_output_throughput"] is None
    assert s["achieved_concurrency"] is None
    assert s["concurrency"] == pytest.approx(4.0, abs=0.02)
    assert s["client_bound"] is False


def test_error_rate_fails_level():
    recs = [rec(i, i * 0.1, 10, [5]) for i in range(4)]
    recs += [rec(4 + i, 0.05 + i * 0.1, 10, ok=False, error="http_500") for i in range(5)]
    s = m.level_summary(recs, level=Level("concurrency", 1), repeat=0)
    assert (s["status"], s["cause"]) == ("failed", "http_errors")
    assert s["errors"] == {"http_500": 5}
    s = m.level_summary(recs, level=Level("concurrency", 1), repeat=0, error_rate_threshold=0.6)
    assert s["status"] == "ok"


def test_stalled_level_is_hung():
    s = m.level_summary(level_records(), level=Level("concurrency", 2), repeat=0, stalled=True)
    assert (s["status"], s["cause"]) == ("failed", "hung")


def test_usage_mismatch_counted():
    recs = level_records()
    recs[3]["output_tokens"] = 8  # 10 content chunks, 8 tokens
    assert m.level_summary(recs, level=Level("concurrency", 2), repeat=0)["usage_mismatch"] == 1
