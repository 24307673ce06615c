"""Dump ``simulate``'s full result on many seeded random plans, to compare two source trees exactly.

Run it once per tree (the tree on ``PYTHONPATH``) and compare the two dumps::

    PYTHONPATH=/tmp/before17 python benchmarks/simulate_identity_s17s.py --out /tmp/a.txt
    PYTHONPATH=. python benchmarks/simulate_identity_s17s.py --out /tmp/b.txt
    cmp /tmp/a.txt /tmp/b.txt

Every line is one (context, plan): the plan's repr and every field of the estimate (``Estimate.to_dict``),
each value written with its type and ``repr`` (floats to the last bit, -0.0 kept, int and float told apart),
or the error ``simulate`` raised (type and message), plus ``chosen_sync_modes``. Contexts: the built-in
``megatron-sailor`` and ``sailor-deepspeed`` presets and variants of them (blocking p2p, overlapped sync, a
profile offset, compute / update scales, an allocator reserve, gradient buckets, memory headroom, forced
flat / hierarchical sync), a small attention-heavy model, ``opt-350m`` (tied embeddings) and Sailor's OPT-350
data (measured profiles, fitted node-pair links) when ``--sailor-data`` names it. Plans: 1 to 4 stages
(empty first / last stages too), 1 to 4 replicas per stage with mixed GPU types, TP degrees and zones (one to
three zones, two regions), fp32 / bf16 / fp16, AdamW / SGD, no / full (old flag, uniform, block) / selective
recomputation, distributed optimizer, tied embeddings, per-stage grad_sync, uneven micro-batch counts.
"""
from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace
from pathlib import Path

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import BUILTIN_MODELS, ModelSpec
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import ProfileStore
from planner.simulator import simulate
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext
from planner.simulator.sync_modes import chosen_sync_modes

SMALL = ModelSpec("bf", num_layers=4, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=4096,
                  vocab_size=1024, max_position_embeddings=4096)
ZONES = ("us-a", "us-b", "eu-b")


def canon(x) -> str:
    """Type-and-repr form of a nested result: equal strings <=> equal values, bit for bit."""
    if isinstance(x, dict):
        items = sorted(x.items(), key=lambda kv: repr(kv[0]))
        return "{" + ", ".join(f"{canon(k)}: {canon(v)}" for k, v in items) + "}"
    if isinstance(x, (list, tuple)):
        return type(x).__name__ + "[" + ", ".join(canon(v) for v in x) + "]"
    return f"{type(x).__name__}:{x!r}"


def contexts(sailor: Path | None) -> list[tuple[str, SimContext, tuple[str, ...], dict]]:
    """(name, context, zones, {gpu type: [(mbs, tp)] allowed or None for any})."""
    cat = GPUCatalog()
    out = []
    variants = {
        "ours": OURS,
        "deepspeed": SAILOR_DEEPSPEED,
        "ours-blocking": OURS.with_(p2p_blocking=True, dp_sync_waits_for_all=False, profile_offset_s=2e-4),
        "ours-scaled": OURS.with_(compute_scale=1.3, update_scale=0.7, activation_reserve_factor=1.1,
                                  grad_bucket_elems=1_000_000, memory_headroom_fraction=0.05,
                                  per_microbatch_overhead_s=1e-3),
        "ours-flat": OURS.with_(grad_sync="flat", sharded_collective_scale=1.7),
        "ours-hier-nodrop": OURS.with_(grad_sync="hierarchical", hidden_dropout=0.0, attention_dropout=0.0),
        "deepspeed-overlap": SAILOR_DEEPSPEED.with_(dp_sync_waits_for_all=True, p2p_blocking=False,
                                                    activation_model="megatron-core", hidden_dropout=0.1),
    }
    for model in (SMALL, BUILTIN_MODELS["opt-350m"], BUILTIN_MODELS["tiny"]):
        for name, st in variants.items():
            ctx = SimContext(model, ProfileStore(model, cat), NetworkModel(cat), cat, st)
            out.append((f"{model.name}/{name}", ctx, ZONES, {}))
    if sailor is not None:
        from planner.sailor_data import load_sailor_data
        sd = load_sailor_data(sailor, "OPT-350")
        zones = ("us-central1-a", "us-central1-b", "us-west1-b", "us-east1-c")   # the last: links missing
        allowed = {g: [(mb, t) for mb, t in sd.profiles.options(g) if t <= sd.gpus_per_node.get(g, 1)]
                   for g in ("A100-40", "V100-16")}
        for name, st in (("ours", OURS), ("deepspeed", SAILOR_DEEPSPEED),
                         ("ours-blocking", variants["ours-blocking"])):
            ctx = SimContext(sd.model, sd.profiles, sd.network, cat, st, dict(sd.gpus_per_node))
            out.append((f"sailor/{name}", ctx, zones, allowed))
    return out


def random_plan(rng: random.Random, ctx: SimContext, zones: tuple[str, ...], allowed: dict) -> Plan | None:
    m = ctx.model
    L = m.num_layers
    S = rng.randint(1, min(4, L))
    cuts = sorted(rng.sample(range(1, L), S - 1)) if S > 1 else []
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [L])]
    if S >= 2 and rng.random() < 0.15:       # an embedding-only first stage or a head-only last stage
        if rng.random() < 0.5:
            sizes = [0] + sizes[:-2] + [sizes[-2] + sizes[-1]]
        else:
            sizes = [sizes[0] + sizes[1]] + sizes[2:] + [0]
    D = rng.randint(1, 4)
    types = list(allowed) if allowed else rng.sample(ctx.catalog.names(), 3)
    if allowed:
        mbs = rng.choice(sorted({mb for g in types for mb, _ in allowed[g]}))
    else:
        mbs = rng.choice((1, 2, 4))
    nz = rng.randint(1, len(zones))
    zs = rng.sample(zones, nz)
    stages, first = [], 0
    for n in sizes:
        reps = []
        for _ in range(D):
            g = rng.choice(types)
            if allowed:
                tps = [t for mb, t in allowed[g] if mb == mbs]
                if not tps:
                    return None
            else:
                tps = [t for t in (1, 2, 4) if t <= ctx.node_size(g) and m.num_heads % t == 0
                       and m.ffn_hidden_size % t == 0]
            reps.append(Replica(g, rng.choice(tps), rng.choice(zs)))
        if rng.random() < 0.3 and D > 1 and rng.random() < 0.5:
            reps = [reps[0]] * D if rng.random() < 0.5 else reps   # equal replicas (shared costs)
        stages.append(Stage(first, n, tuple(reps), rng.choice((None, None, "flat", "hierarchical"))))
        first += n
    counts = None
    k = rng.randint(1, 6)
    if rng.random() < 0.3:
        counts = tuple(rng.randint(1, 6) for _ in range(D))
        gbs = sum(counts) * mbs
    else:
        gbs = mbs * D * k
    rec = rng.choice(("none", "none", "flag", "uniform", "block", "selective"))
    kw = {}
    if rec == "flag":
        kw["recompute_activations"] = True
    elif rec in ("uniform", "block"):
        kw.update(recompute_granularity="full", recompute_method=rec, recompute_num_layers=rng.randint(1, 3))
    elif rec == "selective":
        kw["recompute_granularity"] = "selective"
    try:
        return Plan(num_layers=L, stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs,
                    precision=rng.choice(("fp32", "bf16", "fp16")), optimizer=rng.choice(("adamw", "adamw", "sgd")),
                    distributed_optimizer=rng.random() < 0.4, tie_embeddings=rng.random() < 0.4,
                    microbatches_per_pipeline=counts, **kw)
    except InputError:
        return None


ROOT = str(Path(sys.modules["planner"].__file__).resolve().parents[1])     # the tree under test


def result_line(plan: Plan, ctx: SimContext) -> str:
    try:
        est = canon(simulate(plan, ctx).to_dict()).replace(ROOT, "<tree>")
    except InputError as e:
        est = f"InputError:{e}"
    try:
        modes = canon(chosen_sync_modes(plan, ctx))
    except InputError as e:
        modes = f"InputError:{e}"
    return f"{plan!r} -> {est} | {modes}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--plans", type=int, default=400, help="random plans per context")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--sailor-data", type=Path, default=None)
    args = ap.parse_args(argv)
    lines = []
    for name, ctx, zones, allowed in contexts(args.sailor_data):
        rng = random.Random(f"{args.seed}/{name}")
        made = 0
        while made < args.plans:
            plan = random_plan(rng, ctx, zones, allowed)
            if plan is None:
                continue
            made += 1
            lines.append(f"{name}: {result_line(plan, ctx)}")
            if rng.random() < 0.1:     # the same plan again: a cache must not change a second answer
                lines.append(f"{name} again: {result_line(replace(plan), ctx)}")
    Path(args.out).write_text("\n".join(lines) + "\n")
    n_err = sum("InputError:" in ln.split(" -> ", 1)[1].split(" | ")[0] for ln in lines)
    print(f"{len(lines)} results ({n_err} InputError) written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
