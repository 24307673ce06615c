"""Exhaustive enumeration of Sailor's whole plan space (issue 13 item 4, comparator (b)) on small clusters,
scored by ``simulate``.

Sailor's space as issue 13 defines it: the L layers split evenly with the extra layers on the last stages,
the same replica count D on every stage, one micro-batch size, one TP degree per (stage, GPU type), GPU
types and zones free to change along a pipeline, micro-batch counts per pipeline free (no recomputation, no
distributed optimizer, untied). Unlike the search's comparator ``sailor-space`` (b'), a stage's D replicas
may belong to pipelines of *different* chains (pipeline j is replica j of every stage), so this is the
exact (b) the issue asks for, here only where it can be enumerated.

What is enumerated, with nothing pruned that could hold the optimum:
- a plan is a multiset of D chains (chain = one (type, zone, TP) per stage) meeting the pool capacities and
  the one-TP-per-(stage, type) rule; every distinct order of those D pipelines (the order fixes the gradient
  rings of every stage, which the simulator's sync depends on); for each order every vector of positive
  micro-batch counts summing to N = GBS / micro-batch (counts of two identical chains adjacent in the order
  taken non-increasing: swapping them gives the same plan);
- a plan counts only if ``simulate`` says it fits in memory with its counts (the most permissive rule).

Written independently of ``planner.search`` (only ``Plan`` and ``simulate`` are shared) so that it can check
the search's comparator and plans. Exponential: for clusters of up to ~8 GPUs, D <= 3 or 4.

As a script it runs seeded random small clusters and prints, per case, the exact (b), the search's (b')
(``sailor-space``) and (c) (ours), all scored by ``simulate``, and the ratios b'/b (how far the benchmark's
comparator (b') is below the exact (b)) and c/b (our plan against the exact optimum of Sailor's space):

    python benchmarks/sailor_full_space.py [--sailor-data ../shared/data/sailor] [--cases 12] [--seed 0]

The table and one last summary line go to stdout, progress to stderr.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, replace
from itertools import combinations_with_replacement, permutations, product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.cluster import ClusterSpec  # noqa: E402
from planner.plan import Plan, Replica, Stage  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.simulator.settings import SimContext  # noqa: E402

Chain = tuple[tuple[str, str, int], ...]     # per stage (GPU type, zone, TP)


def even_last_split(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Sailor's split: as even as possible, the extra layers on the last stages."""
    q, r = divmod(num_layers, num_stages)
    return tuple([q] * (num_stages - r) + [q + 1] * r)


def _chains(ctx: SimContext, cluster: ClusterSpec, num_stages: int, tp_opts) -> list[Chain]:
    groups = [(p.gpu_type, p.zone, t) for p in cluster.pools if p.count > 0 for t in tp_opts
              if t <= ctx.node_size(p.gpu_type) and t <= p.count and ctx.model.num_heads % t == 0]
    return [tuple(c) for c in product(groups, repeat=num_stages)]


def _valid(cluster: ClusterSpec, pipes: tuple[Chain, ...]) -> bool:
    """Pool capacities and one TP degree per (stage, GPU type)."""
    used: dict[tuple[str, str], int] = {}
    tp_of: dict[tuple[int, str], int] = {}
    for chain in pipes:
        for s, (g, z, t) in enumerate(chain):
            used[(g, z)] = used.get((g, z), 0) + t
            if tp_of.setdefault((s, g), t) != t:
                return False
    return all(n <= cluster.count(g, z) for (g, z), n in used.items())


def _counts(n: int, order: tuple[Chain, ...]):
    """Positive micro-batch counts summing to ``n``, one per pipeline of ``order``; adjacent identical chains
    get non-increasing counts (the other assignments are the same plans)."""
    d = len(order)

    def rec(j: int, left: int, prev: int | None):
        if j == d - 1:
            if left >= 1 and (prev is None or left <= prev):
                yield (left,)
            return
        top = left - (d - 1 - j)
        if prev is not None:
            top = min(top, prev)
        for c in range(1, top + 1):
            same = j + 1 < d and order[j + 1] == order[j]
            for rest in rec(j + 1, left - c, c if same else None):
                yield (c,) + rest

    yield from rec(0, n, None)


def sailor_plan_of(split, order: tuple[Chain, ...], mbs: int, gbs: int, counts) -> Plan:
    stages, first = [], 0
    for s, n in enumerate(split):
        stages.append(Stage(first, n, tuple(Replica(c[s][0], c[s][2], c[s][1]) for c in order)))
        first += n
    return Plan(num_layers=sum(split), stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs,
                microbatches_per_pipeline=tuple(counts))


def sailor_full_space_best(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective, max_stages: int,
                           mbs_opts, tp_opts, max_d: int = 4):
    """(best objective key, best plan, plans scored) over Sailor's whole space with D <= ``max_d``."""
    best, best_plan, scored = float("inf"), None, 0
    L = ctx.model.num_layers
    for S in range(1, min(L, max_stages) + 1):
        split = even_last_split(L, S)
        chains = _chains(ctx, cluster, S, tp_opts)
        for mbs in mbs_opts:
            if gbs % mbs:
                continue
            n_mb = gbs // mbs
            for d in range(1, min(max_d, n_mb) + 1):
                for pipes in combinations_with_replacement(chains, d):
                    if not _valid(cluster, pipes):
                        continue
                    # memory is non-increasing in every count's in-flight share (min(S - s, m_j)): a
                    # multiset that does not fit with one micro-batch per pipeline fits with no counts
                    probe = simulate(sailor_plan_of(split, pipes, mbs, mbs * d, (1,) * d), ctx)
                    scored += 1
                    if not probe.fits_in_memory:
                        continue
                    for order in sorted(set(permutations(pipes))):
                        for counts in _counts(n_mb, order):
                            plan = sailor_plan_of(split, order, mbs, gbs, counts)
                            est = simulate(plan, ctx)
                            scored += 1
                            if not est.fits_in_memory or not objective.allows(
                                    est.iteration_time_s, est.cost_per_iteration_usd, est.num_gpus):
                                continue
                            key = objective.key(est.iteration_time_s, est.cost_per_iteration_usd)
                            if key < best:
                                best, best_plan = key, plan
    return best, best_plan, scored


# ------------------------------------------------------------------------------------------------- script
GIB = 1024 ** 3
TYPES = ("A100-40", "V100-16")
ZONES = ("us-central1-a", "us-central1-b")


@dataclass(frozen=True)
class Case:
    name: str
    ctx_name: str          # "small" (4-layer model), "small-mem" (the same, 4-4.5 GiB GPUs), "opt-350" (Sailor data)
    gpus: str
    gbs: int
    objective: str         # "throughput" | "cost"


def random_cases(n: int, seed: int, with_sailor: bool) -> list[Case]:
    """``n`` seeded clusters: 2-3 pools of A100-40 / V100-16 in one or two zones, 2-4 GPUs each, <= 8 GPUs."""
    rng = random.Random(seed)
    kinds = ["small", "small-mem"] + (["opt-350"] if with_sailor else [])
    cases = []
    while len(cases) < n:
        pools, total = {}, 0
        for _ in range(rng.choice((2, 2, 3))):
            key = (rng.choice(TYPES), rng.choice(ZONES))
            c = rng.choice((2, 2, 4)) if key not in pools else 0
            if c and total + c <= 8:
                pools[key], total = c, total + c
        if len(pools) < 2 or len({g for g, _ in pools}) < 2 and len({z for _, z in pools}) < 2:
            continue
        gpus = ",".join(f"{g}@{z}={c}" for (g, z), c in sorted(pools.items()))
        kind = kinds[len(cases) % len(kinds)]
        obj = "cost" if len(cases) % 4 == 3 else "throughput"
        cases.append(Case(f"r{len(cases)}", kind, gpus, rng.choice((4, 8)), obj))
    return cases


def contexts(sailor_data: Path | None) -> dict[str, SimContext]:
    from planner.hardware import GPUCatalog
    from planner.model import ModelSpec
    from planner.network import NetworkModel
    from planner.profiles import ProfileStore
    from planner.simulator.settings import OURS
    model = ModelSpec("bf", num_layers=4, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=4096,
                      vocab_size=1024, max_position_embeddings=4096)
    out = {}
    for name, cat in (("small", GPUCatalog()),
                      ("small-mem", GPUCatalog().with_entries({"V100-16": {"memory_bytes": int(4.0 * GIB)},
                                                              "A100-40": {"memory_bytes": int(4.5 * GIB)}}))):
        out[name] = SimContext(model, ProfileStore(model, cat), NetworkModel(cat), cat, OURS)
    if sailor_data is not None:
        from planner.sailor_data import load_sailor_data
        sd = load_sailor_data(sailor_data, "OPT-350")
        out["opt-350"] = SimContext(sd.model, sd.profiles, sd.network, GPUCatalog(), OURS, dict(sd.gpus_per_node))
    return out


def _search_key(ctx, cluster, gbs, objective, space):
    from planner.search import build_plan, plan_search
    res = plan_search(ctx, cluster, gbs, objective, space)
    if res.best is None:
        return float("inf")
    est = simulate(build_plan(res.best, ctx.model.num_layers, gbs, None), ctx)
    return objective.key(est.iteration_time_s, est.cost_per_iteration_usd)


def run_case(case: Case, ctx: SimContext, max_stages: int, max_d: int) -> dict:
    from planner.baselines.spaces import PLANNERS
    from planner.cluster import parse_gpus
    from planner.search import Objective
    cluster = parse_gpus(case.gpus, ctx.catalog)
    objective = Objective(case.objective)
    opts = dict(max_stages=max_stages, mbs_options=(1, 2), tp_options=(1, 2))
    t0 = time.perf_counter()
    b, plan, scored = sailor_full_space_best(ctx, cluster, case.gbs, objective, max_stages, (1, 2), (1, 2), max_d)
    t_b = time.perf_counter() - t0
    t0 = time.perf_counter()
    b1 = _search_key(ctx, cluster, case.gbs, objective, replace(PLANNERS["sailor-space"], **opts))
    c = _search_key(ctx, cluster, case.gbs, objective, replace(PLANNERS["ours"], **opts))
    t_s = time.perf_counter() - t0
    pipes = [] if plan is None else [plan.pipeline(j) for j in range(plan.dp_degree)]
    # a shape (b') cannot hold: pipelines that are neither all of one (type, TP, zone) each nor all identical
    mixed = bool(pipes) and any(len(set(p)) > 1 for p in pipes) and len(set(pipes)) > 1
    return {"b": b, "b1": b1, "c": c, "scored": scored, "t_b": t_b, "t_s": t_s, "mixed": mixed,
            "shape": _shape(plan)}


def _shape(plan: Plan | None) -> str:
    if plan is None:
        return "-"
    pipes = [plan.pipeline(j) for j in range(plan.dp_degree)]
    txt = " | ".join(">".join(f"{r.gpu_type[0]}{r.tp}{r.zone[-1]}" for r in p) for p in pipes)
    return f"S{plan.num_stages} b{plan.micro_batch_size} {txt} m{list(plan.microbatch_counts)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", type=Path, default=None, help="adds OPT-350 cases on Sailor's profiles")
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-stages", type=int, default=3)
    ap.add_argument("--max-d", type=int, default=3)
    args = ap.parse_args(argv)
    ctxs = contexts(args.sailor_data)
    rows = []
    ratio_b1 = "b'/b"
    print(f"{'case':5} {'model':9} {'objective':10} {'gbs':>3} {'GPUs':48} {ratio_b1:>6} {'c/b':>6} {'plans':>6} "
          f"{'b s':>6} {'search s':>8}  exact (b) plan (pipelines type/TP/zone per stage)")
    for case in random_cases(args.cases, args.seed, args.sailor_data is not None):
        print(f"[sailor_full_space] {case.name} {case.gpus} ...", file=sys.stderr, flush=True)
        r = run_case(case, ctxs[case.ctx_name], args.max_stages, args.max_d)
        # keys are seconds or $ per iteration (smaller is better): ratio X/b in throughput terms = b_key / X_key
        if r["b"] == float("inf"):          # nothing of Sailor's space fits: no ratio
            print(f"{case.name:5} {case.ctx_name:9} {case.objective:10} {case.gbs:>3} {case.gpus:48} no plan of "
                  f"Sailor's space fits ({r['scored']} scored)", flush=True)
            continue
        r["b1_over_b"], r["c_over_b"] = r["b"] / r["b1"], r["b"] / r["c"]
        rows.append(r)
        print(f"{case.name:5} {case.ctx_name:9} {case.objective:10} {case.gbs:>3} {case.gpus:48} "
              f"{r['b1_over_b']:6.3f} {r['c_over_b']:6.3f} {r['scored']:>6} {r['t_b']:6.1f} {r['t_s']:8.2f}  "
              f"{r['shape']}{'  (mixes chains in a stage)' if r['mixed'] else ''}", flush=True)
    eq = sum(1 for r in rows if r["b1_over_b"] > 1 - 1e-9)
    ge = sum(1 for r in rows if r["c_over_b"] > 1 - 1e-9)
    mixed = sum(1 for r in rows if r["mixed"])
    if not rows:
        print("summary: no case had a plan of Sailor's space that fits")
        return 1
    print(f"summary: {len(rows)} cases (D <= {args.max_d}, S <= {args.max_stages}); (b') equals the exact (b) on "
          f"{eq}/{len(rows)} (min b'/b {min(r['b1_over_b'] for r in rows):.3f}); the exact (b) mixes chains in a stage "
          f"on {mixed}; ours (c) >= (b) on {ge}/{len(rows)} (c/b {min(r['c_over_b'] for r in rows):.3f}-"
          f"{max(r['c_over_b'] for r in rows):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
