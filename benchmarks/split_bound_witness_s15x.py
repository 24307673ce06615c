"""What sets the split-space bound (docs/PLANNER.md 7.6) at one node of one setup (session 15, helper s15x).

    python benchmarks/split_bound_witness_s15x.py --sailor-data ../shared/data/sailor --only "Fig8b 32+96" \\
        --stages 2 --mbs 1 --dp 64

Per smallest TP degree of the node (S, b, D): the proven floor, the sync floors without / with the distributed
optimizer, the step floor, and the LP's witness at the floor (pipelines per GPU-usage vector and the
micro-batches each runs): :func:`planner.search.mixsplit_witness.node_witness`. One line per unit, then the
witness columns; a last summary line.
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
    print(f"summary: {st.name} S {args.stages} b {args.mbs} D {args.dp}: node floor "
          f"{best.floor_s if best else float('nan'):.6f} s at taus {best.taus if best else '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
