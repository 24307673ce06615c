"""What sets the split-space bound (docs/PLANNER.md 7.6) at one node of one setup (session 15, helper s15x).

    python benchmarks/split_bound_witness_s15x.py --sailor-data ../shared/data/sailor --only "Fig8b 32+96" \\
        --stages 2 --mbs 1 --dp 64

Per smallest TP degree of the node (S, b, D): the proven floor, the sync floors without / with the distributed
optimizer, the step floor, and the LP's witness at the floor (pipelines per GPU-usage vector and the
micro-batches each runs): :func:`planner.search.mixsplit_witness.node_witness`. One line per unit, then the
witness columns; with ``--score``, where the witness is one usage vector held by all D pipelines, the plan made
of it: every chain with that usage (groups of the unit's TP options) and every composition of the layers, ranked
by ``simulate`` on one pipeline, the best 5 scored with D pipelines and N / D micro-batches each (recomputation
and the distributed optimizer off and on); a last summary line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402


def main() -> int:
    from planner.search.mixsplit_witness import node_witness
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", required=True)
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--mbs", type=int, required=True)
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--score", action="store_true")
    args = ap.parse_args()
    st = next(s for s in setups() if args.only in s.name)
    ctx, cluster, gbs = _context(st, args.sailor_data)
    rows = node_witness(ctx, cluster, gbs, args.stages, args.mbs, args.dp)
    for w in rows:
        print(f"taus {w.taus}: floor {w.floor_s:.6f} s ({1 / w.floor_s:.4f} it/s)  base {w.base_s:.6f} s = "
              f"min(sync {w.sync_s:.6f} + step {w.upd_s:.6f}, dist sync {w.sync_dist_s:.6f} + step / D "
              f"{w.upd_s / args.dp:.6f})  T' {w.floor_s - w.base_s:.6f} s")
        for u, m, x in w.columns:
            use = " + ".join(f"{c} {g}@{z}" for c, (g, z) in zip(u, w.pools) if c)
            print(f"    {x:8.3f} pipelines using {use}: {m:.0f} micro-batches")
    best = min(rows, key=lambda w: w.floor_s) if rows else None
    if args.score and best is not None and len(best.columns) == 1:
        _score(ctx, cluster, gbs, args, best)
    print(f"summary: {st.name} S {args.stages} b {args.mbs} D {args.dp}: node floor "
          f"{best.floor_s if best else float('nan'):.6f} s at taus {best.taus if best else '-'}")
    return 0


def _plan(ctx, chain, split, mbs, gbs, d, rec, dist):
    from planner.plan import Plan, Replica, Stage
    stages, first = [], 0
    for (g, z, tp), n in zip(chain, split):
        stages.append(Stage(first, n, tuple(Replica(g, tp, z) for _ in range(d))))
        first += n
    n_mb = gbs // mbs
    counts = tuple(n_mb // d + (1 if j < n_mb % d else 0) for j in range(d))
    return Plan(num_layers=ctx.model.num_layers, stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs,
                microbatches_per_pipeline=counts, recompute_activations=rec, distributed_optimizer=dist)


def _score(ctx, cluster, gbs, args, w) -> None:
    from itertools import product
    from planner.search.chaintab import chain_groups
    from planner.search.space import SearchSpace
    from planner.search.tasks import cluster_options
    from planner.simulator import simulate
    grp = chain_groups(cluster, cluster_options(ctx, cluster, SearchSpace()), args.mbs, ctx)
    usage = w.columns[0][0]
    L, S = ctx.model.num_layers, args.stages
    comps = [c for c in product(range(1, L - S + 2), repeat=S) if sum(c) == L]
    ranked = []
    for chain in product(range(len(grp.names)), repeat=S):
        u = [0] * len(usage)
        for g in chain:
            u[grp.pool[g]] += int(grp.tp[g])
        if tuple(u) != tuple(usage):
            continue
        names = [grp.names[g] for g in chain]
        for split in comps:
            est = simulate(_plan(ctx, names, split, args.mbs, args.mbs * (gbs // args.mbs // args.dp), 1, False,
                                 False), ctx)
            ranked.append((est.iteration_time_s, names, split))
    ranked.sort(key=lambda r: r[0])
    scored = []
    for _, names, split in ranked[:5]:
        for rec, dist in ((False, False), (False, True), (True, False), (True, True)):
            est = simulate(_plan(ctx, names, split, args.mbs, gbs, args.dp, rec, dist), ctx)
            if est.fits_in_memory:
                scored.append((est.iteration_time_s, names, split, rec, dist, est))
    for t, names, split, rec, dist, est in sorted(scored, key=lambda r: r[0])[:3]:
        busy = max(st.busy_s for st in est.stages)
        print(f"  plan {' | '.join(f'{g}@{z} TP{tp} x{n}' for (g, z, tp), n in zip(names, split))} recompute {rec} "
              f"distopt {dist}: {t:.4f} s ({1 / t:.4f} it/s): makespan {max(est.pipeline_s):.4f} s, sync "
              f"{est.sync_s:.4f} s, step {est.update_s:.4f} s, bottleneck stage {est.bottleneck_stage} busy "
              f"{busy:.4f} s per micro-batch")


if __name__ == "__main__":
    raise SystemExit(main())
