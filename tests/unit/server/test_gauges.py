"""GaugeSampler (servesweep.server.engines.gauges) against real HTTP on loopback."""

import subprocess
import sys
import time

import pytest

from servesweep.server.engines.gauges import GaugeSampler
from servesweep.server.http import http_get
from servesweep.server.process import free_port


@pytest.fixture
def page_server(tmp_path):
    """`python -m http.server` over tmp_path: GET /metrics serves tmp_path/metrics."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    (tmp_path / "metrics").write_text("")
    deadline = time.monotonic() + 10
    while http_get(url, 1.0)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield url, tmp_path / "metrics"
    proc.terminate()
    proc.wait(10)


def test_peaks_over_label_sets_and_time(page_server):
    url, page = page_server
    gauges = {"kv": "vllm:kv_cache_usage_perc", "running": "vllm:num_requests_running"}
    sampler = GaugeSampler(url, gauges, interval_s=0.05)
    low = 'vllm:kv_cache_usage_perc{engine="0"} 0.1\nvllm:num_requests_running{engine="0"} 3\n'
    with sampler:
        page.write_text(low)
        time.sleep(0.4)
        # Two engines: the larger counts; a NaN is no value.
        page.write_text(
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            'vllm:kv_cache_usage_perc{engine="0"} 0.25\n'
            'vllm:kv_cache_usage_perc{engine="1"} 0.75\n'
            'vllm:num_requests_running{engine="0"} NaN\n'
        )
        time.sleep(0.4)
        page.write_text(low.replace("0.1", "0.0"))  # drained: what a snapshot after sees
        time.sleep(0.3)
    result = sampler.result()
    assert result["peaks"] == {"kv": 0.75, "running": 3.0}
    assert result["samples"] >= 10 and result["interval_s"] == 0.05
    assert "errors" not in result


def test_a_server_that_does_not_answer_is_a_missing_measurement():
    url = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    with GaugeSampler(url, {"kv": "vllm:kv_cache_usage_perc"}, interval_s=0.05) as sampler:
        time.sleep(0.2)
    result = sampler.result()
    assert result["peaks"] == {} and result["samples"] == 0
    assert result["errors"] == [f"GET {url}: no answer"]


def test_no_gauges_reads_nothing():
    with GaugeSampler("http://127.0.0.1:9/metrics", {}) as sampler:
        pass
    assert sampler.result() == {"peaks": {}, "samples": 0, "interval_s": 0.5}
