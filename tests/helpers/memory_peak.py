"""torchrun script (4 ranks): train plans with full recomputation and dropout, write every rank's counted
peak of activations saved for backward (``megatron_sailor.runtime.memory``).

Usage: torchrun --nproc-per-node 4 memory_peak.py OUT.json. The plans (:data:`CASES`, importable without
torch) each use 4 ranks; tests/runtime/test_memory_peak.py compares the counts with the simulator.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def _plan(stages: list[tuple[int, list[int]]], precision: str, method: str, group: int) -> dict:
    out, first = [], 0
    for layers, tps in stages:
        out.append({"first_layer": first, "num_layers": layers,
                    "replicas": [{"gpu_type": "A100-40", "tp": t, "zone": "z-a"} for t in tps]})
        first += layers
    return {"schema_version": 1, "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 8,
            "stages": out, "precision": precision, "recompute_granularity": "full",
            "recompute_method": method, "recompute_num_layers": group}


# (name, plan, linear biases): hidden and attention dropout 0.1 in every case
CASES = [
    ("bf16 uniform 1, 1 | 2 | TP 2", _plan([(1, [1]), (2, [1]), (1, [2])], "bf16", "uniform", 1), True),
    ("fp32 uniform 2, 2 | 2, DP 2", _plan([(2, [1, 1]), (2, [1, 1])], "fp32", "uniform", 2), True),
    ("fp16 block 1, 1 | 2 | TP 2", _plan([(1, [1]), (2, [1]), (1, [2])], "fp16", "block", 1), True),
    ("bf16 uniform 1, no biases, TP 2 | 1 | 1", _plan([(2, [2]), (1, [1]), (1, [1])], "bf16", "uniform", 1), False),
]
DROPOUT = 0.1


def main(out_path: str) -> None:
    """Run :data:`CASES` through the memory benchmark's worker (one implementation of the counting run)."""
    from benchmarks.memory_model import worker
    worker(out_path, cases=[(name, plan, {"dropout": DROPOUT, "bias": bias,
                                          "loss_scale": 1024.0 if plan["precision"] == "fp16" else None})
                            for name, plan, bias in CASES], iters=2)


if __name__ == "__main__":
    main(sys.argv[1])
