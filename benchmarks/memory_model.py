"""Memory truth: bytes each rank holds (counted by the runtime) vs the simulator's per-stage prediction.

    python benchmarks/memory_model.py          # launches itself under torchrun on 4 CPU ranks (~2-4 min)
    python benchmarks/memory_model.py --keep runs/memory.json   # also keep the counted bytes
    python benchmarks/memory_model.py --from runs/memory.json   # re-predict from kept counts (no run)

Runs 15 plans of the tiny GPT on 4 gloo ranks, 2 iterations each (fp32 / bf16 / fp16, full (uniform groups of
1 and 2 layers, block) and selective recompute, the distributed optimizer, uneven stages, mixed TP, tied
embeddings, dropout 0.1), and takes every rank's counted bytes from the runtime
(``megatron_sailor.runtime.memory``: parameters, gradients, fp32 main weights + optimizer states, peak
activations saved for backward via saved_tensors_hooks). It compares them with what
``sailor-sim``'s cost model (``planner.simulator``, preset ``megatron-sailor``, analytic profiles) predicts for
the same replica: weights, gradients (without the constant overhead or transient buffers), optimizer
(fp32 main weights + Adam states; sharded over the stage's replicas with the distributed optimizer) and
peak activations (``planner.simulator.memory.activation_peak_bytes``: the in-flight micro-batches' kept bytes
plus the short-lived peak inside a recomputed forward, before the allocator reserve). Error = (predicted -
counted) / counted. Table, then one summary line: ``memory model: model states within X% (goal 5%),
activations within Y% (goal 10%; Z of N ranks exact) over N ranks of M plans``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

NPROC = 4
ITERS = 2


def _plan(stages: list[tuple[int, list[int]]], **fields) -> dict:
    out, first = [], 0
    for layers, tps in stages:
        out.append({"first_layer": first, "num_layers": layers,
                    "replicas": [{"gpu_type": "A100-40", "tp": t, "zone": "z-a"} for t in tps]})
        first += layers
    return {"schema_version": 1, "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 8, "stages": out,
            **fields}


UNEVEN = [(1, [1, 1]), (3, [1, 1])]
FULL = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
FULL2 = {**FULL, "recompute_num_layers": 2}
BLOCK = {**FULL, "recompute_method": "block"}
CASES = [
    ("fp32 uneven 1|3, DP 2", _plan(UNEVEN), {}),
    ("bf16 uneven 1|3, DP 2", _plan(UNEVEN, precision="bf16"), {}),
    ("fp16 uneven 1|3, DP 2", _plan(UNEVEN, precision="fp16"), {"loss_scale": 1024.0}),
    ("fp32 full recompute", _plan(UNEVEN, **FULL), {}),
    ("bf16 full recompute + dropout", _plan(UNEVEN, precision="bf16", **FULL), {"dropout": 0.1}),
    ("bf16 selective recompute", _plan(UNEVEN, precision="bf16", recompute_granularity="selective"), {}),
    ("fp32 tied, TP 2 | 1 | 1", _plan([(2, [2]), (1, [1]), (1, [1])], tie_embeddings=True), {}),
    ("bf16 mixed TP 1,1,2 one stage", _plan([(4, [1, 1, 2])], global_batch_size=12), {}),
    ("fp32 tied, emb-only | TP 2 | head-only", _plan([(0, [1]), (4, [2]), (0, [1])], tie_embeddings=True), {}),
    ("fp32 dist-opt uneven 1|3, DP 2", _plan(UNEVEN, distributed_optimizer=True), {}),
    ("bf16 dist-opt + selective, DP 2", _plan(UNEVEN, precision="bf16", distributed_optimizer=True,
                                             recompute_granularity="selective"), {}),
    ("bf16 dist-opt mixed TP 1,1,2 one stage", _plan([(4, [1, 1, 2])], global_batch_size=12, precision="bf16",
                                                     distributed_optimizer=True), {}),
    ("fp32 full recompute 2-layer groups + dropout", _plan([(2, [1, 1]), (2, [1, 1])], **FULL2), {"dropout": 0.1}),
    ("fp16 block recompute 1 + dropout, 1|2|TP 2", _plan([(1, [1]), (2, [1]), (1, [2])], precision="fp16", **BLOCK),
     {"dropout": 0.1, "loss_scale": 1024.0}),
    ("bf16 full recompute + dropout, TP 2 | 1 | 1", _plan([(2, [2]), (1, [1]), (1, [1])], precision="bf16", **FULL),
     {"dropout": 0.1}),
]
CASES[7][1]["precision"] = "bf16"


# ---------------------------------------------------------------------------------------------- workers
def worker(out_path: str, cases: list | None = None, iters: int = ITERS) -> None:
    """torchrun body: train each case's plan for ``iters`` iterations and gather, per rank, (stage, replica, TP
    rank, the last iteration's counted bytes, the peak of saved activations of every iteration). A case's
    options: ``dropout``, ``loss_scale`` (static fp16 scale), ``bias`` (False: a tiny model without linear
    biases). ``cases``: :data:`CASES` unless given (tests/helpers/memory_peak.py passes its own)."""
    import warnings
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
    for name, plan_dict, opts in (CASES if cases is None else cases):
        model = get_model("tiny") if opts.get("bias", True) else with_overrides(get_model("tiny"), bias=False)
        data = MockTokens(seed=3, seq_length=model.seq_length, vocab_size=model.vocab_size)
        plan = Plan.from_dict(plan_dict)
        p = opts.get("dropout", 0.0)
        cfg = RunConfig(seed=3, hidden_dropout=p, attention_dropout=p,
                        loss_scale=LossScaleConfig(static=opts.get("loss_scale")))
        rt = RankRuntime(plan, model, env.rank, data, cfg)
        mems = [rt.train_step(it).memory for it in range(iters)]
        info = (rt.me.stage, rt.me.replica, rt.me.tp_rank, mems[-1],
                [m["peak_saved_activation_bytes"] for m in mems])
        everyone = [None] * env.world_size if env.rank == 0 else None
        dist.gather_object(info, everyone, dst=0)
        results.append({"name": name, "ranks": everyone})
        dist.barrier()
    if env.rank == 0:
        with open(out_path, "w") as fh:
            json.dump(results, fh)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- predictions
def predict(plan_dict: dict, dropout: float = 0.0) -> dict[tuple[int, int], dict[str, float]]:
    """{(stage, replica): predicted bytes per term} from the simulator's own functions."""
    from planner.hardware import GPUCatalog
    from planner.model import get_model
    from planner.network import NetworkModel
    from planner.plan import Plan
    from planner.profiles import ProfileStore
    from planner.simulator import OURS, SimContext
    from planner.simulator.memory import activation_peak_bytes, replica_memory, state_bytes_per_param
    from planner.simulator.stage import all_replica_costs
    plan = Plan.from_dict(plan_dict)
    model = get_model("tiny")
    cat = GPUCatalog()
    settings = OURS.with_(hidden_dropout=dropout, attention_dropout=dropout)   # the run's --*-dropout
    ctx = SimContext(model, ProfileStore(model, cat, plan.precision), NetworkModel(cat), cat, settings)
    w, g, _ = state_bytes_per_param(plan)
    out = {}
    for row in all_replica_costs(plan, ctx):
        for c in row:
            mem = replica_memory(plan, ctx, c)
            out[(c.stage, c.replica)] = {"weights": w * c.params, "grads": g * c.params,
                                         "optimizer": mem.optimizer_bytes,
                                         "activations": activation_peak_bytes(plan, c)}
    return out


def _err(pred: float, counted: float) -> float:
    return (pred - counted) / counted if counted else (0.0 if pred == 0 else float("inf"))


def report(results: list[dict]) -> int:
    cases = {name: (plan, opts.get("dropout", 0.0)) for name, plan, opts in CASES}
    header = (f"{'plan':48s} {'rank':>4} {'st':>2} {'weights B':>10} {'err':>6} {'grads B':>10} {'err':>6} "
              f"{'optim B':>10} {'err':>6} {'act peak B':>11} {'pred B':>11} {'err':>7}")
    print(header)
    worst_states, worst_act, exact, n = 0.0, 0.0, 0, 0
    for res in results:
        pred = predict(*cases[res["name"]])
        for rank, (stage, replica, _tp_rank, mem, *_peaks) in enumerate(res["ranks"]):
            p = pred[(stage, replica)]
            counted = {"weights": mem["params_bytes"], "grads": mem["grads_bytes"],
                       "optimizer": mem["main_weights_bytes"] + mem["optimizer_bytes"],
                       "activations": mem["peak_saved_activation_bytes"]}
            errs = {k: _err(p[k], counted[k]) for k in counted}
            worst_states = max(worst_states, *(abs(errs[k]) for k in ("weights", "grads", "optimizer")))
            worst_act = max(worst_act, abs(errs["activations"]))
            exact += p["activations"] == counted["activations"]
            n += 1
            print(f"{res['name']:48s} {rank:>4} {stage:>2} {counted['weights']:>10,} {errs['weights']:>+6.1%} "
                  f"{counted['grads']:>10,} {errs['grads']:>+6.1%} {counted['optimizer']:>10,} "
                  f"{errs['optimizer']:>+6.1%} {counted['activations']:>11,} {p['activations']:>11,.0f} "
                  f"{errs['activations']:>+7.1%}")
    print(f"memory model: model states within {worst_states:.1%} (goal 5%), activations within {worst_act:.1%} "
          f"(goal 10%; {exact} of {n} ranks exact) over {n} ranks of {len(results)} plans")
    return 0


def main() -> int:
    if "WORLD_SIZE" in os.environ:
        worker(sys.argv[1])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--from":     # re-report counted bytes saved by --keep
        with open(sys.argv[2]) as fh:
            return report(json.load(fh))
    keep = sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--keep" else None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "memory.json")
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
        from planner.ports import free_port
        from planner.progress import status
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC), "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), __file__, out]
        with status(f"running the plans on {NPROC} CPU ranks"):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        with open(out) as fh:
            results = json.load(fh)
    if keep:
        with open(keep, "w") as fh:
            json.dump(results, fh)
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
