"""The bound on Sailor's space at one node, without and with session 15's coupling (helper s15b; docs/PLANNER.md
7.4): for (setup, S, b, D, smallest TP) the sync and step floors and the exact LP's floor of mixtab's
(uncoupled) floors, of the TP-coupled floors for every plan (mixcouple, ``through`` False), and of each GPU-type
set's coupled floors; the node's floor is the smallest over the type sets.

    python benchmarks/sailor_node_floor_s15b.py --sailor-data ../shared/data/sailor --setup "Fig8b 32+96" \\
        --stages 2 --mbs 1 --dp 64 [--tp-min 1]
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402
from sailor_witness_s15b import node_parser  # noqa: E402


def main() -> int:
    args = node_parser(__doc__.splitlines()[0]).parse_args()
    from planner.baselines.spaces import PLANNERS
    from planner.search.mixcouple import coupled_floors, type_sets, unit_types
    from planner.search.mixexact import node_floor_exact, usage_table
    from planner.search.mixtab import MixMemo, mix_unit
    from planner.search.tasks import Tables, cluster_options
    st = [s for s in setups() if s.name == args.setup][0]
    ctx, cluster, gbs = _context(st, args.sailor_data)
    cluster = cluster.nonempty()
    space = PLANNERS["sailor-space"]
    tables = Tables(ctx, replace(space, recompute=(False,), distributed_optimizer=(False,)))
    memo = MixMemo()
    tab = mix_unit(ctx, cluster, tables, cluster_options(ctx, cluster, space), gbs, args.stages, args.mbs,
                   space.precision, args.tp_min, memo)
    core = memo.core[(args.stages, args.mbs)][0]
    table = usage_table(tab)
    d = args.dp
    f0 = node_floor_exact(tab, table, d, d, float(tab.sync[d]) + tab.upd, 1e-6)
    print(f"{args.setup} S {args.stages} b {args.mbs} D {d} tau {args.tp_min}")
    print(f"  uncoupled (mixtab):        sync {tab.sync[d]:.4f} step {tab.upd:.4f} floor {f0:.4f} s")
    every = coupled_floors(ctx, cluster, tab, core.params, core.upd, tuple(unit_types(tab)), memo.rings, False)
    tab2 = replace(tab, sync=np.maximum(tab.sync, every.sync), upd=max(tab.upd, every.upd))
    f1 = node_floor_exact(tab2, table, d, d, float(tab2.sync[d]) + tab2.upd, 1e-6)
    print(f"  TP-coupled, every plan:    sync {tab2.sync[d]:.4f} step {tab2.upd:.4f} floor {f1:.4f} s")
    floors = []
    for types in type_sets(tab):
        cp = coupled_floors(ctx, cluster, tab, core.params, core.upd, types, memo.rings)
        if cp is None:
            print(f"  types {'+'.join(types)}: no plan")
            continue
        cp = replace(cp, sync=np.maximum(cp.sync, tab2.sync), upd=max(cp.upd, tab2.upd))
        f = node_floor_exact(tab2, table, d, d, float(cp.sync[d]) + cp.upd, 1e-6, cp)
        floors.append(f)
        print(f"  types {'+'.join(types):18} sync {cp.sync[d]:.4f} step {cp.upd:.4f} floor {f:.4f} s")
    print(f"  node floor: {f0:.4f} s -> {min(floors):.4f} s ({1 / f0:.4f} -> {1 / min(floors):.4f} it/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
