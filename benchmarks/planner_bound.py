"""How far can any plan get? The throughput bound (planner/search/bound.py) beside (b') and (c) on the setups
of benchmarks/planner_vs_sailor.py, and what limits (c).

For every setup (imported from planner_vs_sailor.setups(), unchanged), in one process:
- (b'): ``planner="sailor-space"`` (Sailor's space within ours, a LOWER bound on the issue's comparator (b));
- (c): ``planner="ours"``;
- the bound: no plan on the setup's GPUs (any depth, split, mix of types / TP / zones per stage and along a
  pipeline, micro-batch counts, recomputation, distributed optimizer; docs/PLANNER.md 6) iterates faster than
  it. bound/(b') < 1.10 proves that no plan, ours or anyone's, is 1.10x over (b) under our simulator, because
  (b) >= (b'). For the cost objective the scores are 1 / ($/iteration) and the bound is the cost floor.
- the bottleneck of (c), from the simulator's estimate: per stage the busiest replica's busy time over the
  iteration (m_j x busy_s of its pipeline / iteration), the GPU-time busy over GPUs x iteration, the slowest pipeline's bubble (its makespan less
  m x its busiest stage), the gradient sync and optimizer step, the p2p time in its fill and drain, the
  smallest memory headroom of any GPU, and MFU.

Usage: python benchmarks/planner_bound.py --sailor-data ../shared/data/sailor [--only NAME] [--skip NAME]
       [--bound-only NAME]
The table and one last summary line go to stdout, progress to stderr.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_vs_sailor import Setup, setups  # noqa: E402

GOAL = 1.10


def _objective(st: Setup):
    from planner.search import Objective
    args = dict(zip(st.extra[::2], st.extra[1::2]))
    return Objective(st.objective, float(args["--max-cost-per-iter"]) if "--max-cost-per-iter" in args else None,
                     float(args["--min-throughput"]) if "--min-throughput" in args else None)


def _context(st: Setup, data: str):
    from planner import api
    from planner.cluster import parse_gpus
    src = api.DataSource(model=st.model) if st.builtin_gbs else api.DataSource(model=st.model, sailor_data=data)
    bundle = api.load_data(src)
    cluster = parse_gpus(st.gpus, bundle.catalog)
    gbs = st.builtin_gbs or bundle.default_gbs or 1024
    return api.context_for(api.make_context(bundle, None), cluster), cluster, gbs


def _plan(ctx, cluster, gbs: int, objective, planner: str):
    from planner import api
    from planner.errors import InputError
    t0 = time.perf_counter()
    try:
        rep = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=gbs, objective=objective,
                                       planner=planner, comparator=False), ctx)
    except InputError as exc:
        sys.stderr.write(f"  {planner}: {exc}\n")
        return None, time.perf_counter() - t0
    return rep, time.perf_counter() - t0


def bottleneck(plan, est, ctx) -> dict:
    """Where (c)'s iteration goes (fractions of the iteration time; see the module docstring)."""
    from planner.simulator.stage import all_replica_costs
    from planner.simulator.time import p2p_seconds, stage_busy_s
    it = est.iteration_time_s
    costs = all_replica_costs(plan, ctx)
    S, D = plan.num_stages, plan.dp_degree
    p2p = [p2p_seconds(plan, ctx, j) for j in range(D)]
    busy = [stage_busy_s([costs[s][j] for s in range(S)], p2p[j], ctx) for j in range(D)]
    counts = plan.microbatch_counts
    stage_busy = [max(counts[j] * busy[j][s] for j in range(D)) / it for s in range(S)]
    slow = max(range(D), key=lambda j: est.pipeline_s[j])
    bubble = (est.pipeline_s[slow] - counts[slow] * max(busy[slow])) / it
    gpu_busy = sum(plan.stages[s].replicas[j].tp * counts[j] * busy[j][s] for s in range(S) for j in range(D))
    headroom = min(1 - p / c for st in est.stages for p, c in zip(st.replica_peak_bytes, st.replica_capacity_bytes))
    return {"stage_busy": stage_busy, "bubble": bubble, "sync": est.sync_s / it, "update": est.update_s / it,
            "p2p": 2 * sum(p2p[slow]) / it, "headroom": headroom, "mfu": est.mfu,
            "fleet": gpu_busy / (plan.world_size * it)}


def _score(est, objective) -> float:
    return 1.0 / est.cost_per_iteration_usd if objective.kind == "cost" else est.throughput_iters_per_s


def _shape(plan) -> str:
    firsts = {(st.replicas[0].gpu_type, st.replicas[0].tp) for st in plan.stages}
    chain = " c" if len(firsts) > 1 else ""
    return f"{plan.num_stages}x{plan.dp_degree} b{plan.micro_batch_size}{' rc' if plan.recompute_activations else ''}{chain}"


def run(st: Setup, data: str, bound_only: bool = False) -> tuple[list[str], dict]:
    from planner.search.bound import throughput_bound
    ctx, cluster, gbs = _context(st, data)
    objective = _objective(st)
    t0 = time.perf_counter()
    bound = throughput_bound(ctx, cluster, gbs)
    bound_s = time.perf_counter() - t0
    (b, b_s), (c, c_s) = ((None, 0.0), (None, 0.0)) if bound_only else \
        (_plan(ctx, cluster, gbs, objective, p) for p in ("sailor-space", "ours"))
    sb = _score(b.estimate, objective) if b else None
    sc = _score(c.estimate, objective) if c else None
    top = None if bound is None else (1 / bound.cost_usd if objective.kind == "cost" else bound.iters_per_s)
    r = None if (top is None or sb is None) else top / sb
    bn = bottleneck(c.plan, c.estimate, ctx) if c else None
    f = lambda x, spec=".4f": "-" if x is None else format(x, spec)  # noqa: E731
    cells = [st.name, f(sb), f(sc), "-" if not c else _shape(c.plan), f(top),
             "-" if bound is None else f"{bound.stages}x{bound.pipelines} b{bound.mbs} T{bound.max_tp}",
             f(r, ".3f"), "-" if r is None else ("yes" if r < GOAL else "no")]
    if bn:
        busy = bn["stage_busy"]
        shown = "/".join(f"{x:.2f}" for x in busy[:6]) + ("/.." if len(busy) > 6 else "")
        cells += [shown, f"{bn['fleet']:.1%}", f"{bn['bubble']:.1%}", f"{bn['sync']:.1%}", f"{bn['p2p']:.1%}", f"{bn['update']:.1%}",
                  f"{bn['headroom']:.1%}", f"{bn['mfu']:.1%}"]
    else:
        cells += ["-"] * 8
    cells += ["-" if bound_only else f"{b_s:.1f}", "-" if bound_only else f"{c_s:.1f}", f"{bound_s:.1f}"]
    return cells, {"ratio": r, "hetero": st.hetero}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--skip", action="append", default=[], help="leave out setups whose name contains this "
                    "(repeatable; the 4,096-GPU setup's (b') and (c) take minutes)")
    ap.add_argument("--bound-only", action="append", default=[], help="for setups whose name contains this, "
                    "compute only the bound (repeatable)")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table
    chosen = [st for st in setups() if (not args.only or args.only in st.name)
              and not any(s in st.name for s in args.skip)]
    load0 = os.getloadavg()[0]
    t = Table(title="throughput bound vs (b') Sailor's space within ours and (c) ours, all under our simulator; "
                    "(c)'s bottleneck as fractions of its iteration")
    for col in ("setup", "(b') score", "(c) score", "(c) SxD", "bound", "bound at", "bound/(b')",
                f"<{GOAL:.2f}", "(c) stage busy", "GPU busy", "bubble", "sync", "p2p", "optim", "min mem free", "MFU",
                "(b') s", "(c) s", "bound s"):
        t.add_column(col, justify="right")
    rows = []
    for i, st in enumerate(chosen):
        sys.stderr.write(f"[{i + 1}/{len(chosen)}] {st.name}\n")
        cells, info = run(st, args.sailor_data, any(s in st.name for s in args.bound_only))
        t.add_row(*cells)
        rows.append((st, info))
    Console(width=260).print(t)
    print("score: it/s (1 / $ per iteration for the cost objective); bound: no plan of the full space scores "
          "higher (docs/PLANNER.md 6); '<1.10' yes: 1.10x over (b) is impossible since (b) >= (b').")
    print(f"load average (1 min) at start {load0:.1f}, at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    ratios = [(st.name, info["ratio"]) for st, info in rows if info["ratio"] is not None]
    proven = [n for n, r in ratios if r < GOAL]
    het = [r for st, info in rows if st.hetero and (r := info["ratio"]) is not None]
    print(f"summary: bound/(b') < {GOAL:.2f} (1.10x over (b) impossible) on {len(proven)}/{len(ratios)} setups"
          + (f" ({', '.join(proven)})" if proven else "")
          + (f"; heterogeneous bound/(b') {min(het):.3f}-{max(het):.3f}" if het else "")
          + (f"; all bound/(b') {min(r for _, r in ratios):.3f}-{max(r for _, r in ratios):.3f}" if ratios else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
