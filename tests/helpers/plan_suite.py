"""torchrun script: train several plans in one launch and compare each with a 1-rank reference.

Usage: torchrun --nproc-per-node N plan_suite.py CASES.json OUT.json
CASES.json: {"iterations": 3, "seed": 7, "cases": [{"name": ..., "plan": {...}, "sync_mode": ...,
"adam_eps": 1e-8, "dropout": [hidden, attention], "loss_scale": {LossScaleConfig fields}}, ...]}
(adam_eps defaults to spec_eps(), dropout to 0; precision comes from the plan).
Every plan must use exactly N ranks. Rank 0 computes the plain-torch reference once per (global batch,
tied, dropout, eps), gathers every rank's parameters (with their TP slicing) and writes the comparison.
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
from megatron_sailor.runtime.dropout import DropoutConfig  # noqa: E402
from megatron_sailor.runtime.init_weights import LM_HEAD, WORD_EMBEDDING, global_name, shard_of  # noqa: E402
from megatron_sailor.runtime.mixed_precision import LossScaleConfig  # noqa: E402
from megatron_sailor.runtime.optimizer import OptimizerConfig  # noqa: E402
from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig  # noqa: E402
from patches import apply_cpu_patches  # noqa: E402
from planner.model import get_model  # noqa: E402
from planner.plan import Plan  # noqa: E402
from tests.helpers.reference import reference_run  # noqa: E402


def spec_eps() -> float:
    """Adam's eps for the comparison. With eps=1e-8 an element whose gradient is ~1e-8 (cancellation)
    turns a 1e-9 rounding difference (a different reduction order under TP) into a 10% different update;
    1e-4 keeps the update well conditioned so parameter differences reflect runtime errors."""
    return float(os.environ.get("SUITE_ADAM_EPS", "1e-4"))


def compare(ref_params: dict, gathered: list) -> tuple[float, int]:
    worst, checked = 0.0, 0
    for entries in gathered:
        for name, tp, tp_rank, value, template_attrs in entries:
            if name not in ref_params and name == LM_HEAD:      # tied: the last stage's copy
                name = WORD_EMBEDDING
            param = torch.nn.Parameter(value.clone())
            if template_attrs is not None:
                param.tensor_model_parallel, param.partition_dim = True, template_attrs
            expected = shard_of(ref_params[name], param, tp, tp_rank)
            d = float((expected - value).abs().max())
            worst = max(worst, d)
            checked += 1
    return worst, checked


def _rel(xs: list[float], ys: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(xs, ys))


def _references(case: dict, plan: Plan, model, data, iterations: int, seed: int, cfg: RunConfig,
                refs: dict) -> dict:
    """The reference run (and, for 16-bit plans, two runs summing in other orders: the noise bar)."""
    hidden, attention = cfg.hidden_dropout, cfg.attention_dropout
    common = dict(tied=plan.tie_embeddings, dropout=DropoutConfig(hidden, attention, seed),
                  precision=plan.precision, loss_scale=cfg.loss_scale.static or 1.0,
                  head_copy=plan.tie_embeddings and plan.num_stages > 1)
    key = (plan.global_batch_size, plan.micro_batch_size, json.dumps(common, default=str), cfg.optimizer.eps)
    if key in refs:
        return refs[key]
    gbs, mbs = plan.global_batch_size, plan.micro_batch_size
    out = {"a": reference_run(model, data, gbs, iterations, seed, cfg.optimizer, micro_batch_size=mbs, **common)}
    if plan.precision != "fp32":
        # the 16-bit noise bar: the largest difference between two of seven 1-process runs that differ only
        # in summation order (micro-batch accumulation, TP-2 / 4 / 8 style split matmuls)
        orders = ((gbs, 1), (gbs, 2), (mbs, 2), (gbs, 4), (mbs, 4), (gbs, 8))
        runs = [out["a"]] + [reference_run(model, data, gbs, iterations, seed, cfg.optimizer, micro_batch_size=m,
                                           split_k=k, **common) for m, k in orders]
        pairs = [(x, y) for i, x in enumerate(runs) for y in runs[i + 1:]]
        out["noise_loss"] = max(_rel(x[0], y[0]) for x, y in pairs)
        out["noise_norm"] = max(_rel(x[1], y[1]) for x, y in pairs)
    refs[key] = out
    return out


def run_case(case: dict, env, iterations: int, seed: int, data, model, refs: dict) -> dict:
    plan = Plan.from_dict(case["plan"])
    hidden, attention = case.get("dropout", (0.0, 0.0))
    eps = float(case.get("adam_eps", spec_eps()))
    cfg = RunConfig(seed=seed, sync_mode=case.get("sync_mode", "hierarchical"),
                    optimizer=OptimizerConfig(eps=eps), hidden_dropout=hidden, attention_dropout=attention,
                    loss_scale=LossScaleConfig(**case.get("loss_scale", {})))
    rt = RankRuntime(plan, model, env.rank, data, cfg)
    start = [e["param"].clone() for _, _, e in rt.trained_state()]     # collective under dist-opt
    metrics = [rt.train_step(it) for it in range(iterations)]
    final = rt.trained_state()
    moved = max(float((e["param"] - s).abs().max()) for (_, _, e), s in zip(final, start))
    mine = [(global_name(n, rt.stage.first_layer), rt.me.tp, rt.me.tp_rank, e["param"],
             p.partition_dim if getattr(p, "tensor_model_parallel", False) else None) for n, p, e in final]
    per_rank = {"skipped": [m.skipped for m in metrics], "moved": moved, "scales": [m.loss_scale for m in metrics],
                "memory": metrics[-1].memory, "stage": rt.me.stage,
                "sync_modes": [(sg.mode, sg.flat is not None) for sg in rt.groups.grad_sync if len(sg.members) > 1],
                "embedding_modes": [(sg.mode, sg.flat is not None) for sg in rt.groups.embedding
                                    if len(sg.members) > 1]}
    gathered = [None] * env.world_size if env.rank == 0 else None
    dist.gather_object((mine, per_rank), gathered, dst=0, group=rt.groups.world)
    if env.rank != 0:
        return {}
    ref = _references(case, plan, model, data, iterations, seed, cfg, refs)
    ref_losses, ref_norms, ref_params = ref["a"]
    worst, checked = compare(ref_params, [g[0] for g in gathered])
    return {"name": case["name"], "losses": [m.loss for m in metrics], "ref_losses": ref_losses,
            "grad_norms": [m.grad_norm for m in metrics], "ref_grad_norms": ref_norms, "adam_eps": eps,
            "precision": plan.precision, "noise_loss": ref.get("noise_loss"), "noise_norm": ref.get("noise_norm"),
            "per_rank": [g[1] for g in gathered], "max_param_abs_diff": worst,
            "params_checked": checked, "ref_param_count": len(ref_params),
            "cross_zone_bytes_rank0": rt.grad_sync.cross_zone_bytes()}


def main() -> int:
    torch.set_num_threads(1)
    spec = json.load(open(sys.argv[1]))
    env = env_from_torchrun()
    apply_cpu_patches()
    init_distributed(env, timeout_s=90)
    model = get_model("tiny")
    data = MockTokens(seed=spec["seed"], seq_length=model.seq_length, vocab_size=model.vocab_size)
    refs: dict = {}
    results = []
    for case in spec["cases"]:
        results.append(run_case(case, env, spec["iterations"], spec["seed"], data, model, refs))
        dist.barrier()
    if env.rank == 0:
        with open(sys.argv[2], "w") as fh:
            json.dump(results, fh, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
