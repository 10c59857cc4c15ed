"""GPU telemetry: the sampler's arithmetic against a scripted NVML, its silence without
NVML, and (where a GPU and nvidia-ml-py exist) a real sample."""

import sys
import time
import types

import pytest

from servesweep.server.telemetry import GpuSampler, joules_per_token, visible_indices

MIB = 1024 * 1024


def fake_nvml(memory_mib: dict[int, list[int]], watts: float, energy=True, fail_init=False):
    """A pynvml stand-in: GPU i reports memory_mib[i] in turn (the last value repeats),
    a constant power, and an energy counter rising 1 J per call when `energy`."""
    state = {"init": 0, "shutdown": 0, "energy": {i: 1_000_000 for i in memory_mib}}
    nvml = types.ModuleType("pynvml")

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
        state["init"] += 1

    def memory(handle):
        values = memory_mib[handle]
        used = values.pop(0) if len(values) > 1 else values[0]
        return types.SimpleNamespace(used=used * MIB, total=80_000 * MIB)

    def total_energy(handle):
        if not energy:
            raise RuntimeError("Not Supported")
        state["energy"][handle] += 1000  # mJ
        return state["energy"][handle]

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: state.__setitem__("shutdown", state["shutdown"] + 1)
    nvml.nvmlDeviceGetCount = lambda: len(memory_mib)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetName = lambda h: b"NVIDIA RTX PRO 6000 Blackwell"
    nvml.nvmlDeviceGetMemoryInfo = memory
    nvml.nvmlDeviceGetPowerUsage = lambda h: int(watts * 1000)
    nvml.nvmlDeviceGetTotalEnergyConsumption = total_energy
    nvml.state = state
    return nvml


def test_samples_memory_peak_power_and_energy_counter(monkeypatch):
    nvml = fake_nvml({0: [1000, 1500, 3000, 2000], 1: [500]}, watts=250.0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with GpuSampler([0, 1], interval_s=0.01) as sampler:
        time.sleep(0.1)
    result = sampler.result()
    assert result["available"] is True and result["reason"] is None
    gpu0, gpu1 = result["gpus"]
    assert gpu0["index"] == 0 and gpu0["name"] == "NVIDIA RTX PRO 6000 Blackwell"
    assert gpu0["memory_used_start_mib"] == 1000  # after load: the level's first sample
    assert gpu0["memory_used_peak_mib"] == 3000
    assert gpu1["memory_used_start_mib"] == gpu1["memory_used_peak_mib"] == 500
    assert gpu0["power_mean_w"] == gpu0["power_max_w"] == 250.0
    assert gpu0["samples"] >= 3
    # Counter read once at the start and once at the end: 1 J apart per GPU.
    assert gpu0["energy_j"] == gpu1["energy_j"] == 1.0
    assert gpu0["energy_source"] == "counter"
    assert result["energy_j"] == 2.0
    assert nvml.state["init"] == nvml.state["shutdown"] == 1
    assert joules_per_token(result, 400) == 0.005


def test_integrates_power_where_the_board_has_no_energy_counter(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [100]}, watts=300.0, energy=False))
    with GpuSampler(None, interval_s=0.01) as sampler:  # None: every GPU NVML sees
        time.sleep(0.2)
    gpu = sampler.result()["gpus"][0]
    assert gpu["energy_source"] == "sampled"
    # 300 W over the span between the first and last sample (~0.2 s).
    span = sampler.result()["duration_s"]
    assert 0.5 * 300 * span <= gpu["energy_j"] <= 300 * (span + 0.001)


def test_without_nvml_every_field_is_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with GpuSampler([0, 3]) as sampler:
        pass
    result = sampler.result()
    assert result["available"] is False
    assert "pynvml not importable" in result["reason"]
    assert result["energy_j"] is None
    assert [g["index"] for g in result["gpus"]] == [0, 3]
    for gpu in result["gpus"]:
        measured = {k: v for k, v in gpu.items() if k not in ("index", "samples")}
        assert set(measured.values()) == {None}, gpu
        assert gpu["samples"] == 0
    assert joules_per_token(result, 100) is None


def test_nvml_that_does_not_initialise_is_silent(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [1]}, 1.0, fail_init=True))
    with GpuSampler([0]) as sampler:
        pass
    result = sampler.result()
    assert result["available"] is False
    assert "NVML did not initialise" in result["reason"]
    assert result["gpus"][0]["memory_used_start_mib"] is None


def test_a_gpu_index_nvml_does_not_know_is_a_missing_measurement(monkeypatch):
    nvml = fake_nvml({0: [1]}, 1.0)

    def handle(i):
        if i != 0:
            raise RuntimeError("Invalid Argument")
        return i

    nvml.nvmlDeviceGetHandleByIndex = handle
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with GpuSampler([0, 7]) as sampler:
        pass
    assert sampler.result()["available"] is False
    assert nvml.state["shutdown"] == 1


def test_the_level_s_own_error_is_not_swallowed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({0: [1]}, 1.0))
    with pytest.raises(KeyError):
        with GpuSampler([0], interval_s=0.01):
            raise KeyError("level failed")


def test_visible_indices():
    assert visible_indices("0,3") == [0, 3]
    assert visible_indices(None, count=2) == [0, 1]
    assert visible_indices(None) is None
    assert visible_indices("GPU-8f2a1c3e-1111") is None
    assert visible_indices("") == []


def _real_nvml() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _real_nvml(), reason="needs nvidia-ml-py and an NVIDIA driver")
def test_real_gpu_is_sampled():
    with GpuSampler([0], interval_s=0.05) as sampler:
        time.sleep(0.5)
    result = sampler.result()
    assert result["available"] is True
    gpu = result["gpus"][0]
    assert gpu["memory_used_peak_mib"] is not None and gpu["memory_used_peak_mib"] >= 0
    assert gpu["power_mean_w"] is not None and gpu["power_mean_w"] > 0
    assert gpu["energy_j"] is not None and gpu["energy_j"] >= 0


def test_teardown_waits_for_gpu_contexts_to_go(monkeypatch):
    from servesweep.server.telemetry import gpu_process_ids, wait_gpus_released

    nvml = fake_nvml({0: [1000]}, watts=100.0)
    holders = [[41, 42], [42], []]  # the driver lets go a little after the process ends

    def running(handle):
        pids = holders.pop(0) if len(holders) > 1 else holders[0]
        return [types.SimpleNamespace(pid=p) for p in pids]

    nvml.nvmlDeviceGetComputeRunningProcesses = running
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert gpu_process_ids() == {41, 42}
    assert wait_gpus_released({42}, timeout_s=5) is True
    holders[:] = [[7]]
    assert wait_gpus_released({7}, timeout_s=0.6) is False


def test_teardown_without_nvml_is_unknown_not_failed(monkeypatch):
    from servesweep.server.telemetry import wait_gpus_released

    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert wait_gpus_released({1}, timeout_s=1) is None
