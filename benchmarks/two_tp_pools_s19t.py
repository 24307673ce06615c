"""What two (or more) TP degrees for one GPU type in pool plans can gain (issue 13; docs/PLANNER.md section 10).

For N random small clusters (seeded: 1-2 GPU types, 1-2 zones, 2-12 GPUs per pool, GBS 8/16/32 (more than
two pools: 2-8 GPUs, GBS 8/16), up to 3
stages (OPT-350: 2), micro-batch 1 or 2, TP 1/2/4, no recomputation, no distributed optimizer) it scores, all
with ``simulate``: the search's plan (``plan_search`` over the same options, chain plans included: "ours"), the
best pool plan with one TP per GPU type and free per-zone counts ("1-TP") and the best pool plan with up to
``--max-tps`` TP degrees per type ("k-TP"), both by the independent brute force of
``tests/planner/two_tp_pools_s19t.py``. ``1-TP/k`` = 1-TP / k-TP (the gain of the extra TP degrees alone, one
enumeration); ``ratio`` = ours / k-TP on the objective's key (iteration seconds for throughput, $/iteration for
cost): above 1 where a plan outside the declared space wins (counted when the k-TP plan uses two TP degrees for
a type). Two model contexts: the brute-force tests' analytic model (``bf``) and, when the Sailor data folder is
there, OPT-350 on Sailor's profiles and fitted network (``opt350``). A table; then (unless ``--no-sweep``) three
winning clusters at GBS 8 .. 256 (the gain needs few micro-batches per pipeline); then one summary line.

    python benchmarks/two_tp_pools_s19t.py [--clusters 40] [--seed 0] [--max-tps 2] [--objectives throughput,cost] [--no-sweep]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.cluster import parse_gpus  # noqa: E402
from planner.hardware import GPUCatalog  # noqa: E402
from planner.search import Objective, SearchSpace, build_plan, plan_search  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.simulator.settings import OURS, SimContext  # noqa: E402
from tests.planner.test_planner_bruteforce import bf_ctx  # noqa: E402
from tests.planner.two_tp_pools_s19t import best_pool_plan, shape, tps_per_type  # noqa: E402

SAILOR_DIR = Path(os.environ.get("SAILOR_DATA", ROOT.parent / "shared" / "data" / "sailor"))
BF_TYPES = ("A100-40", "V100-16", "GH-96", "A100-80", "H100-80")
OPT_TYPES = ("A100-40", "V100-16")
OPT_ZONES = ("us-central1-a", "us-central1-b")
MBS, TPS = (1, 2), (1, 2, 4)
INF = float("inf")
MAX_STAGES = {"bf": 3, "opt350": 2}     # OPT-350's 24 layers: 253 splits at S = 3 (too slow for the run's budget)


def opt350_ctx() -> SimContext | None:
    if not (SAILOR_DIR / "sailor" / "Planner").is_dir():
        return None
    from planner.sailor_data import load_sailor_data
    sd = load_sailor_data(SAILOR_DIR, "OPT-350")
    return SimContext(sd.model, sd.profiles, sd.network, GPUCatalog(), OURS, dict(sd.gpus_per_node))


def random_cluster(rng: random.Random, types, zones) -> tuple[str, int]:
    """(cluster, GBS): 1-2 types, 1-2 zones, every (type, zone) of them a pool with probability 0.8 (at least
    one pool); 2-12 GPUs per pool and GBS 8, 16 or 32 with up to two pools, 2-8 GPUs and GBS 8 or 16 with more
    (the brute force's structures grow as the product of the pools' count vectors)."""
    ts = rng.sample(types, rng.randint(1, 2))
    zs = list(zones[:rng.randint(1, 2)])
    pools = [(g, z) for g in ts for z in zs if len(zs) == 1 or rng.random() < 0.8] or [(ts[0], zs[0])]
    top, batches = (12, [8, 16, 32]) if len(pools) <= 2 else (8, [8, 16])
    return ",".join(f"{g}@{z}={rng.randint(2, top)}" for g, z in pools), rng.choice(batches)


def search_key(ctx, cluster, gbs, objective, max_stages: int) -> tuple[float, str]:
    space = SearchSpace(max_stages=max_stages, mbs_options=MBS, tp_options=TPS, recompute=(False,),
                        distributed_optimizer=(False,))
    best = plan_search(ctx, cluster, gbs, objective, space).best
    if best is None:
        return float("inf"), "-"
    plan = build_plan(best, ctx.model.num_layers, gbs, None)
    est = simulate(plan, ctx)
    return objective.key(est.iteration_time_s, est.cost_per_iteration_usd), shape(plan)


SWEEP = (("bf", "H100-80@us-a=3"), ("bf", "V100-16@us-a=9,V100-16@us-b=2"), ("opt350", "A100-40@us-central1-a=7"))
SWEEP_GBS = (8, 16, 32, 64, 128, 256)


def sweep(contexts: dict) -> float:
    """Three winning clusters (seeds 0 and 1) at GBS 8 .. 256, throughput: a table; returns the largest ratio
    at GBS >= 64 (many micro-batches per pipeline)."""
    print("\nGBS sweep (throughput): ours / best 2-TP pool plan")
    print(f"{'model':<7} {'cluster':<40} " + " ".join(f"{g:>9}" for g in SWEEP_GBS))
    late = 1.0
    for name, gpus in SWEEP:
        if name not in contexts:
            continue
        ctx = contexts[name]
        cluster = parse_gpus(gpus, ctx.catalog)
        ratios = []
        for gbs in SWEEP_GBS:
            ours, _ = search_key(ctx, cluster, gbs, Objective("throughput"), MAX_STAGES[name])
            two = best_pool_plan(ctx, cluster, gbs, Objective("throughput"), MAX_STAGES[name], MBS, TPS, max_tps=2)
            ratios.append(ours / two.key)
            if gbs >= 64:
                late = max(late, ratios[-1])
        print(f"{name:<7} {gpus:<40} " + " ".join(f"{r:>9.6f}" for r in ratios), flush=True)
    return late


def model_contexts() -> list[tuple]:
    """(name, context, GPU types, zones) of the benchmark's model contexts: the analytic test model, and OPT-350 on
    Sailor's data where ../shared/data/sailor exists."""
    contexts = [("bf", bf_ctx()[0], BF_TYPES, ("us-a", "us-b"))]
    opt = opt350_ctx()
    if opt is not None:
        contexts.append(("opt350", opt, OPT_TYPES, OPT_ZONES))
    return contexts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=40, help="random clusters per model context")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tps", type=int, default=2, help="TP degrees per GPU type in the brute force")
    ap.add_argument("--objectives", default="throughput,cost")
    ap.add_argument("--no-sweep", action="store_true", help="leave out the GBS sweep of three winning clusters")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    contexts = model_contexts()
    kinds = [k for k in args.objectives.split(",") if k]
    t0 = time.process_time()
    print(f"{'model':<7} {'cluster':<62} {'GBS':>4} {'objective':<10} {'ours':>12} {'1-TP':>12} "
          f"{f'{args.max_tps}-TP':>12} {'1-TP/k':>9} {'ratio':>9} {'scored':>7} {'CPU s':>6}  winner (k-TP) | ours",
          flush=True)
    wins, top, n, gain, structs = 0, (1.0, ""), 0, 1.0, [0, 0]
    for name, ctx, types, zones in contexts:
        for _ in range(args.clusters):
            gpus, gbs = random_cluster(rng, types, zones)
            cluster = parse_gpus(gpus, ctx.catalog)
            memo: dict = {}
            S = MAX_STAGES[name]
            for kind in kinds:
                objective = Objective(kind)
                c0 = time.process_time()
                ours, ours_shape = search_key(ctx, cluster, gbs, objective, S)
                one = best_pool_plan(ctx, cluster, gbs, objective, S, MBS, TPS, max_tps=1, memo=memo)
                many = best_pool_plan(ctx, cluster, gbs, objective, S, MBS, TPS, max_tps=args.max_tps,
                                      memo=memo)
                cpu = time.process_time() - c0
                ratio = ours / many.key if many.key < INF else 1.0
                multi = many.plan is not None and any(len(t) > 1 for t in tps_per_type(many.plan).values())
                win = ratio > 1 + 1e-9 and multi
                n += 1
                wins += win
                structs[0] += one.structures
                structs[1] += many.structures
                if win and ratio > top[0]:
                    top = (ratio, f"{name} {gpus} GBS {gbs} {kind}")
                alone = one.key / many.key if many.key < INF else 1.0
                gain = max(gain, alone)
                note = f"{shape(many.plan)} | {ours_shape}" if win else ""
                print(f"{name:<7} {gpus:<62} {gbs:>4} {kind:<10} {ours:>12.6g} {one.key:>12.6g} {many.key:>12.6g}"
                      f" {alone:>9.6f} {ratio:>9.6f} {many.scored:>7} {cpu:>6.1f}  {note}", flush=True)
    late = sweep(dict((c[0], c[1]) for c in contexts)) if not args.no_sweep else None
    print(f"{args.max_tps} TP degrees per type win on {wins} of {n} (cluster, objective) cases; largest ratio "
          f"{top[0]:.6f}x ({top[1] or 'none'}); largest 1-TP/k {gain:.6f}x; pool-plan structures "
          f"{structs[1]:,} with {args.max_tps} TP against {structs[0]:,} with one "
          f"({structs[1] / max(structs[0], 1):.1f}x); {time.process_time() - t0:.1f} CPU s; seed {args.seed}, "
          f"S <= {MAX_STAGES}, mbs {MBS}, TP {TPS}"
          + (f"; GBS sweep: largest ratio at GBS >= 64 {late:.6f}x" if late is not None else ""))


if __name__ == "__main__":
    main()
