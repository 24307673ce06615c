"""Turns the exact LP's witness at a node of the bound on Sailor's space into a plan of Sailor's space and scores
it with ``simulate`` (session 15, helper s15b; docs/PLANNER.md 7.5): a candidate for raising the lower side of
(b) above (b').

    python benchmarks/sailor_witness_s15b.py --sailor-data ../shared/data/sailor --setup "Fig8b 80+240" \\
        --stages 6 --mbs 1 --dp 32 [--tp-min 1] [--at SECONDS]

At the node (S, b, smallest TP, D) the LP ``max sum n_u m_u(T')`` over every usage vector (mixexact) is solved at
T' = ``--at`` (default: the node's exact floor) minus the node's sync and step floors; its weights n_u are
rounded to D whole pipelines within the pools (largest remainders first); each usage vector becomes the chain
of smallest fill with that usage whose memory allows its count, among the chains consistent with one TP per
(stage, type) with the chains already chosen (largest weights first; every chain of the unit enumerated,
G^S of them). The plan's counts are water-filled (``mixplan.water_fill``) and the plan scored by ``simulate``.
Prints the witness, the plan's pipelines and its it/s beside (b') (``sailor-space``).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from itertools import product
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context, _objective, _plan  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402
from sailor_full_space import sailor_plan_of  # noqa: E402


def _chains(tab, m_of_u: dict):
    """(chains [C, S], usage [C, P], fill [C]) of every chain of usable replicas."""
    n_g, s_num = tab.comp.shape
    st = np.arange(s_num)
    ch = np.array(list(product(range(n_g), repeat=s_num)), dtype=np.int64)
    ok = tab.usable[ch, st].all(axis=1)
    ch = ch[ok]
    use = np.zeros((len(ch), len(tab.grp.caps)), dtype=np.int64)
    for s in range(s_num):
        np.add.at(use, (np.arange(len(ch)), tab.grp.pool[ch[:, s]]), tab.grp.tp[ch[:, s]])
    fill = tab.comp[ch, st].sum(axis=1) + 2 * tab.p2p[ch[:, :-1], ch[:, 1:]].sum(axis=1)
    return ch, use, fill


def node_parser(description: str) -> argparse.ArgumentParser:
    """The flags naming one node of the bound: setup, S, b, D, smallest TP (shared with
    ``sailor_node_floor_s15b.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--setup", required=True)
    for flag in ("--stages", "--mbs", "--dp"):
        ap.add_argument(flag, type=int, required=True)
    ap.add_argument("--tp-min", type=int, default=1)
    return ap


def main() -> int:
    ap = node_parser(__doc__.splitlines()[0])
    ap.add_argument("--at", type=float, default=None, help="T (s) of the LP (default: the node's exact floor)")
    args = ap.parse_args()
    from planner.baselines.spaces import PLANNERS
    from planner.search.mixcouple import coupled_floors, unit_types
    from planner.search.mixexact import counts, lp_value, node_floor_exact, usage_table
    from planner.search.mixplan import water_fill
    from planner.search.mixprice import classes
    from planner.search.mixtab import MixMemo, mix_unit
    from planner.search.tasks import Tables, cluster_options
    from planner.simulator import simulate
    st = [s for s in setups() if s.name == args.setup][0]
    ctx, cluster, gbs = _context(st, args.sailor_data)
    space = PLANNERS["sailor-space"]
    tables = Tables(ctx, replace(space, recompute=(False,), distributed_optimizer=(False,)))
    options = cluster_options(ctx, cluster.nonempty(), space)
    memo = MixMemo()
    tab = mix_unit(ctx, cluster.nonempty(), tables, options, gbs, args.stages, args.mbs, space.precision,
                   args.tp_min, memo)
    core = memo.core[(args.stages, args.mbs)][0]
    cp = coupled_floors(ctx, cluster.nonempty(), tab, core.params, core.upd, tuple(unit_types(tab)), memo.rings,
                        False)      # the bound's floors for every plan of the unit (mixbound, COUPLE on)
    tab = replace(tab, sync=np.maximum(tab.sync, cp.sync), upd=max(tab.upd, cp.upd))
    table = usage_table(tab)
    d = args.dp
    base = float(tab.sync[d]) + tab.upd
    t = args.at if args.at is not None else node_floor_exact(tab, table, d, d, base, 1e-6)
    value, _, x, u = lp_value(tab, table, t - base, d, d)
    mu = counts(tab, table, t - base)
    print(f"{args.setup}: S {args.stages} b {args.mbs} D {d} tau {args.tp_min}: T {t:.4f} s (sync floor "
          f"{tab.sync[d]:.4f}, step floor {tab.upd:.4f}); LP {value:.1f} of N = {tab.n_mb} micro-batches")
    w = x[:-1]
    pick = [(float(w[i]), tuple(int(a) for a in u[i])) for i in np.argsort(-w) if w[i] > 1e-7]
    for wi, ui in pick:
        print(f"  {wi:8.3f} pipelines using {ui} (pools {tab.grp.caps.tolist()}) running {mu[ui]:.0f}")
    # whole pipelines: floors, then the largest remainders, within the pools
    n = {ui: int(np.floor(wi + 1e-9)) for wi, ui in pick}
    for wi, ui in sorted(pick, key=lambda p: -(p[0] - np.floor(p[0] + 1e-9))):
        if sum(n.values()) >= d:
            break
        used = sum(np.array(k) * v for k, v in n.items()) + np.array(ui)
        if (used <= tab.grp.caps).all():
            n[ui] += 1
    n = {k: v for k, v in n.items() if v > 0}
    if sum(n.values()) != d:
        print(f"  rounding gave {sum(n.values())} pipelines, not {d}: no plan")
        return 1
    masks, cls = classes(tab)
    ch, use, fill = _chains(tab, mu)
    fixed: dict[tuple[int, str], int] = {}          # (stage, type) -> TP
    pipes = []
    for ui, k in sorted(n.items(), key=lambda p: -p[1]):
        m = int(mu[ui])
        mk = masks[cls[min(m, tab.s_num) - 1]]
        sel = (use == np.array(ui)).all(axis=1) & mk[ch, np.arange(tab.s_num)].all(axis=1)
        for s in range(tab.s_num):
            for (s2, typ), tp in fixed.items():
                if s2 == s:
                    bad = np.array([tab.grp.names[g][0] == typ and tab.grp.names[g][2] != tp for g in ch[:, s]])
                    sel &= ~bad
        if not sel.any():
            print(f"  no chain of usage {ui} consistent with one TP per (stage, type): no plan")
            return 1
        best = ch[np.nonzero(sel)[0][np.argmin(fill[sel])]]
        chain = tuple(tab.grp.names[g] for g in best)
        for s, (typ, _, tp) in enumerate(chain):
            fixed[(s, typ)] = tp
        print(f"  {k} x {' -> '.join(f'{g}/{z[-1]}/tp{tp}' for g, z, tp in chain)} (fill {fill[sel].min():.4f})")
        pipes += [chain] * k
    from planner.search.tasks import even_last
    split = tuple(int(c) for c in even_last(ctx.model.num_layers, tab.s_num)[0])
    plan = sailor_plan_of(split, tuple(pipes), tab.mbs, gbs, (tab.n_mb // d,) * (d - 1)
                          + (tab.n_mb - (tab.n_mb // d) * (d - 1),))
    cnt, _ = water_fill(ctx, plan)
    plan = replace(plan, microbatches_per_pipeline=cnt)
    est = simulate(plan, ctx)
    b, _ = _plan(ctx, cluster, gbs, _objective(st), "sailor-space")
    b_its = b.estimate.throughput_iters_per_s if b else float("nan")
    print(f"  plan: fits {est.fits_in_memory}, {est.iteration_time_s:.4f} s = {1 / est.iteration_time_s:.4f} it/s "
          f"(sync {est.sync_s:.4f}, step {est.update_s:.4f}); (b') {b_its:.4f} it/s; ratio "
          f"{(1 / est.iteration_time_s) / b_its:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
