"""Rate levels: the seeded arrival schedule, the rate figures, and the client sending on
schedule against the scripted server (its own record says when each request was read)."""

import math

import numpy as np
import pytest
from fixtures.sse_server import ServerProcess

from servesweep.bench import arrivals
from servesweep.bench.client import ClientSettings, run_level
from servesweep.level import INF, Level
from servesweep.sizing import PromptCount, level_requests, num_prompts, warmup_requests
from servesweep.sweep.benchmark import Arrival, BenchmarkSettings
from servesweep.workloads.base import Prompt


def test_poisson_schedule_has_exponential_gaps_and_is_seeded():
    how = Arrival("poisson", 1.0, 7)
    s = arrivals.schedule(20001, 50.0, how, salt=3)
    gaps = np.diff(s)
    assert s[0] == 0.0
    # Exponential gaps of mean 1/50 s: mean 20 ms, CV 1 (standard error ~0.7 % at n=20000).
    assert gaps.mean() == pytest.approx(0.02, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    # P(gap > mean) = e^-1 for an exponential.
    assert (gaps > 0.02).mean() == pytest.approx(math.exp(-1), abs=0.01)
    assert np.array_equal(s, arrivals.schedule(20001, 50.0, how, salt=3))
    # The schedule's own rate is the target exactly, however short it is.
    for n in (3, 20, 91):
        short = arrivals.schedule(n, 45.3, how, salt=n)
        assert (n - 1) / short[-1] == pytest.approx(45.3, rel=1e-12)
    assert not np.array_equal(s, arrivals.schedule(20001, 50.0, how, salt=4))


def test_gamma_burstiness_sets_the_spread_not_the_mean():
    # Gamma of shape k: CV = 1/sqrt(k). k = 0.25 -> CV 2; k = 4 -> CV 0.5.
    for k, cv in ((0.25, 2.0), (4.0, 0.5)):
        gaps = np.diff(arrivals.schedule(40001, 10.0, Arrival("gamma", k, 0)))
        assert gaps.mean() == pytest.approx(0.1, rel=0.04)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_inf_rate_sends_everything_at_once_and_is_never_late():
    assert arrivals.schedule(5, INF, Arrival("poisson", 1, 0)).tolist() == [0.0] * 5
    assert arrivals.late_threshold_s(INF) == math.inf
    assert arrivals.late_threshold_s(100) == 0.005  # max(5 ms, 2.5 ms)
    assert arrivals.late_threshold_s(10) == 0.025  # a quarter of the 100 ms mean gap


def test_level_keys():
    assert [Level.parse(v).key for v in (4, 4.0, 0.5, "inf", math.inf)] == [
        "4",
        "4",
        "0.5",
        "inf",
        "inf",
    ]
    assert Level.parse(math.inf).json == "inf" and Level.parse(2.0).json == 2
    assert Level.parse(2.0, "rate") == Level("rate", 2) and str(Level("rate", 0.5)) == "0.5"
    assert sorted([Level.parse("inf", "rate"), Level("rate", 4), Level("rate", 0.5)]) == [
        Level("rate", 0.5),
        Level("rate", 4),
        Level("rate", INF),
    ]


def _req(sent, due, held=False):
    return {"sent_s": sent, "scheduled_s": due, "held": held}


def test_rate_figures_by_hand():
    # Due every 0.1 s (10/s); sends lag 1, 2, 3, 4, 40 ms. Late threshold: 25 ms.
    due = [0.0, 0.1, 0.2, 0.3, 0.4]
    lag = [0.001, 0.002, 0.003, 0.004, 0.040]
    f = arrivals.rate_figures([_req(d + g, d) for d, g in zip(due, lag, strict=True)], 10.0)
    assert f.scheduled_rate == pytest.approx(4 / 0.4)
    assert f.achieved_rate == pytest.approx(4 / (0.440 - 0.001), rel=1e-4)
    assert f.send_lag_p50_ms == pytest.approx(3.0)
    assert f.send_lag_max_ms == pytest.approx(40.0)
    assert f.late_requests == 1
    # 1 late of 5 is over the 5 % limit: the client did not deliver the schedule.
    assert f.rate_short
    # The same lateness caused by the cap is not the client's: held, not short.
    f = arrivals.rate_figures(
        [_req(d + g, d, held=(g > 0.03)) for d, g in zip(due, lag, strict=True)], 10.0
    )
    assert f.late_requests == 0 and f.held_requests == 1 and not f.rate_short


def test_num_prompts_for_rates():
    rule = PromptCount(per_level=2, min=8, max=100)
    assert num_prompts(rule, Level.parse(16)) == 32
    assert num_prompts(rule, Level.parse(0.5)) == 8
    assert num_prompts(rule, Level.parse(1000)) == 100
    assert num_prompts(rule, Level.parse("inf")) == 8


def test_warmup_rule():
    bench = {"num_prompts": {"per_level": 1.5, "min": 20, "max": 100000}}
    auto = BenchmarkSettings.of({**bench, "warmup": "auto"})
    # A concurrency level: one wave at its own concurrency.
    assert [warmup_requests(auto, Level.parse(c)) for c in (1, 10, 1024)] == [1, 10, 1024]
    # A rate level: 10 s of its arrivals, at most what it measures; inf: what it measures.
    assert warmup_requests(auto, Level.parse(0.5, "rate")) == 5
    assert warmup_requests(auto, Level.parse(4, "rate")) == 20  # measured: max(20, 6)
    assert warmup_requests(auto, Level.parse(100, "rate")) == 150
    assert warmup_requests(auto, Level.parse("inf", "rate")) == 20
    # A spec's own count per level wins over the rule (a configured level).
    spec = BenchmarkSettings.of({**bench, "warmup": "auto", "num_prompts_per_level": {"4": 7}})
    assert warmup_requests(spec, Level.parse(4, "rate")) == 7
    # An integer is that many requests, whatever the level; the default is auto.
    assert warmup_requests(BenchmarkSettings.of({**bench, "warmup": 2}), Level.parse(1024)) == 2
    assert warmup_requests(BenchmarkSettings.of(bench), Level.parse(64)) == 64


def test_a_rate_levels_warmup_runs_at_its_rate(tmp_path):
    # Warm-up and measured requests both on their own schedules at 40/s: the server read
    # each warm-up request when it was due, and the measured ones only after the warm-up.
    n, warm, rate = 30, 12, 40.0
    prompts = [Prompt(f"p{i}", 2, 4) for i in range(warm + n)]
    how = Arrival("poisson", 1, 0)
    schedule = arrivals.schedule(n, rate, how).tolist()
    warm_schedule = arrivals.schedule(warm, rate, how, salt=99).tolist()
    with ServerProcess({"ttft_ms": 5, "gap_ms": 2}) as srv:
        summary = run_level(
            ClientSettings(srv.url),
            prompts,
            concurrency=warm + n,
            warmup=warm,
            records_path=tmp_path / "r.jsonl",
            level=Level("rate", rate),
            repeat=0,
            schedule_s=schedule,
            warmup_schedule_s=warm_schedule,
        )
        truth = {t["prompt"]: t for t in srv.truth()}
    assert summary["completed"] == n and summary["warmup"] == warm
    reads = np.array([truth[f"p{i}"]["recv_ns"] for i in range(warm)]) / 1e9
    err = np.abs((reads - reads[0]) - np.array(warm_schedule))
    assert np.percentile(err, 90) < 0.005, err
    assert warm_schedule[-1] > 0.1  # spread over time, not a burst
    last_warm_end = max(truth[f"p{i}"]["recv_ns"] for i in range(warm))
    assert min(truth[f"p{i}"]["recv_ns"] for i in range(warm, warm + n)) > last_warm_end
    assert summary["achieved_ratio"] == pytest.approx(1.0, abs=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("rate", [20.0, 200.0])
def test_client_sends_on_schedule(tmp_path, rate):
    n, warmup = 60, 2
    prompts = [Prompt(f"p{i}", 2, 4) for i in range(n + warmup)]
    schedule = arrivals.schedule(n, rate, Arrival("poisson", 1, 0)).tolist()
    with ServerProcess({"ttft_ms": 5, "gap_ms": 2}) as srv:
        summary = run_level(
            ClientSettings(srv.url),
            prompts,
            concurrency=n,
            warmup=warmup,
            records_path=tmp_path / "r.jsonl",
            level=Level("rate", rate),
            repeat=0,
            schedule_s=schedule,
        )
        truth = {t["prompt"]: t for t in srv.truth()}
    assert summary["status"] == "ok" and summary["load"] == "rate"
    assert summary["completed"] == n and not summary["rate_short"]
    assert summary["achieved_ratio"] == pytest.approx(1.0, abs=0.05)
    # The server read each request when it was due (its own clock, the same one): the
    # read times' gaps reproduce the schedule's within a few ms.
    reads = np.array([truth[f"p{i}"]["recv_ns"] for i in range(warmup, n + warmup)]) / 1e9
    err = np.abs((reads - reads[0]) - np.array(schedule))
    assert np.percentile(err, 90) < 0.005, err
    assert summary["target_rate"] == rate and summary["max_concurrency"] is None


@pytest.mark.slow
def test_cap_holds_requests_and_is_not_a_shortfall(tmp_path):
    # 100/s into a server whose requests take ~200 ms, capped at 2 in flight: at most
    # 10 req/s get through, every later one waits for the cap.
    n = 20
    prompts = [Prompt(f"p{i}", 2, 4) for i in range(n)]
    schedule = arrivals.schedule(n, 100.0, Arrival("poisson", 1, 1)).tolist()
    with ServerProcess({"ttft_ms": 170, "gap_ms": 10}) as srv:
        summary = run_level(
            ClientSettings(srv.url),
            prompts,
            concurrency=2,
            warmup=0,
            records_path=tmp_path / "r.jsonl",
            level=Level("rate", 100),
            repeat=0,
            schedule_s=schedule,
        )
    assert summary["completed"] == n
    assert summary["held_requests"] >= n - 4
    assert summary["achieved_rate"] < 12 and summary["max_concurrency"] == 2
    assert not summary["rate_short"] and not summary["client_bound"]
    assert summary["achieved_concurrency"] == pytest.approx(2.0, abs=0.15)


def _rate_config(**bench):
    from fixtures.configs import base_config

    config = base_config()
    config["benchmark"] = {"rate": [0.5, 4, "inf"], **bench}
    return config


def test_rate_sweep_spec_names_rates_and_arrival():
    from servesweep.sweep.config import load

    sweep = load(_rate_config(arrival={"distribution": "gamma", "burstiness": 0.5}))
    assert sweep.load_kind == "rate" and [lv.value for lv in sweep.levels] == [0.5, 4, math.inf]
    bench = sweep.spec("cpu", "tiny", "baseline")["benchmark"]
    assert bench["rate"] == [0.5, 4, "inf"]
    assert bench["arrival"] == {"distribution": "gamma", "burstiness": 0.5, "seed": 0}
    assert bench["num_prompts_per_level"] == {"0.5": 20, "4": 20, "inf": 20}
    # The SLO judges only: not in the spec unless a capacity search needs it at run time.
    plain = load({**_rate_config(), "slo": {"ttft_ms": 100}}).spec("cpu", "tiny", "baseline")
    assert "slo" not in plain
    searched = load({**_rate_config(search={"probes": 2}), "slo": {"ttft_ms": 100}})
    spec = searched.spec("cpu", "tiny", "baseline")
    assert spec["slo"] == {"ttft_ms": 100}
    assert spec["benchmark"]["search"] == {"probes": 2, "attainment": 0.9}


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda c: c["benchmark"].update(levels=[1]), "config: benchmark: give levels"),
        (lambda c: c["benchmark"].update(rate=[0]), "config: benchmark.rate[0]"),
        (
            lambda c: c["benchmark"].update(arrival={"burstiness": 2}),
            "config: benchmark.arrival.burstiness",
        ),
        (lambda c: c["benchmark"].update(search={}), "config: benchmark.search: needs slo"),
        (lambda c: c.update(slo={"ttft": 1}), "config: slo: unknown key"),
        (
            lambda c: c["benchmark"].update(workload={"kind": "shared_prefix", "groups": 2}),
            "config: benchmark.workload.prefix_tokens: required for kind shared_prefix",
        ),
        (
            lambda c: c["benchmark"].update(workload={"kind": "random", "groups": 2}),
            "config: benchmark.workload.groups: only for kind shared_prefix",
        ),
        (
            lambda c: c["benchmark"].update(
                workload={"kind": "sharegpt", "path": "x.json", "range_ratio": 0.5}
            ),
            "config: benchmark.workload.range_ratio: not for kind sharegpt (its lengths come",
        ),
        (
            lambda c: c["benchmark"].update(workload={"kind": "sharegpt"}),
            "config: benchmark.workload.path: required for kind sharegpt",
        ),
    ],
)
def test_bad_load_keys_get_one_line(change, key):
    from servesweep.sweep.config import ConfigError, load

    config = _rate_config()
    change(config)
    with pytest.raises(ConfigError) as err:
        load(config)
    message = str(err.value)
    assert message.startswith(key) and "\n" not in message, message


def test_max_concurrency_outside_a_rate_sweep_is_refused():
    from fixtures.configs import base_config

    from servesweep.sweep.config import ConfigError, load

    config = base_config()
    config["benchmark"]["max_concurrency"] = 4
    with pytest.raises(ConfigError, match="^config: benchmark.max_concurrency: only for a rate"):
        load(config)


def test_level_requests_are_what_a_boot_sends():
    # One computation for the boot, its prompts and the plan: warm-up, measured, and
    # whether a rate level's warm-up follows its own arrivals (auto) or is sent at once.
    bench = {"num_prompts": {"per_level": 1.5, "min": 20, "max": 100000}, "warmup": "auto"}
    of = BenchmarkSettings.of
    assert level_requests(of(bench), Level.parse(10)) == (10, 20, False)  # one wave, not paced
    rate = level_requests(of(bench), Level.parse(100, "rate"))
    assert rate == (150, 150, True) and rate.requests == 300
    assert level_requests(of({**bench, "warmup": 3}), Level.parse(100, "rate")) == (3, 150, False)
    spec = of({**bench, "num_prompts_per_level": {"4": 7}})
    assert level_requests(spec, Level.parse(4, "rate")).requests == 14
