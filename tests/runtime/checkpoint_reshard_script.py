"""torchrun script (4 ranks): checkpoints are plan-independent across the distributed optimizer and 16 bits.

Usage: torchrun --nproc-per-node 4 checkpoint_reshard_script.py OUT.json WORKDIR
For every case (plan A -> plan B, one precision): run A for 4 iterations uninterrupted; run A again for 2,
save (folder 1); build B, load folder 1, save it again at the same iteration (folder 2), train 2 more.
Rank 0 writes, per case: whether folders 1 and 2 hold identical full tensors (parameters, AdamW states,
steps), the uninterrupted losses of iterations 2-3 and B's, and the fp16 loss-scaler state before the save
and after the load.
"""
from __future__ import annotations

import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from megatron_sailor.runtime.data import MockTokens  # noqa: E402
from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed  # noqa: E402
from megatron_sailor.runtime.init_weights import LM_HEAD, WORD_EMBEDDING  # noqa: E402
from megatron_sailor.runtime.mixed_precision import LossScaleConfig  # noqa: E402
from megatron_sailor.runtime.optimizer import OptimizerConfig  # noqa: E402
from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig  # noqa: E402
from megatron_sailor.train.checkpoint import load_checkpoint, read_full_state, save_checkpoint  # noqa: E402
from patches import apply_cpu_patches  # noqa: E402
from planner.model import get_model  # noqa: E402
from planner.plan import Plan  # noqa: E402

Z = "z-a"
REPS_B = [{"gpu_type": "cpu", "tp": 1, "zone": Z}, {"gpu_type": "cpu", "tp": 1, "zone": "z-b"},
          {"gpu_type": "cpu", "tp": 2, "zone": "z-b"}]     # one stage, replicas TP 1, 1, 2 over two zones
REPS_A = [{"gpu_type": "cpu", "tp": 1, "zone": Z}, {"gpu_type": "cpu", "tp": 1, "zone": "z-b"}]
PLAN_ONE_STAGE = {"schema_version": 1, "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 12,
                  "tie_embeddings": True, "stages": [{"first_layer": 0, "num_layers": 4, "replicas": REPS_B}]}
PLAN_TWO_STAGES = {"schema_version": 1, "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 12,
                   "tie_embeddings": True,
                   "stages": [{"first_layer": 0, "num_layers": 1, "replicas": REPS_A},
                              {"first_layer": 1, "num_layers": 3, "replicas": REPS_A}]}


def _plan(base: dict, precision: str, dist_opt: bool) -> Plan:
    return Plan.from_dict({**base, "precision": precision, "distributed_optimizer": dist_opt})


CASES = [  # name, plan A, plan B
    ("fp32_distopt_to_plain_other_plan", _plan(PLAN_ONE_STAGE, "fp32", True), _plan(PLAN_TWO_STAGES, "fp32", False)),
    ("fp32_plain_to_distopt_other_plan", _plan(PLAN_TWO_STAGES, "fp32", False), _plan(PLAN_ONE_STAGE, "fp32", True)),
    ("bf16_distopt_same_plan", _plan(PLAN_ONE_STAGE, "bf16", True), _plan(PLAN_ONE_STAGE, "bf16", True)),
    ("bf16_plain_same_plan", _plan(PLAN_TWO_STAGES, "bf16", False), _plan(PLAN_TWO_STAGES, "bf16", False)),
    ("bf16_distopt_to_plain_other_plan", _plan(PLAN_ONE_STAGE, "bf16", True), _plan(PLAN_TWO_STAGES, "bf16", False)),
    ("fp16_plain_to_distopt_same_layout", _plan(PLAN_TWO_STAGES, "fp16", False), _plan(PLAN_TWO_STAGES, "fp16", True)),
    ("fp16_distopt_same_plan", _plan(PLAN_ONE_STAGE, "fp16", True), _plan(PLAN_ONE_STAGE, "fp16", True)),
]
# dynamic fp16 scale starting at 2^16 with window 2 / hysteresis 1: the state changes every few steps
LOSS_SCALE = LossScaleConfig(initial=2.0 ** 16, window=2, hysteresis=1)


def _runtime(plan: Plan, rank: int, data, model) -> RankRuntime:  # noqa: ANN001
    cfg = RunConfig(seed=11, optimizer=OptimizerConfig(eps=1e-8), hidden_dropout=0.1, attention_dropout=0.1,
                    loss_scale=LOSS_SCALE)
    return RankRuntime(plan, model, rank, data, cfg)


def _equal(x: dict, y: dict) -> bool:
    return x["step"] == y["step"] and all(torch.equal(x[k], y[k]) for k in ("param", "exp_avg", "exp_avg_sq"))


def _same(a: dict, b: dict) -> bool:
    """Identical full tensors; a several-stage tied plan also writes its head copy (output_layer.weight),
    which must then equal the word embedding entry, a one-stage tied plan has no such parameter."""
    for d in (a, b):
        if LM_HEAD in d and not _equal(d.pop(LM_HEAD), d[WORD_EMBEDDING]):
            return False
    return set(a) == set(b) and all(_equal(a[g], b[g]) for g in a)


def run_case(name: str, plan_a: Plan, plan_b: Plan, rank: int, data, model, work: str) -> dict:  # noqa: ANN001
    full = _runtime(plan_a, rank, data, model)
    full_losses = [full.train_step(it).loss for it in range(4)]
    a = _runtime(plan_a, rank, data, model)
    for it in range(2):
        a.train_step(it)
    scaler_saved = a.scaler.state() if a.scaler else None
    d1, d2 = os.path.join(work, name, "one"), os.path.join(work, name, "two")
    save_checkpoint(a, d1, 2, a.consumed_samples(2))
    b = _runtime(plan_b, rank, data, model)
    resume = load_checkpoint(b, d1)
    b.resume_at(resume.iteration, resume.consumed_samples)
    scaler_loaded = b.scaler.state() if b.scaler else None
    save_checkpoint(b, d2, 2, b.consumed_samples(2))
    b_losses = [b.train_step(it).loss for it in range(2, 4)]
    dist.barrier()
    if rank != 0:
        return {}
    one = read_full_state(os.path.join(d1, "iter_0000002"))
    two = read_full_state(os.path.join(d2, "iter_0000002"))
    return {"name": name, "same_plan": plan_a == plan_b, "precision": plan_a.precision,
            "files_identical": _same(one, two), "steps": sorted({e["step"] for e in one.values()}),
            "full_losses": full_losses[2:], "resumed_losses": b_losses,
            "scaler_saved": scaler_saved, "scaler_loaded": scaler_loaded}


def main() -> int:
    torch.set_num_threads(1)
    out_path, work = sys.argv[1], sys.argv[2]
    env = env_from_torchrun()
    apply_cpu_patches()
    init_distributed(env, timeout_s=120)
    model = get_model("tiny")
    data = MockTokens(seed=5, seq_length=model.seq_length, vocab_size=model.vocab_size)
    results = [run_case(name, a, b, env.rank, data, model, work) for name, a, b in CASES]
    if env.rank == 0:
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
