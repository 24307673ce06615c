"""What sets the split-space bound at one node (session 15, helper s15x): its terms and the LP's witness.

Contract: :func:`node_witness(ctx, cluster, gbs, s_num, mbs, d, space)` rebuilds the units of (S, b) of
:func:`planner.search.mixsplit.split_space_bound` for every smallest TP degree, and per unit returns a
:class:`NodeWitness`: the node's proven floor at D = ``d`` (a single D, bisection 1e-5), its sync + step floor
split into the no-distributed-optimizer and distributed-optimizer terms, the makespan room T' = floor - base and
the LP's optimal weights over the usage columns at that T' (the relaxation's "best plan": pipelines per usage
vector, micro-batches each). Diagnostics only; the bound itself never reads it (docs/PLANNER.md 7.6).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chaintab import chain_groups
from planner.search.mixexact import solve_lp
from planner.search.mixsplit import DIST, _columns, node_floor, split_core, split_table, split_unit, unit_taus
from planner.search.mixsplit_sync import split_sync
from planner.search.mixtab import MixMemo
from planner.search.space import SearchSpace
from planner.search.tasks import Tables, cluster_options
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


@dataclass(frozen=True)
class NodeWitness:
    taus: tuple[int, ...]
    floor_s: float
    sync_s: float               # the sync floor without the distributed optimizer at D
    sync_dist_s: float          # with it (inf: not covered)
    upd_s: float                # the step floor without it (with it: upd_s / D)
    base_s: float               # the node's sync + step floor (the smaller of both settings)
    pools: tuple[tuple[str, str], ...]
    columns: tuple[tuple[tuple[int, ...], float, float], ...]     # (usage per pool, micro-batches, pipelines)


def node_witness(ctx: SimContext, cluster: ClusterSpec, gbs: int, s_num: int, mbs: int, d: int,
                 space: SearchSpace | None = None, max_cells: int | None = None) -> list[NodeWitness]:
    space = space or SearchSpace()
    cluster = cluster.nonempty()
    tables = Tables(ctx, replace(space, recompute=(False, True), distributed_optimizer=(False,)))
    options = cluster_options(ctx, cluster, space)
    grp = chain_groups(cluster, options, mbs, ctx)
    dist = DIST and True in space.distributed_optimizer
    d_top = min(gbs // mbs, cluster.total_gpus // s_num)
    core = split_core(ctx, tables, grp, s_num, mbs, space, d_top if dist else None)
    memo, sync_memo = MixMemo(), {}
    pools = tuple(sorted({(p.gpu_type, p.zone) for p in cluster.pools}))
    elem = F.bytes_per_element(space.precision)
    out = []
    for taus in unit_taus(sorted({int(t) for t in grp.tp}), s_num):
        unit = split_unit(ctx, cluster, core, gbs, s_num, mbs, taus, dist, memo, sync_memo, space.precision)
        if unit is None or d > unit.d_max:
            continue
        tab = split_table(unit, max_cells) if max_cells else split_table(unit)
        floor = node_floor(unit, tab, d, d, float(unit.base[d]))
        keep = np.isfinite(unit.comp).any(axis=2, keepdims=True)
        params = np.where(keep, core.params, np.inf)
        nd = split_sync(ctx, cluster, grp, params, taus, unit.d_max, memo.rings, None, elem, sync_memo)[d]
        ds = split_sync(ctx, cluster, grp, params, taus, unit.d_max, memo.rings,
                        (None, ctx.settings.sharded_collective_scale), elem, sync_memo)[d] if dist else np.inf
        upd = float(np.where(keep, core.upd, np.inf)[:, :, -(-ctx.model.num_layers // s_num):].min())
        cols: tuple = ()
        if np.isfinite(floor):
            u, m = _columns(unit, tab, floor - float(unit.base[d]))
            _, _, x = solve_lp(u, m, grp.caps, unit.n_mb, d, d)
            if len(x):
                keep = np.nonzero(x[:-1] > 1e-6)[0]
                cols = tuple((tuple(int(a) for a in u[i]), float(m[i]), float(x[i])) for i in keep)
        out.append(NodeWitness(taus, float(floor), float(nd), float(ds), upd, float(unit.base[d]), pools, cols))
    return out
