"""Segment-split refinement (docs/PLANNER.md 2.7, session 16, helper s16r): the even split's search against the
same search followed by the refinement pass, on the heterogeneous setups of benchmarks/planner_vs_sailor.py.

    python benchmarks/chain_refine_s16r.py --sailor-data ../shared/data/sailor [--runs 3] [--only NAME]

Per setup, in one process (data loaded once, outside the timing): ``api.plan`` (search, production check,
``simulate`` of the plan; no comparator) with ``chain_splits="even"`` and with ``"refine"``, ``--runs`` times
each, alternating (after one uncounted run of each on the first setup); the table gives the plan's it/s
(throughput objective; $/iteration otherwise), the ratio refined / even and the median wall seconds of each,
and the refined plan when it differs. The refined plan's estimate is ``simulate``'s (``api.plan`` re-simulates
every plan it returns). A last summary line.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402

DEFAULT_ONLY = ("Fig8b", "GPT-Neo")


def _plan_desc(plan) -> str:
    stages = " | ".join(f"{s.replicas[0].gpu_type[:4]} TP{s.replicas[0].tp} x{s.num_layers}" for s in plan.stages)
    return f"{stages}, D {plan.dp_degree}, b {plan.micro_batch_size}"


def _run(ctx, cluster, gbs, objective, splits: str):
    from planner import api
    t0 = time.perf_counter()
    rep = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=gbs, objective=objective, comparator=False,
                                   chain_splits=splits), ctx)
    return rep, time.perf_counter() - t0


def main() -> int:
    from planner.search import Objective
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", action="append", help="setup name prefix (repeatable; default: Fig8b, GPT-Neo)")
    args = ap.parse_args()
    only = tuple(args.only or DEFAULT_ONLY)
    print(f"{'setup':<18} {'even it/s':>10} {'refine it/s':>11} {'ratio':>7} {'wall even s':>11} "
          f"{'wall refine s':>13}  refined plan")
    ratios, extra = [], []
    for st in setups():
        if not st.name.startswith(only) or st.builtin_gbs:
            continue
        ctx, cluster, gbs = _context(st, args.sailor_data)
        objective = Objective(st.objective)
        walls = {"even": [], "refine": []}
        reps = {}
        if not ratios:      # one uncounted run of each first (lazy imports, first-use caches of the process)
            for splits in ("even", "refine"):
                _run(ctx, cluster, gbs, objective, splits)
        for _ in range(args.runs):
            for splits in ("even", "refine"):
                reps[splits], wall = _run(ctx, cluster, gbs, objective, splits)
                walls[splits].append(wall)
        ev, rf = reps["even"].estimate, reps["refine"].estimate
        score = (lambda e: 1 / e.iteration_time_s) if st.objective == "throughput" else \
            (lambda e: e.cost_per_iteration_usd)
        ratio = score(rf) / score(ev)
        ratios.append(ratio)
        w_e, w_r = statistics.median(walls["even"]), statistics.median(walls["refine"])
        extra.append(w_r - w_e)
        changed = reps["refine"].plan != reps["even"].plan
        print(f"{st.name:<18} {score(ev):>10.4f} {score(rf):>11.4f} {ratio:>7.4f} {w_e:>11.2f} {w_r:>13.2f}  "
              f"{_plan_desc(reps['refine'].plan) if changed else '(the even plan)'}")
    if not ratios:
        print("summary: no setup matched")
        return 1
    print(f"summary: {len(ratios)} setups, {args.runs} runs each; refined / even it/s {min(ratios):.4f}-"
          f"{max(ratios):.4f} (better on {sum(r > 1 for r in ratios)}); median wall added by the refinement "
          f"{statistics.median(extra):+.2f} s ({min(extra):+.2f} to {max(extra):+.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
