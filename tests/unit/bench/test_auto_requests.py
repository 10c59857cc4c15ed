"""`num_prompts: auto` with the real client against the scripted SSE server (known
per-request timings): the level stops for precision where its batches say so, its
estimate agrees with a long fixed-count level's, and the caps end it with the reason
recorded."""

import json
import time

import pytest
from fixtures.sse_server import ServerProcess

from servesweep.bench.client import ClientSettings, run_level
from servesweep.level import Level
from servesweep.sizing import BOUND_MIN_BATCHES, Estimate, Precision, rse_bound
from servesweep.workloads.base import Prompt

# Each request's TTFT cycles through 4..40 ms, then 8 tokens 2 ms apart: a level of 4
# streams finishes a request every ~12 ms with a known spread.
SCRIPT = {"ttft_ms": [4.0 + 4.0 * k for k in range(10)], "gap_ms": 2.0}


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as srv:
        srv.set_script(SCRIPT)
        yield srv


def prompts(n):
    return [Prompt(f"p{i} a b c", 4, 8) for i in range(n)]


def level(server, tmp_path, n, precision=None, warmup=4, boot_share_s=None):
    path = tmp_path / f"r{time.monotonic_ns()}.jsonl"
    summary = run_level(
        ClientSettings(server.url),
        prompts(warmup + n),
        4,
        warmup,
        path,
        Level("concurrency", 4),
        0,
        precision=precision,
        boot_share_s=boot_share_s,
    )
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return summary, [r for r in records if not r["warmup"]]


def test_auto_stops_for_precision_and_agrees_with_a_long_level(server, tmp_path):
    rule = Precision(rse_pct=3.0, min_batches=5, max_s=60.0, max_requests=2000)
    auto, measured = level(server, tmp_path, rule.max_requests, rule)
    assert auto["status"] == "ok" and auto["stop_reason"] == "precision"
    # After min_batches on the estimate, or from 3 on its upper 95 % bound (batches timed
    # by the requests' own ends are alike here: each holds one cycle of the script).
    k = auto["stop_batches"]
    assert auto["stop_rse"] <= 0.03 and k >= BOUND_MIN_BATCHES
    if k < rule.min_batches:
        assert rse_bound(Estimate(None, auto["stop_rse"], k)) <= 0.03
    # It sent what it needed, not its cap: at least its counted batches and the discarded
    # one, and the summary counts what it sent (none of the unsent prompts is a failure).
    assert 10 * (k + 1) <= auto["num_prompts"] == len(measured) == auto["completed"] < 2000
    # Unbiased: its throughput within 3 RSE of a fixed level 5x longer, same server.
    long, _ = level(server, tmp_path, 5 * auto["num_prompts"])
    ratio = auto["output_throughput"] / long["output_throughput"]
    assert abs(ratio - 1) < 3 * 0.03 + 0.02, (auto["output_throughput"], long["output_throughput"])
    assert "stop_reason" not in long  # a count rule records none


def test_the_caps_end_a_level_and_say_so(server, tmp_path):
    strict = Precision(rse_pct=0.001, min_batches=5, max_s=1.0, max_requests=10**6)
    start = time.monotonic()
    capped, _ = level(server, tmp_path, 5000, strict)
    assert capped["stop_reason"] == "cap" and capped["stop_rse"] > 0.00001
    assert time.monotonic() - start < 1.0 + 5.0  # the cap, the warm-up, start and drain
    # Under auto a level's prompts are its warm-up and max_requests (sizing.num_prompts), so
    # the request cap holds at claim time: exactly 40 sent, and the summary says why it
    # stopped. (Given more prompts, claims would end only at the coordinator's next look,
    # 50 ms on: a few more, as many as finish in that time.)
    few = Precision(rse_pct=0.001, min_batches=5, max_s=60.0, max_requests=40)
    short, measured = level(server, tmp_path, few.max_requests, few)
    assert short["stop_reason"] == "max_requests"
    assert len(measured) == 40 and short["failed"] == 0


def test_a_stated_boot_scatter_stops_at_the_cost_optimal_length(server, tmp_path):
    # A boot's share of 2 s: where boots scatter 10 % a level stops once its sampling is
    # that share's worth; where they scatter 0.2 % it runs longer (more requests). Batches
    # of 7 requests, so that a batch is not one whole cycle of the script's TTFTs.
    sent = {}
    for cv in (10.0, 0.2):
        rule = Precision(boot_cv_pct=cv, batch_requests=7, max_s=30.0, max_requests=5000)
        auto, measured = level(server, tmp_path, rule.max_requests, rule, boot_share_s=2.0)
        assert auto["stop_reason"] == "cost_optimal", auto["stop_reason"]
        assert auto["boot_share_s"] == 2.0
        assert auto["stop_rse"] <= auto["stop_target_rse"]
        sent[cv] = len(measured)
    assert sent[0.2] > 2 * sent[10.0], sent
