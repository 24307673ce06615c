"""Mixed plans (docs/PLANNER.md 8): the search with and without the local search for mixed plans, per setup.

For each setup of ``planner_vs_sailor.setups()`` (``--only`` substrings), runs ``plan_search`` in one process
with the ``ours`` space (or ``--planner sailor-space``) twice, ``mixed_plans`` off then on (the same
time limit), and prints the best plan's it/s (or $/iteration under the cost objective), the gain, whether the
winner mixes chains, both search times and whether it keeps one TP per (stage, type) (Sailor's rule). Every plan is re-checked by ``simulate`` (the engine's verify).

    python benchmarks/mixed_plans.py --sailor-data ../shared/data/sailor [--only "Fig8b 128+384"] [--time-limit 60]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context, _objective  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402


def one_tp_per_stage_type(cand) -> bool:
    """Sailor's rule (benchmarks/sailor_full_space.py): one TP degree per (stage, GPU type)."""
    pipes = cand.pipeline_chains()
    return all(len({tp for g2, _, tp in (c[s] for c in pipes) if g2 == g}) == 1
               for s in range(cand.num_stages) for g in {c[s][0] for c in pipes})


def run(st, data: str, limit_s: float, planner: str = "ours") -> dict:
    from planner.api import search_space, PlanRequest
    from planner.search import plan_search
    ctx, cluster, gbs = _context(st, data)
    objective = _objective(st)
    req = PlanRequest(cluster=cluster, global_batch_size=gbs, objective=objective, planner=planner,
                      comparator=False)
    space = replace(search_space(req), tie_embeddings=ctx.model.tied_embeddings)
    out = {}
    for mixed in (False, True):
        t0 = time.perf_counter()
        res = plan_search(ctx, cluster, gbs, objective, replace(space, mixed_plans=mixed), time_limit_s=limit_s)
        c = res.best
        out[mixed] = (c, time.perf_counter() - t0, res.stats.complete)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", default=str(ROOT.parent / "shared" / "data" / "sailor"))
    ap.add_argument("--only", action="append", default=[], help="setup name substring (repeatable)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--planner", default="ours", help="ours (default) or sailor-space: (b') and mixed plans "
                    "from it (Sailor's split, no recomputation / distributed optimizer; 'rule' says whether the "
                    "winner keeps one TP per (stage, type), so whether it lies in Sailor's space)")
    args = ap.parse_args()
    rows = [st for st in setups() if not args.only or any(o in st.name for o in args.only)]
    load0 = os.getloadavg()[0]
    print(f"{'setup':24s} {'before':>9s} {'mixed':>9s} {'gain':>9s} {'mixes':>5s} {'s before':>8s} "
          f"{'s mixed':>8s} rule")
    for st in rows:
        r = run(st, args.sailor_data, args.time_limit, args.planner)
        (c0, t0, _), (c1, t1, _) = r[False], r[True]
        if c0 is None:
            print(f"{st.name:24s} no plan")
            continue
        cost = st.objective == "cost"
        v0 = c0.cost_usd if cost else 1 / c0.iteration_s
        v1 = c1.cost_usd if cost else 1 / c1.iteration_s
        gain = v0 / v1 if cost else v1 / v0
        mixes = "yes" if getattr(c1, "mix", ()) and len(c1.mix) > 1 else "no"
        rule = "yes" if one_tp_per_stage_type(c1) else "no"
        print(f"{st.name:24s} {v0:9.4f} {v1:9.4f} {gain:9.6f} {mixes:>5s} {t0:8.2f} {t1:8.2f} {rule:>4s}", flush=True)
        if mixes == "yes":
            txt = " + ".join(f"{n} x " + ">".join(f"{g[0]}{tp}{z[-1]}" for g, z, tp in ch) for ch, n in c1.mix)
            print(f"    S{c1.num_stages} b{c1.mbs}: {txt}")
    print(f"units: it/s (Fig11: $/iteration, gain = before / mixed); load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
