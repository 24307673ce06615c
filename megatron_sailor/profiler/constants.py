"""The megatron-sailor preset's machine constants, measured by ``sailor-profile --runtime-constants-out``.

Contract: :func:`baseline_memory_bytes` is what one rank holds before it builds a model (CPU: its resident set
after importing torch and megatron-core and joining the process group; CUDA: the device memory in use that
the caching allocator does not hold, i.e. the CUDA context and communicator buffers); :func:`reserve_factor` is
the caching allocator's peak reserved over peak allocated bytes (1.0 on CPU, where nothing is reserved);
:func:`measure_core_sharing` times a fixed single-threaded matmul workload in 1 .. ``2 x cores`` concurrent
processes and returns (ranks per core, slowdown against one process alone). :func:`constants_document` is the
file the planner reads (``planner.simulator.constants``); the per-micro-batch overhead is 0 there because the
profiler's per-layer times already include the runtime's per-call overhead (probe time / layers per probe).
"""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

_WORKER = """
import sys, time, torch
torch.set_num_threads(1)
a, b = torch.randn(256, 256), torch.randn(256, 256)
n = int(sys.argv[1])
for _ in range(3):
    a @ b
print("ready", flush=True)
sys.stdin.readline()
t = time.perf_counter()
for _ in range(n):
    a @ b
print(time.perf_counter() - t, flush=True)
"""


def baseline_memory_bytes(torch: Any) -> int:
    """Memory one rank holds before its model exists (see the module docstring)."""
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return int(total - free - torch.cuda.memory_reserved())
    with open("/proc/self/statm") as fh:
        resident_pages = int(fh.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def reserve_factor(torch: Any) -> float:
    if not torch.cuda.is_available() or torch.cuda.max_memory_allocated() == 0:
        return 1.0
    return max(1.0, torch.cuda.max_memory_reserved() / torch.cuda.max_memory_allocated())


def _concurrent_run_s(n: int, matmuls: int) -> list[float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(matmuls)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("core-sharing worker did not start")
        for p in procs:                      # all start their timed loop together
            p.stdin.write("go\n")
            p.stdin.flush()
        return [float(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.wait(timeout=600)


def measure_core_sharing(cores: int, target_s: float = 0.5, max_procs: int = 8, repeats: int = 3
                         ) -> list[tuple[float, float]]:
    """(ranks per core, slowdown) for 1 .. 2 x cores processes: the median over ``repeats`` of the mean time of
    n concurrent processes over the time of one process alone measured just before (so slow drifts of the
    machine's load cancel). The process counts are measured round-robin (2, 3, .., 2, 3, ..), so a burst of
    load from other processes lands on one repeat of a count, which the median outvotes, not on all of them."""
    from megatron_sailor.train.progress import progress_iter
    alone = _concurrent_run_s(1, 200)[0]
    matmuls = max(50, int(200 * target_s / max(alone, 1e-6)))
    out = [(1 / cores, 1.0)]
    counts = [n for _ in range(repeats) for n in range(2, min(2 * cores, max_procs) + 1)]
    ratios: dict[int, list[float]] = {}
    for n in progress_iter(counts, "measuring core sharing", total=len(counts)):
        base = _concurrent_run_s(1, matmuls)[0]
        ratios.setdefault(n, []).append(statistics.mean(_concurrent_run_s(n, matmuls)) / base)
    out += [(n / cores, statistics.median(r)) for n, r in sorted(ratios.items())]
    return out


def constants_document(baseline_bytes: int, reserve: float, core_share: list[tuple[float, float]], cores: int,
                       command: str, sharded_scale: float | None = None) -> dict:
    doc = {
        "format": "megatron-sailor-runtime-constants/1",
        "machine": f"{platform.processor() or platform.machine()} ({cores} cores, {platform.node()})",
        "measured_by": command,
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average": round(os.getloadavg()[0], 2),
        "per_microbatch_overhead_s": 0.0,
        "memory_overhead_bytes": int(baseline_bytes),
        "activation_reserve_factor": round(float(reserve), 4),
        "core_share": {"cores": cores, "ranks_per_core_slowdown": [[round(r, 4), round(s, 4)] for r, s in core_share]},
        "notes": {
            "per_microbatch_overhead_s": "0: sailor-profile's per-layer times are probe times / layers per probe, "
                                         "so they already hold the runtime's per-micro-batch call overhead",
            "memory_overhead_bytes": "one rank before its model exists: CPU resident set after importing torch "
                                     "and megatron-core and joining the process group; CUDA: context and "
                                     "communicators (device memory in use that the allocator does not hold)",
            "activation_reserve_factor": "caching allocator peak reserved / peak allocated (CPU: 1.0, no cache)",
            "core_share": "mean compute time of n concurrent single-threaded matmul processes over one alone, "
                          "n = 1 .. 2 x cores, at the load average above",
        },
    }
    if sharded_scale is not None:       # measured with the network profile (--network-out, >= 2 ranks)
        doc["sharded_collective_scale"] = round(float(sharded_scale), 4)
        doc["notes"]["sharded_collective_scale"] = (
            "reduce-scatter + all-gather of the largest network-profile size over the all-reduce of the same "
            "buffer (the distributed optimizer's calls against the ones they replace), at least 1")
    return doc


def write_constants(path: str, doc: dict) -> None:
    import json
    from pathlib import Path

    from planner.textio import atomic_write_text
    atomic_write_text(Path(path), json.dumps(doc, indent=1) + "\n", flag="--runtime-constants-out")
