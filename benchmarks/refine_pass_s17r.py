"""CPU time of the segment-split refinement pass alone (docs/PLANNER.md 2.7; session 17, s17r), in process.

Per setup of benchmarks/planner_vs_sailor.py with two or more GPU types (not the built-in 4,096-GPU one): data
loaded once, then ``api.plan`` with ``chain_splits="refine"`` (no comparator) ``--runs`` times; the table gives
the least CPU seconds (``time.process_time``) of the whole call and of ``refine_chains`` inside it, the splits
the pass scored exactly and the plan's objective key. ``--tree DIR`` measures another checkout's planner (its
``planner`` package first on the path; this tree's benchmark helpers), e.g. a frozen copy of main, so both run
the same script:

    python benchmarks/refine_pass_s17r.py --sailor-data ../shared/data/sailor [--runs 5] [--tree DIR] [--only NAME]

A last summary line.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose planner is measured")
    ap.add_argument("--only", action="append", help="setup name prefix (repeatable)")
    args = ap.parse_args()
    sys.path[:0] = [str(args.tree.resolve()), str(ROOT / "benchmarks")]
    from planner import api     # first: the helpers below put this tree on the path, the tree's package stays
    import planner.search.chainrefine as cr
    from planner.search import Objective
    from planner_bound import _context
    from planner_vs_sailor import setups
    spent: list[tuple[float, int]] = []
    inner = cr.refine_chains

    def timed(*a, **k):
        t0 = time.process_time()
        n = inner(*a, **k)
        spent.append((time.process_time() - t0, n))
        return n
    cr.refine_chains = timed        # engine imports it from the module at each call
    print(f"planner from {Path(cr.__file__).resolve().parents[2]}; load average (1 min) {os.getloadavg()[0]:.1f}")
    print(f"{'setup':24} {'plan cpu s':>10} {'pass cpu s':>10} {'scored':>6} {'key':>10}")
    passes = []
    for st in setups():
        types = {p.split("@")[0] for p in st.gpus.split(",")}
        if st.builtin_gbs or len(types) < 2 or (args.only and not st.name.startswith(tuple(args.only))):
            continue
        ctx, cluster, gbs = _context(st, args.sailor_data)
        limits = dict(zip(st.extra[::2], st.extra[1::2]))
        objective = Objective(st.objective,
                              max_cost_per_iter_usd=float(limits.get("--max-cost-per-iter", 0)) or None,
                              min_throughput_iters_per_s=float(limits.get("--min-throughput", 0)) or None)
        totals, inside = [], []
        for _ in range(args.runs):
            spent.clear()
            t0 = time.process_time()
            rep = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=gbs, objective=objective,
                                           comparator=False, chain_splits="refine"), ctx)
            totals.append(time.process_time() - t0)
            inside.append(spent[0] if spent else (0.0, 0))
        passes.append(min(s for s, _ in inside))
        print(f"{st.name:24} {min(totals):>10.3f} {passes[-1]:>10.3f} {inside[-1][1]:>6} {rep.candidate.key:>10.6g}",
              flush=True)
    print(f"load average (1 min) {os.getloadavg()[0]:.1f} at end; least of {args.runs} runs per setup")
    if not passes:
        print("summary: no setup matched")
        return 1
    print(f"summary: {len(passes)} setups; the refinement pass takes {min(passes):.3f}-{max(passes):.3f} CPU s "
          f"(least of {args.runs} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
