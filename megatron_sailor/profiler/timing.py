"""Pure helpers of the profiler: timers (wall clock or CUDA events), medians, activation-byte meters and
device naming. Everything device-specific takes the ``torch.cuda``-like module as an argument, so the
CUDA path is unit-tested with fakes on machines without a GPU.
"""
from __future__ import annotations

import re
import statistics
import time
from typing import Any, Callable, Sequence

GIB = 1024 ** 3


def median_s(samples: Sequence[float]) -> float:
    """Median of the timed repeats (seconds); raises on an empty list."""
    if not samples:
        raise ValueError("no timing samples")
    return float(statistics.median(samples))


def timed_repeats(fn: Callable[[], Any], timer: "WallTimer | CudaEventTimer", warmup: int,
                  repeats: int) -> list[float]:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed; returns the seconds."""
    for _ in range(warmup):
        timer.time(fn)
    return [timer.time(fn)[1] for _ in range(repeats)]


class WallTimer:
    """CPU: ``time.perf_counter`` around the call (the work is synchronous)."""

    name = "wall-clock"

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        start = self.clock()
        out = fn()
        return out, self.clock() - start


class CudaEventTimer:
    """CUDA: an event recorded before and after the call on the current stream; the elapsed time is read
    after the end event completes (``elapsed_time`` is in milliseconds)."""

    name = "cuda-events"

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        start = self.cuda.Event(enable_timing=True)
        end = self.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, start.elapsed_time(end) / 1e3


def make_timer(torch_module: Any) -> "WallTimer | CudaEventTimer":
    return CudaEventTimer(torch_module.cuda) if torch_module.cuda.is_available() else WallTimer()


def activation_bytes_from_allocator(allocated_before: int, allocated_after: int,
                                    output_bytes: int = 0) -> float:
    """CUDA: bytes a forward keeps alive for backward = growth of ``memory_allocated`` across the forward
    (outputs kept), minus the output itself when it is accounted separately; never negative."""
    return float(max(0, allocated_after - allocated_before - output_bytes))


class AllocatorMeter:
    """CUDA: the allocator's statistics around a forward (``memory_allocated`` before / after,
    ``max_memory_allocated`` for the peak); ``cuda`` is ``torch.cuda`` or a fake."""

    def __init__(self, cuda: Any) -> None:
        self.cuda = cuda
        self.before = 0
        self.after = 0
        self.peak = 0

    def start(self) -> None:
        self.cuda.synchronize()
        self.cuda.reset_peak_memory_stats()
        self.before = self.cuda.memory_allocated()

    def stop(self) -> float:
        self.cuda.synchronize()
        self.after = self.cuda.memory_allocated()
        self.peak = self.cuda.max_memory_allocated()
        return activation_bytes_from_allocator(self.before, self.after)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_model_name(cpuinfo_text: str) -> str:
    """The first ``model name`` of /proc/cpuinfo (or 'unknown')."""
    for line in cpuinfo_text.splitlines():
        if line.lower().startswith("model name") and ":" in line:
            return line.split(":", 1)[1].strip() or "unknown"
    return "unknown"


def cpu_gpu_type(cpuinfo_text: str) -> str:
    """The "GPU type" of a CPU rank: ``cpu-<model name>`` (e.g. ``cpu-amd-epyc``)."""
    return "cpu-" + (slug(cpu_model_name(cpuinfo_text)) or "unknown")


# (substring of torch.cuda.get_device_name, memory GiB upper bound or None, catalog name)
_CUDA_NAMES = (("gh200", None, "GH-96"), ("h100", None, "H100-80"), ("a100", 48, "A100-40"),
               ("a100", None, "A100-80"), ("v100", None, "V100-16"), ("titan rtx", None, "Titan-RTX"),
               ("2080", None, "RTX-2080"), ("3090", None, "RTX-3090"))


def cuda_gpu_type(device_name: str, total_memory_bytes: int) -> str:
    """Catalog name of a CUDA device when it is a known one (A100 40 vs 80 GB by memory), else its slug."""
    low = device_name.lower()
    for key, max_gib, name in _CUDA_NAMES:
        if key in low and (max_gib is None or total_memory_bytes <= max_gib * GIB):
            return name
    return slug(device_name) or "cuda-unknown"


def local_gpu_type(torch_module: Any, cpuinfo_path: str = "/proc/cpuinfo") -> str:
    if torch_module.cuda.is_available():
        props = torch_module.cuda.get_device_properties(torch_module.cuda.current_device())
        return cuda_gpu_type(props.name, props.total_memory)
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            return cpu_gpu_type(f.read())
    except OSError:
        return "cpu-unknown"
