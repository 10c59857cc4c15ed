"""GPU telemetry through NVML (the `pynvml` module of nvidia-ml-py), sampled around a level.

    with GpuSampler([0, 1], interval_s=0.1) as sampler:
        ...                                   # run the level
    sampler.result()                          # per-GPU memory, power, energy

Without NVML (no package, no driver, no GPU) every measured field is None and nothing
raises: a CPU run must never fail because a GPU is absent. NVML counts GPUs by their
physical index, whatever CUDA_VISIBLE_DEVICES says; `visible_indices` maps one to the other.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

MIB = 1024 * 1024


def open_nvml():
    """The initialised pynvml module, or (None, reason)."""
    try:
        import pynvml
    except Exception as exc:  # ImportError, or a broken install
        return None, f"pynvml not importable ({type(exc).__name__})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no GPU, or a container without NVML
        return None, f"NVML did not initialise ({exc})"
    return pynvml, None


@contextlib.contextmanager
def nvml_session() -> Iterator:
    """One short NVML read: the initialised module (None without NVML), shut down after
    whatever happened inside."""
    nvml, _ = open_nvml()
    try:
        yield nvml
    finally:
        if nvml is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()


def visible_indices(cuda_visible_devices: str | None, count: int | None = None) -> list[int] | None:
    """Physical indices named by CUDA_VISIBLE_DEVICES ("0,3" -> [0, 3]); all `count` GPUs
    when it is unset; None when it names GPUs by UUID (pass those to NVML yourself)."""
    if cuda_visible_devices is None:
        return list(range(count)) if count is not None else None
    parts = [p.strip() for p in cuda_visible_devices.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


class _Gpu:
    """Samples of one GPU."""

    def __init__(self, index: int, handle, name: str | None):
        self.index = index
        self.handle = handle
        self.name = name
        self.memory_start: int | None = None  # bytes used when the sampler started
        self.memory_peak: int | None = None
        self.powers: list[tuple[float, float]] = []  # (monotonic s, watts)
        self.energy_start: int | None = None  # mJ since driver load, where the GPU counts it
        self.energy_end: int | None = None


class GpuSampler:
    """Sample memory and power of the given GPUs every `interval_s` on a thread.

    `indices`: physical NVML indices; None = every GPU NVML sees.
    """

    def __init__(self, indices: list[int] | None = None, interval_s: float = 0.1):
        self.indices = None if indices is None else list(indices)
        self.interval_s = interval_s
        self.reason: str | None = None
        self._nvml: Any = None  # the pynvml module once opened
        self._gpus: list[_Gpu] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started: float | None = None
        self._ended: float | None = None
        # What went wrong while sampling ("type: message", once each): never a reason to
        # fail a level, but shown in the report.
        self.errors: list[str] = []

    def _note(self, where: str, exc: Exception) -> None:
        text = f"{where}: {type(exc).__name__}: {exc}"[:300]
        if text not in self.errors:
            self.errors.append(text)

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> GpuSampler:
        self._started = time.monotonic()
        try:
            self._open()
        except Exception as exc:  # anything NVML does wrong is a missing measurement
            self.reason = f"NVML failed: {type(exc).__name__}: {exc}"
            self._gpus = []
            self._close_nvml()
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            try:
                self._sample()  # the level's last moment counts too
                for gpu in self._gpus:
                    gpu.energy_end = self._energy(gpu)
            except Exception as exc:
                self._note("last sample", exc)
        self._ended = time.monotonic()
        self._close_nvml()
        return False  # never swallow the level's own exception

    def _open(self) -> None:
        nvml, reason = open_nvml()
        if nvml is None:
            self.reason = reason
            return
        self._nvml = nvml
        indices = self.indices
        if indices is None:
            indices = list(range(nvml.nvmlDeviceGetCount()))
        for index in indices:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            gpu = _Gpu(index, handle, name.decode() if isinstance(name, bytes) else name)
            gpu.energy_start = self._energy(gpu)
            self._gpus.append(gpu)
        self._sample()
        for gpu in self._gpus:
            gpu.memory_start = gpu.memory_peak
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
        self._thread.start()

    def _close_nvml(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    # -- sampling --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception as exc:
                self._note("sampling stopped", exc)
                return  # a GPU that stops answering ends sampling, not the level

    def _sample(self) -> None:
        now = time.monotonic()
        for gpu in self._gpus:
            used = self._nvml.nvmlDeviceGetMemoryInfo(gpu.handle).used
            gpu.memory_peak = used if gpu.memory_peak is None else max(gpu.memory_peak, used)
            try:
                gpu.powers.append((now, self._nvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000.0))
            except Exception as exc:
                self._note(f"GPU {gpu.index} power", exc)  # some boards do not report it

    def _energy(self, gpu: _Gpu):
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)
        except Exception:
            return None  # pre-Volta boards: integrate the power samples instead

    # -- result ----------------------------------------------------------------------

    def result(self) -> dict:
        """What was measured; every number None where NVML gave nothing.

        {"available", "reason", "duration_s", "interval_s", "energy_j", "errors",
         "gpus": [{"index", "name", "memory_used_start_mib", "memory_used_peak_mib",
                   "power_mean_w", "power_max_w", "energy_j", "energy_source", "samples"}]}
        """
        end = self._ended if self._ended is not None else time.monotonic()
        duration = None if self._started is None else round(end - self._started, 3)
        if not self._gpus:
            indices = self.indices or []
            return {
                "available": False,
                "reason": self.reason or "no GPU sampled",
                "duration_s": duration,
                "interval_s": self.interval_s,
                "energy_j": None,
                "gpus": [_empty(i) for i in indices],
                "errors": self.errors,
            }
        gpus = [_summarize(gpu) for gpu in self._gpus]
        energies = [g["energy_j"] for g in gpus]
        return {
            "available": True,
            "reason": None,
            "duration_s": duration,
            "interval_s": self.interval_s,
            "energy_j": None if None in energies else round(sum(energies), 3),
            "gpus": gpus,
            "errors": self.errors,
        }


def _empty(index: int) -> dict:
    return {
        "index": index,
        "name": None,
        "memory_used_start_mib": None,
        "memory_used_peak_mib": None,
        "power_mean_w": None,
        "power_max_w": None,
        "energy_j": None,
        "energy_source": None,
        "samples": 0,
    }


def _mib(value):
    return None if value is None else round(value / MIB, 1)


def _summarize(gpu: _Gpu) -> dict:
    out = _empty(gpu.index)
    out.update(
        name=gpu.name,
        memory_used_start_mib=_mib(gpu.memory_start),
        memory_used_peak_mib=_mib(gpu.memory_peak),
        samples=len(gpu.powers),
    )
    watts = [w for _, w in gpu.powers]
    if watts:
        out["power_mean_w"] = round(sum(watts) / len(watts), 2)
        out["power_max_w"] = round(max(watts), 2)
    if gpu.energy_start is not None and gpu.energy_end is not None:
        # The board's own counter (mJ) is exact; sampling can miss short spikes.
        out["energy_j"] = round((gpu.energy_end - gpu.energy_start) / 1000.0, 3)
        out["energy_source"] = "counter"
    elif len(gpu.powers) >= 2:
        out["energy_j"] = round(_trapezoid(gpu.powers), 3)
        out["energy_source"] = "sampled"
    return out


def _trapezoid(points: list[tuple[float, float]]) -> float:
    pairs = zip(points, points[1:], strict=False)
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in pairs)


def joules_per_token(result: dict, output_tokens: int | None) -> float | None:
    """Energy of the sampled GPUs per output token; None when either is unknown."""
    energy = result.get("energy_j")
    if energy is None or not output_tokens:
        return None
    return round(energy / output_tokens, 6)


def gpu_process_ids() -> set[int] | None:
    """PIDs holding a compute context on any GPU; None without NVML."""
    with nvml_session() as nvml:
        if nvml is None:
            return None
        pids: set[int] = set()
        try:
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    pids.add(int(proc.pid))
        except Exception:  # a partial answer is still an answer; never fail a teardown
            pass
        return pids


def wait_gpus_released(pids: set[int], timeout_s: float = 30.0) -> bool | None:
    """Wait until none of `pids` holds a GPU context any more (the driver frees memory a
    little after the process is gone). True when released, False on timeout, None
    without NVML."""
    deadline = time.monotonic() + timeout_s
    while True:
        holding = gpu_process_ids()
        if holding is None:
            return None
        if not holding & pids:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
