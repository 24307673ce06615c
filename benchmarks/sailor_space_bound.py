"""Brackets issue 13's comparator (b), the optimum of Sailor's whole space, between (b') and a proven upper bound.

For every setup of ``benchmarks/planner_vs_sailor.py`` (its ``setups()``, unchanged; "4 types" skipped by
default), in one process: (b') = ``sailor-space`` (pool plans + chain plans of Sailor's space, a lower bound
on (b)) and (c) = ours, both by ``planner.api.plan``, and ub = 1 / :func:`planner.search.mixbound.
sailor_space_bound` (no plan of Sailor's whole space, stages mixing chains included, reaches ub it/s under our
simulator; docs/PLANNER.md section 7). So (b') <= (b) <= ub, and (c) / ub is a guaranteed minimum of c / b.

    python benchmarks/sailor_space_bound.py --sailor-data ../shared/data/sailor [--only Fig8b] \\
        [--skip "4 types"] [--time-limit 120] [--compare]

Columns: (b') it/s, (c) it/s, ub it/s, ub/(b') (how far (b) can be above (b')), (c)/ub (c/b is at least this),
where the bound's smallest floor sits (S x D range, micro-batch), whether its refinement finished, seconds.
Under the cost objective (Fig11) the bound is an iteration-time bound only: the row shows it, no $ ratio.
The table and one summary line go to stdout.
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

from planner_bound import _context, _objective, _plan  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402


def _bound(ctx, cluster, gbs, limit_s: float, exact: bool):
    import planner.search.mixbound as mb
    old, mb.EXACT = mb.EXACT, exact
    try:
        t0 = time.perf_counter()
        bound = mb.sailor_space_bound(ctx, cluster, gbs, time_limit_s=limit_s)
        return bound, time.perf_counter() - t0
    finally:
        mb.EXACT = old


def _split_bound(ctx, cluster, gbs, limit_s: float):
    from planner.search.mixsplit import split_space_bound
    t0 = time.perf_counter()
    bound = split_space_bound(ctx, cluster, gbs, time_limit_s=limit_s)
    return bound, time.perf_counter() - t0


def run(st, data: str, limit_s: float, compare: bool = False, split: bool = False, sailor: bool = True) -> dict:
    ctx, cluster, gbs = _context(st, data)
    objective = _objective(st)
    (b, b_s), (c, c_s) = (_plan(ctx, cluster, gbs, objective, p) for p in ("sailor-space", "ours"))
    old = _bound(ctx, cluster, gbs, limit_s, False) if compare else (None, 0.0)
    sp = _split_bound(ctx, cluster, gbs, limit_s) if split else (None, 0.0)
    bound, ub_s = _bound(ctx, cluster, gbs, limit_s, True) if sailor else (None, 0.0)
    return {"b": b.estimate.throughput_iters_per_s if b else None,
            "c": c.estimate.throughput_iters_per_s if c else None,
            "b_usd": b.estimate.cost_per_iteration_usd if b else None,
            "c_usd": c.estimate.cost_per_iteration_usd if c else None,
            "ub": bound.iters_per_s if bound else None, "bound": bound, "cost": objective.kind == "cost",
            "ub_old": old[0].iters_per_s if old[0] else None, "old": old[0], "old_s": old[1],
            "b_s": b_s, "c_s": c_s, "ub_s": ub_s, "split": sp[0], "split_s": sp[1]}


def _regions(regions: tuple) -> str:
    """A node's stage regions as runs (``us-west1 x1, us-central1 x4``), where a stage spans two, or ``-`` (not
    split)."""
    if not regions:
        return "-"
    if regions[0] == "spans":
        return "every stage spans two regions" if regions[1] == "all" else \
            f"a stage spans two regions, stage {regions[1]} in {regions[2]}"
    runs: list[list] = []
    for r in regions:
        if runs and runs[-1][0] == r:
            runs[-1][1] += 1
        else:
            runs.append([r, 1])
    return ", ".join(f"{r} x{n}" for r, n in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--skip", action="append", default=None, help='leave out setups whose name contains this '
                    '(repeatable; default "4 types")')
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per bound (default 120)")
    ap.add_argument("--compare", action="store_true", help="also the bound without the exact pricing "
                    "(mixbound.EXACT off, section 7 before session 14), in the same process, first")
    ap.add_argument("--split", action="store_true", help="also the bound over every layer split with "
                    "recomputation on/off (planner/search/mixsplit.py, docs/PLANNER.md 7.6), in the same process")
    ap.add_argument("--node", action="store_true", help="also print the GPU types and stage regions of the node "
                    "holding the bound (s20b)")
    ap.add_argument("--split-only", action="store_true", help="with --split: skip the bound on Sailor's space")
    args = ap.parse_args()
    skip = ["4 types"] if args.skip is None else args.skip
    chosen = [st for st in setups() if (not args.only or args.only in st.name) and not any(s in st.name for s in skip)]
    load0 = os.getloadavg()[0]
    f = lambda x, spec=".4f": "-" if x is None else format(x, spec)  # noqa: E731
    print(f"{'setup':22} {chr(40) + 'b' + chr(39) + ') it/s':>9} {'(c) it/s':>9} {'ub it/s':>9} {'ub/(b' + chr(39) + ')':>7} "
          f"{'(c)/ub':>7} {'ub at':>22} {'done':>5} {chr(40) + 'b' + chr(39) + ') s':>6} {'(c) s':>6} {'ub s':>6}",
          flush=True)
    ratios, mins = [], []
    for st in chosen:
        r = run(st, args.sailor_data, args.time_limit, args.compare, args.split or args.split_only,
                not args.split_only)
        if r["split"] is not None and r["b"] is not None and not r["cost"]:
            sb = r["split"]
            ub = sb.iters_per_s
            print(f"{'  split+recompute':22} {'':>9} {'':>9} {f(ub):>9} {ub / r['b']:7.3f} "
                  f"{f(None if r['c'] is None else r['c'] / ub, '.3f'):>7} "
                  f"{f'{sb.stages}x{sb.d_lo}..{sb.d_hi} b{sb.mbs}':>22} {('yes' if sb.complete else 'no'):>5} "
                  f"{'':>6} {'':>6} {r['split_s']:6.1f}", flush=True)
        if args.compare and not r["cost"] and r["ub_old"] is not None and r["b"] is not None:
            od = r["old"]
            print(f"{'  without exact':22} {'':>9} {'':>9} {f(r['ub_old']):>9} {r['ub_old'] / r['b']:7.3f} "
                  f"{f(None if r['c'] is None else r['c'] / r['ub_old'], '.3f'):>7} "
                  f"{f'{od.stages}x{od.d_lo}..{od.d_hi} b{od.mbs}':>22} {('yes' if od.complete else 'no'):>5} "
                  f"{'':>6} {'':>6} {r['old_s']:6.1f}", flush=True)
        bd = r["bound"]
        ub_b = None if (r["ub"] is None or r["b"] is None) else r["ub"] / r["b"]
        c_ub = None if (r["ub"] is None or r["c"] is None) else r["c"] / r["ub"]
        if r["cost"]:                          # min $ under a throughput floor: it/s ratios say nothing of $
            ub_b = c_ub = None
        else:
            if ub_b is not None:
                ratios.append((st.name, ub_b, st.hetero))
            if c_ub is not None:
                mins.append(c_ub)
        at = "-" if bd is None else f"{bd.stages}x{bd.d_lo}..{bd.d_hi} b{bd.mbs}"
        print(f"{st.name:22} {f(r['b']):>9} {f(r['c']):>9} {f(r['ub']):>9} {f(ub_b, '.3f'):>7} {f(c_ub, '.3f'):>7} "
              f"{at:>22} {('yes' if bd and bd.complete else 'no'):>5} {r['b_s']:6.1f} {r['c_s']:6.1f} "
              f"{r['ub_s']:6.1f}", flush=True)
        if args.node and bd is not None:        # the node holding the bound: its GPU types and stage regions
            print(f"{'  ub node':22} types {'+'.join(bd.types) or '-'}, regions {_regions(bd.regions)}", flush=True)
    load1 = os.getloadavg()[0]
    if args.split_only:
        print(f"load {load0:.1f} -> {load1:.1f}")
        return 0
    if not ratios:
        print("summary: no throughput setup")
        return 1
    het = [x for _, x, h in ratios if h]
    print(f"summary: (b') <= (b) <= ub on {len(ratios)} throughput setups: ub/(b') {min(x for _, x, _ in ratios):.3f}-"
          f"{max(x for _, x, _ in ratios):.3f}" + (f" (heterogeneous {min(het):.3f}-{max(het):.3f})" if het else "")
          + f"; (c)/ub {min(mins):.3f}-{max(mins):.3f} (c/b is at least this); load {load0:.1f} -> {load1:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
