"""Engine adapters: golden command lines (including the seeds' SGLang launches), request
extras, and the HTTP side (cache flush, snapshots) against a real local HTTP server."""

import http.server
import json
import shlex
import threading

import pytest
from fixtures.paths import ROOT

from servesweep.server.engines import ENGINES, get_engine
from servesweep.server.engines.prometheus import (
    counter_delta,
    metric_mean,
    metric_sum,
    parse_prometheus,
)
from servesweep.sweep.config import load_file

EXAMPLES = ROOT / "config" / "examples"

# The first seed's launch, verbatim (shared/seeds: Kimi-K2.5 EP with FlashInfer all-to-all).
SEED_KIMI_EP = """nohup /root/ml-env/bin/python3 -m sglang.launch_server \\
  --model /shared/kimi-k2.5-int4 \\
  --port 30000 \\
  --tp 8 \\
  --trust-remote-code \\
  --host 0.0.0.0 \\
  --cuda-graph-max-bs 128 \\
  --disable-custom-all-reduce \\
  --moe-a2a-backend flashinfer \\
  --moe-runner-backend flashinfer_cutlass \\
  > /data/eagle3/synth_100k/logs/ep_flashinfer_a2a.log 2>&1 &"""

# Aliases SGLang 0.5.9's parser maps to one option (server_args.py).
SGLANG_ALIASES = {"--model": "--model-path", "--tp-size": "--tp", "--tensor-parallel-size": "--tp"}


def options(argv: list[str]) -> dict[str, str | bool]:
    """`--flag value` / bare `--flag` pairs after `-m module`, aliases unified."""
    start = argv.index("-m") + 2
    out: dict[str, str | bool] = {}
    i = start
    while i < len(argv):
        flag = SGLANG_ALIASES.get(argv[i], argv[i])
        assert flag.startswith("--"), argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[flag] = argv[i + 1]
            i += 2
        else:
            out[flag] = True
            i += 1
    return out


def seed_argv(text: str) -> list[str]:
    tokens = shlex.split(text.replace("\\\n", " "))
    tokens = tokens[1:] if tokens[0] == "nohup" else tokens
    return tokens[: tokens.index(">")]


def sglang(flags: dict, **kw) -> list[str]:
    args = {
        "python": "/env/bin/python",
        "model_path": "/models/m",
        "host": "127.0.0.1",
        "port": 30000,
        **kw,
    }
    return get_engine("sglang").command(flags=flags, **args)


# -- command lines --------------------------------------------------------------------


def test_every_engine_is_registered():
    assert set(ENGINES) == {"transformers", "command", "sglang", "vllm"}


def test_sglang_golden_command():
    flags = {
        "tp": 8,
        "ep-size": 8,
        "trust-remote-code": True,
        "disable-radix-cache": False,
        "chunked-prefill-size": None,
        "cuda-graph-bs": [1, 2, 4],
        "json-model-override-args": {"rope_scaling": {"factor": 2}},
    }
    assert sglang(flags) == [
        "/env/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/m",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--tp",
        "8",
        "--ep-size",
        "8",
        "--trust-remote-code",
        "--cuda-graph-bs",
        "1",
        "2",
        "4",
        "--json-model-override-args",
        '{"rope_scaling":{"factor":2}}',
    ]


def test_vllm_golden_command_and_env():
    engine = get_engine("vllm")
    command = engine.command(
        python="/env/bin/python",
        model_path="/models/m",
        host="127.0.0.1",
        port=8000,
        flags={"tensor-parallel-size": 8, "enable-expert-parallel": True, "max-num-seqs": 4},
        gpus=8,
    )
    assert command == [
        "/env/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/m",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "8",
        "--enable-expert-parallel",
        "--max-num-seqs",
        "4",
    ]
    # The prefix-cache reset needs vLLM's dev mode; a variant may still turn it off.
    assert engine.env({"VLLM_CPU_KVCACHE_SPACE": "1"}) == {
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    assert engine.env({"VLLM_SERVER_DEV_MODE": "0"}) == {"VLLM_SERVER_DEV_MODE": "0"}


def test_transformers_and_command_golden_commands():
    transformers = get_engine("transformers").command(
        python="/env/bin/python",
        model_path="/models/m",
        host="127.0.0.1",
        port=9000,
        flags={"continuous-batching": True, "cb-num-blocks": 512},
    )
    assert transformers == [
        "/env/bin/transformers",
        "serve",
        "/models/m",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
        "--continuous-batching",
        "--cb-num-blocks",
        "512",
    ]
    command = get_engine(
        "command", {"command": "{bin}/llama-server -m {model}/m.gguf --host {host} --port {port}"}
    ).command(
        python="/env/bin/python",
        model_path="/models/m",
        host="127.0.0.1",
        port=9001,
        flags={"n-gpu-layers": 99},
        gpus=2,
    )
    assert command == [
        "/env/bin/llama-server",
        "-m",
        "/models/m/m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "9001",
        "--n-gpu-layers",
        "99",
    ]


@pytest.mark.parametrize("engine,flag", [("sglang", "port"), ("sglang", "model"), ("vllm", "host")])
def test_flags_servesweep_sets_are_refused(engine, flag):
    with pytest.raises(ValueError, match=f"flag --{flag} is set by servesweep"):
        get_engine(engine).command(python="p", model_path="m", host="h", port=1, flags={flag: "x"})


def test_request_extras_fix_output_lengths_where_the_engine_allows():
    assert get_engine("sglang").request_extras() == {"ignore_eos": True}
    assert get_engine("vllm").request_extras() == {"ignore_eos": True}
    # transformers serve answers 422 to unknown fields (docs/design.md §7).
    assert get_engine("transformers").request_extras() == {}


def test_served_model_name_defaults_to_the_model_path():
    assert get_engine("sglang").served_model_name("/models/m") == "/models/m"
    assert get_engine("vllm", {"model_name": "kimi"}).served_model_name("/models/m") == "kimi"


# -- the seeds' launches --------------------------------------------------------------


def test_kimi_example_reproduces_the_seed_launch():
    """`ep-flashinfer` with the seed's interpreter, host and port is the seed's command;
    the only addition is --enable-metrics, which every variant carries from baseline."""
    sweep = load_file(EXAMPLES / "kimi-k2.5-eagle3.yaml")
    model = sweep.models["kimi-k2.5-int4"]["path"]
    command = sglang(
        sweep.variants["ep-flashinfer"]["flags"],
        python="/root/ml-env/bin/python3",
        model_path=model,
        host="0.0.0.0",
        port=30000,
    )
    assert command == [
        "/root/ml-env/bin/python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/shared/kimi-k2.5-int4",
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--tp",
        "8",
        "--trust-remote-code",
        "--cuda-graph-max-bs",
        "128",
        "--enable-metrics",
        "--disable-custom-all-reduce",
        "--moe-a2a-backend",
        "flashinfer",
        "--moe-runner-backend",
        "flashinfer_cutlass",
    ]
    seed = seed_argv(SEED_KIMI_EP)
    assert seed[:3] == command[:3]
    ours = options(command)
    assert ours.pop("--enable-metrics") is True
    assert ours == options(seed)


def test_kimi_variants_carry_flags_forward():
    sweep = load_file(EXAMPLES / "kimi-k2.5-eagle3.yaml")
    baseline = sweep.variants["baseline"]["flags"]
    assert baseline == {
        "tp": 8,
        "trust-remote-code": True,
        "cuda-graph-max-bs": 128,
        "enable-metrics": True,
    }
    assert sweep.variants["no-custom-ar"]["flags"] == {
        **baseline,
        "disable-custom-all-reduce": True,
    }
    eagle3 = sweep.variants["eagle3"]["flags"]
    assert eagle3 == {
        **baseline,
        "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "/shared/kimi-k2.5-eagle3",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4,
    }
    assert sweep.variants["eagle3"]["chain"] == ["baseline", "eagle3"]
    assert sweep.variants["ep-flashinfer"]["chain"] == ["baseline", "no-custom-ar", "ep-flashinfer"]


def test_glm5_example_reproduces_the_seed_hunt():
    """Baseline, MSCCL++ (4 MB), SBO on top of it, EP8 with the FlashInfer all-to-all
    keeping MSCCL++ (the seed's run_tp8_ep8.sh), piecewise CUDA graphs."""
    sweep = load_file(EXAMPLES / "glm5-nvfp4.yaml")
    spec = sweep.spec("sglang-cu130", "glm5-nvfp4", "ep8")
    assert spec["command"] == [
        "<stack>/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "<model>",
        "--host",
        "127.0.0.1",
        "--port",
        "<port>",
        "--tp",
        "8",
        "--trust-remote-code",
        "--moe-runner-backend",
        "flashinfer_cutlass",
        "--enable-metrics",
        "--enable-mscclpp",
        "--ep-size",
        "8",
        "--moe-a2a-backend",
        "flashinfer",
    ]
    assert spec["env"] == {"SGLANG_MSCCLPP_MAX_BYTES": "4MB"}
    assert spec["gpus"] == 8
    commands = {
        v: options(sweep.spec("sglang-cu128", "glm5-nvfp4", v)["command"]) for v in sweep.variants
    }
    assert "--enable-mscclpp" not in commands["baseline"]
    assert commands["mscclpp"] == {**commands["baseline"], "--enable-mscclpp": True}
    assert commands["sbo"] == {**commands["mscclpp"], "--enable-single-batch-overlap": True}
    assert commands["piecewise-cuda-graph"] == {
        **commands["baseline"],
        "--enable-piecewise-cuda-graph": True,
    }
    assert sweep.variants["sbo"]["env"] == {"SGLANG_MSCCLPP_MAX_BYTES": "4MB"}
    assert sweep.variants["piecewise-cuda-graph"]["env"] == {}


# -- Prometheus -----------------------------------------------------------------------

METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0",model_name="/m y"} 3.0
sglang:num_running_reqs{model_name="/m y",tp_rank="1"} 2.0
sglang:cache_hit_rate{tp_rank="0"} 0.25
sglang:cache_hit_rate{tp_rank="1"} 0.75
sglang:spec_accept_length{tp_rank="0"} 2.5
vllm:prefix_cache_queries_total{engine="0"} 400 1712345678000
vllm:prefix_cache_hits_total{engine="0"} 100
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 7
vllm:e2e_request_latency_seconds_sum 3.5
odd{label="a \\"quoted\\" } value"} 1e3
no_value_here
nan_gauge NaN
"""


def test_parse_prometheus():
    parsed = parse_prometheus(METRICS)
    # Label order is normalized so keys match across scrapes.
    assert parsed['sglang:num_running_reqs{model_name="/m y",tp_rank="0"}'] == 3.0
    assert parsed['sglang:num_running_reqs{model_name="/m y",tp_rank="1"}'] == 2.0
    assert parsed['vllm:prefix_cache_queries_total{engine="0"}'] == 400  # timestamp dropped
    assert parsed['odd{label="a \\"quoted\\" } value"}'] == 1000.0
    assert "no_value_here" not in parsed
    assert metric_sum(parsed, "sglang:num_running_reqs") == 5.0
    assert metric_mean(parsed, "sglang:cache_hit_rate") == 0.5
    assert metric_sum(parsed, "nan_gauge") is None
    assert metric_sum(parsed, "absent") is None


def test_counter_delta_keeps_counters_only():
    before = {"a_total": 10.0, "b_sum": 1.0, "c_count": 2.0, "gauge": 5.0, 'd_total{x="1"}': 1.0}
    after = {"a_total": 15.0, "b_sum": 4.0, "c_count": 3.0, "gauge": 9.0, "new_total": 1.0}
    # A series first seen after the level started from 0 (labelled counters appear on their
    # first increment); one gone from the page is not there to subtract.
    assert counter_delta(before, after) == {
        "a_total": 5.0,
        "b_sum": 3.0,
        "c_count": 1.0,
        "new_total": 1.0,
    }


# -- HTTP side against a real server --------------------------------------------------


class FakeServer:
    """A local HTTP server answering from a table of (method, path) -> list of
    (status, body); the last entry repeats. Records every request."""

    def __init__(self, routes: dict):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                server.requests.append((self.command, self.path))
                replies = server.routes.get((self.command, self.path))
                if not replies:
                    self.send_response(404)
                    self.end_headers()
                    return
                status, body = replies.pop(0) if len(replies) > 1 else replies[0]
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_sglang_flush_retries_while_requests_run():
    busy = (400, "Cache flushed.\n(When there are running or waiting requests ...)")
    with FakeServer({("POST", "/flush_cache"): [busy, busy, (200, "Cache flushed.")]}) as srv:
        assert get_engine("sglang").flush_cache(srv.url, timeout_s=5) is True
    assert srv.requests == [("POST", "/flush_cache")] * 3


def test_sglang_flush_gives_up_when_always_busy():
    with FakeServer({("POST", "/flush_cache"): [(400, "busy")]}) as srv:
        assert get_engine("sglang").flush_cache(srv.url, timeout_s=0.6) is False


def test_sglang_snapshot_falls_back_to_the_old_server_info_path():
    info = {
        "tp_size": 8,
        "ep_size": 8,
        "version": "0.5.9",
        "internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 3.0}],
    }
    routes = {("GET", "/metrics"): [(200, METRICS)], ("GET", "/get_server_info"): [(200, info)]}
    with FakeServer(routes) as srv:
        snap = get_engine("sglang").snapshot(srv.url)
    assert srv.requests == [
        ("GET", "/metrics"),
        ("GET", "/server_info"),
        ("GET", "/get_server_info"),
    ]
    assert snap["server_info"] == info
    assert not any(k.split("{")[0].endswith("_bucket") for k in snap["metrics"])
    assert "nan_gauge" not in snap["metrics"]  # records stay strict JSON
    assert snap["headline"] == {
        "running_requests": 5.0,
        "prefix_cache_hit_rate": 0.5,
        "spec_accept_length": 2.5,
        "version": "0.5.9",
    }
    # The first server-info path answered 404; the second was found: no error.
    assert "errors" not in snap
    json.dumps(snap, allow_nan=False)


def test_snapshot_records_what_did_not_answer_and_never_raises():
    with FakeServer({("GET", "/server_info"): [(200, {"version": "0.5.9"})]}) as srv:
        snap = get_engine("sglang").snapshot(srv.url)
        url = srv.url
    # SGLang without --enable-metrics: said so, and the rest still captured.
    assert snap == {
        "server_info": {"version": "0.5.9"},
        "headline": {"version": "0.5.9"},
        "errors": ["GET /metrics: HTTP 404"],
    }
    # Nothing listens any more: no exception; the record says nothing answered.
    assert get_engine("sglang").snapshot(url, timeout_s=1) == {
        "errors": [
            "GET /metrics: no answer",
            "no server info (/server_info: no answer; /get_server_info: no answer)",
        ]
    }
    assert get_engine("vllm").flush_cache(url, timeout_s=0.5) is False


def test_vllm_flush_and_snapshot():
    routes = {
        ("POST", "/reset_prefix_cache"): [(200, {"success": False}), (200, {"success": True})],
        ("GET", "/metrics"): [(200, METRICS)],
        ("GET", "/server_info?config_format=json"): [(404, "")],
        ("GET", "/version"): [(200, {"version": "0.32.0"})],
    }
    with FakeServer(routes) as srv:
        engine = get_engine("vllm")
        assert engine.flush_cache(srv.url, timeout_s=5) is True
        snap = engine.snapshot(srv.url)
    assert snap["headline"] == {"prefix_cache_hit_rate": 0.25, "version": "0.32.0"}


def test_vllm_flush_without_dev_mode_reports_no_cache():
    with FakeServer({}) as srv:
        assert get_engine("vllm").flush_cache(srv.url) is None
