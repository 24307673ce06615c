"""torchrun script (4 ranks): train plans with full recomputation and dropout, write every rank's counted
peak of activations saved for backward (``megatron_sailor.runtime.memory``).

Usage: torchrun --nproc-per-node 4 memory_peak.py OUT.json. The plans (:data:`CASES`, importable without
torch) each use 4 ranks; tests/runtime/test_memory_peak.py compares the counts with the simulator.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

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
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    from megatron_sailor.runtime.data import MockTokens
    from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed
    from megatron_sailor.runtime.mixed_precision import LossScaleConfig
    from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig
    from patches import apply_cpu_patches
    from planner.model import get_model, with_overrides
    from planner.plan import Plan
    torch.set_num_threads(1)
    env = env_from_torchrun()
    apply_cpu_patches()
    init_distributed(env, timeout_s=120)
    results = []
    for name, plan_dict, bias in CASES:
        model = get_model("tiny") if bias else with_overrides(get_model("tiny"), bias=False)
        plan = Plan.from_dict(plan_dict)
        scale = LossScaleConfig(static=1024.0 if plan.precision == "fp16" else None)
        cfg = RunConfig(seed=3, hidden_dropout=DROPOUT, attention_dropout=DROPOUT, loss_scale=scale)
        rt = RankRuntime(plan, model, env.rank, MockTokens(seed=3, seq_length=model.seq_length,
                                                           vocab_size=model.vocab_size), cfg)
        peaks = [rt.train_step(it).memory["peak_saved_activation_bytes"] for it in range(2)]
        mine = (rt.me.stage, rt.me.replica, peaks)
        everyone = [None] * env.world_size if env.rank == 0 else None
        dist.gather_object(mine, everyone, dst=0)
        results.append({"name": name, "ranks": everyone})
        dist.barrier()
    if env.rank == 0:
        with open(out_path, "w") as fh:
            json.dump(results, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
