"""Primal plans from section 7's LP (docs/PLANNER.md 8.3): are the bound's mixed chains real plans?

For a setup and an (S, micro-batch) node, builds the bound's tables (``mixtab.mix_unit``, Sailor's split, no
recomputation, no distributed optimizer), and for each D given and each target T on a grid (0.7 .. 1.3 x
ours' iteration time) runs the bound's column generation (``mixbound.column_y``, called until it adds no
column, at most CG_CALLS times) and solves the restricted master LP ``max sum_c n_c m_c(T')`` s.t.
``sum n_c = D``, ``sum n_c u_c <= caps`` (scipy HiGHS). At the first T where the LP can run all N
micro-batches, its weights are rounded down and then up by largest fraction while the pools allow, the
pipelines built (chain = the LP column), their counts water-filled and the plan scored by ``simulate``
(:func:`planner.search.mixplan.score`); the local search of section 8 is then run from it. Prints the plan's
it/s next to ours, and how many of the N micro-batches the LP covers at T = ours' iteration. An experiment
(it reads mixbound's private ``_Unit``), not a planner.

    python benchmarks/mixed_lp_primal.py --sailor-data ../shared/data/sailor --setup "Fig8b 128+384" \
        --stages 7 --mbs 1 --d 32,45,60
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402


CG_CALLS = 6        # column_y calls per T (8 rounds each) while columns are still added


def _master(unit, t: float, d: int):
    """(micro-batches, weights, columns) of the restricted master LP at iteration ``t`` with D = ``d``."""
    from scipy.optimize import linprog
    from planner.search.mixprice import chain_count, usage
    tab = unit.tab
    t_prime = t - float(tab.sync[d]) - tab.upd
    cols = [np.array(c) for c in unit.cols]
    m = np.array([chain_count(tab, c, t_prime) for c in cols], dtype=float)
    cols, m = [c for c, k in zip(cols, m >= 1) if k], m[m >= 1]
    if not cols:
        return -1.0, None, None
    u = np.array([usage(tab, c) for c in cols]).T
    a_ub = np.vstack([u, np.ones((1, len(cols))), -np.ones((1, len(cols)))])
    b_ub = np.concatenate([tab.grp.caps.astype(float), [d, -d]])
    res = linprog(-m, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    return (-1.0, None, None) if res.status else (-res.fun, res.x, cols)


def _round(tab, x: np.ndarray, cols: list, d: int) -> list:
    from planner.search.mixprice import usage
    n = np.floor(x + 1e-9).astype(int)
    used = sum((n[i] * usage(tab, cols[i]) for i in range(len(cols))), np.zeros(len(tab.grp.caps)))
    for i in np.argsort(-(x - n)):
        if n.sum() >= d:
            break
        if x[i] - n[i] > 1e-9 and np.all(used + usage(tab, cols[i]) <= tab.grp.caps):
            n[i] += 1
            used = used + usage(tab, cols[i])
    return [tuple(tab.grp.names[g] for g in cols[i]) for i in range(len(cols)) for _ in range(n[i])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", default=str(ROOT.parent / "shared" / "data" / "sailor"))
    ap.add_argument("--setup", required=True)
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--mbs", type=int, required=True)
    ap.add_argument("--tp-min", type=int, default=1)
    ap.add_argument("--d", required=True, help="comma-separated pipeline counts")
    args = ap.parse_args()
    from planner.baselines.spaces import PLANNERS
    from planner.search import Objective, plan_search
    from planner.search import mixplan as M
    from planner.search.mixbound import _Unit, column_y
    from planner.search.mixtab import MixMemo, mix_unit
    from planner.search.tasks import Tables, cluster_options, even_last
    st = next(s for s in setups() if s.name == args.setup)
    ctx, cluster, gbs = _context(st, args.sailor_data)
    obj = Objective()
    sp = PLANNERS["sailor-space"]
    tables = Tables(ctx, replace(sp, recompute=(False,), distributed_optimizer=(False,)))
    options = cluster_options(ctx, cluster, sp)
    tab = mix_unit(ctx, cluster, tables, options, gbs, args.stages, args.mbs, sp.precision, args.tp_min, MixMemo())
    if tab is None:
        print("no such unit")
        return 1
    ours = plan_search(ctx, cluster, gbs, obj, replace(PLANNERS["ours"], tie_embeddings=ctx.model.tied_embeddings)).best
    unit = _Unit(tab)
    unit.add(np.zeros(len(tab.grp.caps)))
    shape = M.Shape(tuple(int(v) for v in even_last(ctx.model.num_layers, args.stages)[0]), args.mbs, gbs,
                    sp.precision, sp.optimizer, False, False, False)
    load0 = os.getloadavg()[0]
    print(f"{st.name}: ours {1 / ours.iteration_s:.4f} it/s; node S={args.stages} b={args.mbs} tp_min={args.tp_min}")
    for d in (int(v) for v in args.d.split(",")):
        t0 = time.perf_counter()
        at_ours = None
        for t in np.linspace(0.7, 1.3, 13) * ours.iteration_s:
            for _ in range(CG_CALLS):           # column generation until no new column (or CG_CALLS calls)
                before = len(unit.cols)
                column_y(unit, t, d, d)
                if len(unit.cols) == before:
                    break
            val, x, cols = _master(unit, t, d)
            if at_ours is None and t >= ours.iteration_s * (1 - 1e-9):
                at_ours = val
                print(f"  D={d}: at T = ours' iteration the LP runs {max(val, 0):.0f} of N = {tab.n_mb} "
                      f"micro-batches ({len(unit.cols)} columns)")
            if val < tab.n_mb:
                continue
            pipes = _round(tab, x, cols, d)
            res = M.score(ctx, shape, pipes, obj)
            imp = M.improve(ctx, cluster, gbs, obj, options, res[0]) if res else None
            got = "does not fit" if res is None else f"{1 / res[0].iteration_s:.4f} it/s"
            after = "" if imp is None else f", local search {1 / imp.iteration_s:.4f} it/s"
            print(f"  D={d}: LP feasible at T={t:.4f} s ({int((x > 1e-9).sum())} chains of {len(cols)} "
                  f"columns), rounded {len(pipes)} pipelines: {got}{after} ({time.perf_counter() - t0:.1f} s)")
            break
        else:
            print(f"  D={d}: LP infeasible up to 1.3 x ours")
    print(f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
