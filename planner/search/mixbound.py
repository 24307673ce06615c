"""A proven lower bound on the iteration time of every plan of Sailor's whole space (issue 13's comparator (b)).

Contract: :func:`sailor_space_bound(ctx, cluster, gbs, space)` returns a :class:`SpaceBound` whose
``iteration_s`` is < ``simulate(plan, ctx).iteration_time_s`` for EVERY plan of Sailor's space on ``cluster``
that ``simulate`` says fits: S stages on Sailor's split (the L layers even, the extra layers on the last stages),
the same D on every stage, one micro-batch size b, each replica a (type, zone, TP) group whose (b, TP) is an
option of ``space`` (:func:`planner.search.tasks.cluster_options`; default the ``sailor-space`` comparator's),
any mix of groups in a stage, any micro-batch counts, no recomputation, no distributed optimizer. So
1 / ``iteration_s`` is an upper bound on (b)'s throughput. docs/PLANNER.md section 7 is the proof.

Method, per (S, b) and range of D: if a plan iterates within T, each of its pipelines (chain c) runs at most
m_c(T - sync floor - step floor) micro-batches (:mod:`planner.search.mixprice`), the counts sum to N = GBS / b
and the pools hold the replicas; for ANY pool prices y >= 0 the linear relaxation gives
N <= y . cap + D_hi max(mu, 0) + D_lo min(mu, 0), mu >= max_c (m_c - y . u_c). A T where this fails is a
proven floor. y comes from column generation (scipy's HiGHS, imported lazily; soundness needs no exactness);
(S, b, D-range) nodes are refined best-first (smallest floor first, D ranges split) and the bound is the
smallest floor left, so stopping at ``time_limit_s`` still returns a valid bound (``complete`` False).
Where the pools are few (:data:`EXACT`, :mod:`planner.search.mixexact`) a node's floor is instead the exact LP's
over every chain, by GPU usage vector (docs/PLANNER.md 7.1 item 6, 7.2 item 7). Since session 15 (s15b) the sync
and step floors are coupled with each stage's smallest TP and, at a single D's exact floor, the node is split by
the set of GPU types its plans use (:mod:`planner.search.mixcouple`); the first floor of a unit with an exact
table is the exact LP's over its pools merged into one (``mixexact.merged``; 7.1 items 7-9, 7.2 items 8-9).
Since session 20 (s20b) a unit whose table is too large gets the exact LP over its pools merged by region or
type (:mod:`planner.search.mixcoarse`), a stage that must span two regions pays a cross-region ring, and a single
D's type-set node is split by where its stages sit (:mod:`planner.search.mixregion`; 7.1 items 10-12).
"""
from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.mixprice import Priced, chain_count, price, usage, value
from planner.search.mixtab import MixMemo, MixUnit, mix_unit
from planner.search.space import SearchSpace
from planner.search.tasks import Tables, cluster_options
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)
SPLIT = 4               # a D range is split into this many parts when refined
CG_ROUNDS = 8
DP_SPAN = 1.3         # the fill table covers budgets up to this factor over the node's floor
CG_AHEAD = (0.01, 1e-5)
CG_REPEAT = 3          # column generations per node at rising floors
EXACT = True           # price exactly by GPU usage (mixexact) where the pools are few enough
COUPLE = True          # with EXACT: split a node by the GPU types its plans use (mixcouple's coupled floors)
MERGED = True          # with EXACT: a node's first floor is the exact one over its pools merged into one (cheap)
MERGED_REL = 1e-2
REGIONS = True         # the sync floor of a stage spanning two regions where S stages cannot each sit in one
REGION_SPLIT = True    # with COUPLE: a single D's type-set node split by where its stages sit (mixregion)
MAX_PATTERNS = 512     # no region split where a node has more stage-to-region assignments than this
COARSE = True          # with EXACT: where the table is too large, the exact LP over the pools of one type merged
                       # across zones (mixcoarse: a relaxation) instead of the Lagrangian pricing, where that fits


@dataclass(frozen=True)
class SpaceBound:
    """No plan of Sailor's space iterates in ``iteration_s`` or less; attained at ``stages`` x D in
    [``d_lo``, ``d_hi``] at micro-batch ``mbs``. ``complete``: the best-first refinement finished (else the
    time limit stopped it; the bound is valid either way). ``nodes``: refinements done."""

    iteration_s: float
    stages: int
    mbs: int
    d_lo: int
    d_hi: int
    complete: bool
    nodes: int
    elapsed_s: float
    types: tuple = ()           # the GPU types of the node holding the bound (mixcouple; () : not split)
    regions: tuple = ()         # its stages' regions, or ("spans", "all" | s0, region of s0): a stage spans two
                                # regions (mixregion; (): not split)

    @property
    def iters_per_s(self) -> float:
        return 1.0 / self.iteration_s if self.iteration_s > 0 else math.inf


@dataclass
class _Node:
    unit: int
    d_lo: int
    d_hi: int
    floor: float
    ys: list = field(default_factory=list)      # indices into the unit's priced y's
    cg_at: float = -1.0                          # the T of this node's last column generation
    cg_runs: int = 0
    dp_at: float = -1.0                          # the floor of this node's last fill-table refinement
    dp_runs: int = 0
    exact: bool = False                          # the floor is the exact LP's (mixexact), nothing to refine
    types: tuple | None = None                   # the plans using exactly these GPU types (mixcouple); None: all
    region: tuple | None = None                  # ("spans", ...) or a stage-to-region pattern (mixregion); None: all

    def key(self):
        return (self.floor, self.unit, self.d_lo)


class _Unit:
    def __init__(self, tab: MixUnit, core=None, rings: dict | None = None) -> None:
        self.tab = tab
        self.priced: list[Priced] = []
        self.cols: dict[tuple, None] = {}
        self._usage = False                      # not built yet
        self._core = core                        # stage_core's tables (params, upd per group and stage)
        self._rings = rings if rings is not None else {}
        self._coupled: dict[tuple, object] = {}
        self._merged = None                      # (merged unit, its usage table), built once
        self._coarse = False                     # mixcoarse.Coarse of the exact table (None: none), not built yet
        self._kids: dict[tuple, int | None] = {}  # region children (mixregion): key -> index in the unit list

    def coupled(self, types: tuple | None, ctx: SimContext, cluster: ClusterSpec):
        """:func:`planner.search.mixcouple.coupled_floors` of the plans using exactly ``types`` (None: every plan
        of the unit, the TP coupling alone), built once (None: no such plan)."""
        if types not in self._coupled:
            from planner.search.mixcouple import coupled_floors, unit_types
            cp = coupled_floors(ctx, cluster, self.tab, self._core.params, self._core.upd,
                                tuple(unit_types(self.tab)) if types is None else types, self._rings,
                                types is not None)
            if cp is not None:      # the unit's own floors hold for every plan of it too
                cp = replace(cp, sync=np.maximum(cp.sync, self.tab.sync), upd=max(cp.upd, self.tab.upd))
            self._coupled[types] = cp
        return self._coupled[types]

    def coarse(self):
        """The unit the exact table is built on (:func:`planner.search.mixcoarse.coarse`: the unit itself where
        its table fits ``MAX_CELLS``, else, with :data:`COARSE`, with the pools of one type merged across zones);
        None: no exact table (EXACT off, or too large)."""
        if self._coarse is False:
            from planner.search.mixcoarse import coarse
            from planner.search.mixexact import MAX_CELLS
            c = coarse(self.tab, MAX_CELLS) if EXACT else None
            self._coarse = c if c is not None and (COARSE or c.how == "pools") else None
        return self._coarse

    def usage(self):
        """The exact pricing table of :mod:`planner.search.mixexact` over :meth:`coarse`'s unit (None: none),
        built once."""
        if self._usage is False:
            from planner.search.mixexact import usage_table
            c = self.coarse()
            self._usage = None if c is None else usage_table(c.unit)
        return self._usage

    def exact_floor(self, node: "_Node", rel: float, cp) -> float:
        """:func:`planner.search.mixexact.node_floor_exact` of ``node`` on :meth:`coarse`'s unit (``cp``: the
        coupled floors of the node's type set, their pools mapped onto the merged ones)."""
        from planner.search.mixcoarse import keep
        from planner.search.mixexact import node_floor_exact
        c = self.coarse()
        if cp is not None and c.how != "pools":
            cp = replace(cp, keep=keep(c, cp.keep))
        return node_floor_exact(c.unit, self.usage(), node.d_lo, node.d_hi, node.floor, rel, cp)

    def exact_ok(self) -> bool:
        """Whether the exact table is used for this unit (EXACT on and a table fits), without building it."""
        if self._usage is not False:
            return self._usage is not None
        return self.coarse() is not None

    def merged_floor(self, d_lo: int, d_hi: int, t_ref: float) -> float:
        """The exact floor with every pool merged into one (``mixexact.merged``: a relaxation, a small table)."""
        from planner.search.mixexact import merged, node_floor_exact, usage_table
        if self._merged is None:
            one = merged(self.tab)
            self._merged = (one, usage_table(one))
        one, table = self._merged
        if table is None:
            return t_ref
        return node_floor_exact(one, table, d_lo, d_hi, t_ref, MERGED_REL)

    def region_children(self, units: list, node: "_Node", ctx: SimContext, cluster: ClusterSpec
                        ) -> list["_Node"] | None:
        """The children of a single D's type-set node at its exact floor by where its plans' stages sit
        (:mod:`planner.search.mixregion`; the children's units are appended to ``units``): plans with a stage
        spanning two regions, either every stage ("spans", "all": this unit's tables, the sync floor raised to
        the largest stage's ``spanning_stages``) or not stage s0, which then sits in one region r0 ("spans", s0,
        r0: ``kmax`` masked at s0, the sync floor raised to the smallest over the other stages); and one child
        per stage-to-region pattern (no stage spans: ``kmax`` masked at every stage). The units with ``kmax``
        masked get their own coupled floors and exact tables (first floor: their pools merged into one).
        None: no split (fewer than two regions, too many patterns, or no exact table)."""
        from planner.search.mixregion import group_regions, pattern_kmax, region_patterns, spanning_stages, stage_kmax
        tab = self.tab
        keep = np.array([n[0] in node.types for n in tab.grp.names])
        pats = region_patterns(tab, keep, node.d_lo, MAX_PATTERNS)
        if pats is None or self.coarse() is None:
            return None
        span = spanning_stages(ctx, cluster, tab, self._core.params, self._rings, keep)      # [S, d_max + 1]
        reg = group_regions(tab)
        out = []
        key = ("spans", "all", node.types)
        if key not in self._kids:
            kid = _Unit(replace(tab, sync=np.maximum(tab.sync, span.max(axis=0))), self._core, self._rings)
            kid._coarse, kid._usage = self.coarse(), self.usage()        # the same chains: the same table
            units.append(kid)
            self._kids[key] = len(units) - 1
        out.append(_Node(self._kids[key], node.d_lo, node.d_hi, node.floor, types=node.types, region=key[:2]))
        masked = []
        for s0 in range(tab.s_num):
            other = span[np.arange(tab.s_num) != s0].min(axis=0) if tab.s_num > 1 else np.full(tab.d_max + 1, np.inf)
            for r0 in sorted({str(r) for r in reg[tab.usable[:, s0] & keep]}):
                masked.append((("spans", s0, r0), replace(tab, kmax=stage_kmax(tab, s0, r0),
                                                           sync=np.maximum(tab.sync, other))))
        masked += [(pat, replace(tab, kmax=pattern_kmax(tab, pat))) for pat in pats]
        for region, sub in masked:
            key = (region, node.types)
            if key not in self._kids:
                kid = _Unit(sub, self._core, self._rings)
                cp = kid.coupled(None, ctx, cluster)
                if cp is None:
                    self._kids[key] = None
                else:
                    kid.tab = replace(kid.tab, sync=np.maximum(kid.tab.sync, cp.sync), upd=max(kid.tab.upd, cp.upd))
                    units.append(kid)
                    self._kids[key] = len(units) - 1
            if self._kids[key] is not None:         # first floor: the unit's pools merged into one (cheap)
                kid = units[self._kids[key]]
                f = max(node.floor, kid.merged_floor(node.d_lo, node.d_hi, node.floor)) if MERGED else node.floor
                out.append(_Node(self._kids[key], node.d_lo, node.d_hi, f, types=node.types, region=region))
        return out

    def add(self, y: np.ndarray) -> int:
        self.priced.append(price(self.tab, y))
        for ch in self.priced[-1].chains:
            if ch[0] >= 0:
                self.cols.setdefault(tuple(int(g) for g in ch))
        return len(self.priced) - 1


def _largest_proven(proven, lo: float, hi: float, iters: int, rel: float) -> float:
    """Bisection for the largest T in [lo, hi] with ``proven(T)`` (monotone: true below some point), given
    ``proven(lo)``; returns the largest proven point found (itself a proven floor)."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if proven(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= rel * hi:
            break
    return lo


def node_floor(tab: MixUnit, pr: Priced, d_lo: int, d_hi: int, iters: int = 60) -> float:
    """The largest T (to bisection precision, always a proven one) at which the relaxation with ``pr.y`` shows
    no plan with D in [d_lo, d_hi] iterates within T; inf: none at any T."""
    sync = float(tab.sync[d_lo:d_hi + 1].min())
    base = sync + tab.upd
    if not math.isfinite(base):     # no stage can hold any such D (too few GPUs at its smallest TP)
        return math.inf
    cap_term = float(pr.y @ tab.grp.caps)
    n = float(tab.n_mb)

    def proven(t: float) -> bool:
        mu = float(value(tab, pr, np.array([t - base]))[0])
        if not np.isfinite(mu):
            return True
        phi = cap_term + (d_hi * mu if mu >= 0 else d_lo * mu)
        return phi < n * (1 - 1e-9)

    vmax = float(tab.comp[tab.usable].max())
    p2p = tab.p2p[np.isfinite(tab.p2p)]
    t_hi = base + (tab.n_mb - 1 + tab.s_num) * vmax + 2 * tab.s_num * (float(p2p.max()) if p2p.size else 0.0)
    t_hi = t_hi * 1.01 + 1e-9
    if proven(t_hi):
        # beyond t_hi the fill budgets only grow; with no budget at all (lambda = 0 alone) the price of a count
        # m is min over levels of Q(theta = 0): if even that proves it, no plan at any T, else t_hi is proven
        from planner.search.mixprice import classes
        _, cls = classes(tab)
        m = np.arange(1, tab.n_mb + 1)
        q0 = pr.q[..., 0].min(axis=1)[cls[np.minimum(m, tab.s_num) - 1]]          # [M]
        mu = float(np.max(np.where(np.isfinite(q0), m - q0, -np.inf)))
        if not np.isfinite(mu) or cap_term + (d_hi * mu if mu >= 0 else d_lo * mu) < n * (1 - 1e-9):
            return math.inf
        return t_hi
    if not proven(base):
        return 0.0
    return _largest_proven(proven, base, t_hi, iters, 1e-10)


def node_floor_dp(tab: MixUnit, pr: Priced, d_lo: int, d_hi: int, t_ref: float, iters: int = 40) -> float:
    """As :func:`node_floor` with the fill table of :mod:`planner.search.mixdp` (a tighter pricing), searched
    in [t_ref, DP_SPAN x t_ref] (t_ref: a proven floor); returns the largest proven T found."""
    from planner.search.mixdp import fill_table, value_dp
    base = float(tab.sync[d_lo:d_hi + 1].min()) + tab.upd
    if not math.isfinite(t_ref) or t_ref <= base:
        return t_ref
    hi = DP_SPAN * t_ref
    table = fill_table(tab, pr, t_ref - base, hi - base)
    cap_term = float(pr.y @ tab.grp.caps)
    n = float(tab.n_mb)

    def proven(t: float) -> bool:
        mu = value_dp(tab, pr, table, t - base)
        if not np.isfinite(mu):
            return True
        return cap_term + (d_hi * mu if mu >= 0 else d_lo * mu) < n * (1 - 1e-9)

    if proven(hi):
        return hi
    return _largest_proven(proven, t_ref, hi, iters, 1e-9)


def column_y(unit: _Unit, t: float, d_lo: int, d_hi: int) -> np.ndarray | None:
    """Pool prices from the restricted master LP max sum_c n_c m_c(T') s.t. d_lo <= sum n_c <= d_hi,
    sum n_c u_c <= caps, over columns added by pricing (scipy.optimize.linprog, HiGHS). None: the LP failed."""
    try:
        from scipy.optimize import linprog
    except ImportError:         # the "lp" extra is not installed: no prices beyond y = 0 (still a valid bound)
        log.warning("scipy is not installed: the bound on Sailor's space uses y = 0 only (looser)")
        return None
    tab = unit.tab
    t_prime = t - float(tab.sync[d_lo:d_hi + 1].min()) - tab.upd
    caps = tab.grp.caps.astype(float)
    y = None
    for _ in range(CG_ROUNDS):
        cols = [np.array(c) for c in unit.cols]
        m = np.array([chain_count(tab, c, t_prime) for c in cols], dtype=float)
        keep = m >= 1
        cols = [c for c, k in zip(cols, keep) if k]
        m = m[keep]
        u = np.array([usage(tab, c) for c in cols]).T                  # [P, C]
        # a column using no pool and paying N micro-batches keeps the LP feasible when the pools cannot
        # hold d_lo pipelines of the known chains (its duals are still pool prices y >= 0)
        u = np.hstack([u, np.zeros((len(caps), 1))])
        m = np.append(m, -float(tab.n_mb))
        cols = cols + [None]
        a_ub = np.vstack([u, np.ones((1, len(cols))), -np.ones((1, len(cols)))])
        b_ub = np.concatenate([caps, [d_hi, -d_lo]])
        res = linprog(-m, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
        if res.status != 0:
            return y
        y = np.maximum(-res.ineqlin.marginals[:len(caps)], 0.0)
        before = len(unit.cols)
        pr = price(tab, y)
        for ch in pr.chains:
            if ch[0] >= 0:
                unit.cols.setdefault(tuple(int(g) for g in ch))
        if len(unit.cols) == before:
            break
    return y


def sailor_space_bound(ctx: SimContext, cluster: ClusterSpec, gbs: int, space: SearchSpace | None = None,
                       time_limit_s: float | None = 120.0) -> SpaceBound | None:
    """The bound of the module docstring (None: no (S, b) has a group fitting every stage)."""
    from planner.baselines.spaces import PLANNERS
    t0 = time.perf_counter()
    space = space or PLANNERS["sailor-space"]
    cluster = cluster.nonempty()
    tables = Tables(ctx, replace(space, recompute=(False,), distributed_optimizer=(False,)))
    options = cluster_options(ctx, cluster, space)
    mbs_all = sorted({m for o in options.values() for m, _ in o if gbs % m == 0})
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    units: list[_Unit] = []
    heap: list = []
    tps = sorted({t for o in options.values() for _, t in o})
    memo = MixMemo()
    for s_num in range(1, max_s + 1):
        for mbs, tp_min in ((m, t) for m in mbs_all for t in tps):
            tab = mix_unit(ctx, cluster, tables, options, gbs, s_num, mbs, space.precision, tp_min, memo)
            if tab is None:
                continue
            unit = _Unit(tab, memo.core[(s_num, mbs)][0], memo.rings)
            cp = unit.coupled(None, ctx, cluster) if COUPLE else None
            if cp is not None:      # the sync and step floors coupled with each stage's smallest TP (mixcouple)
                unit.tab = tab = replace(tab, sync=cp.sync, upd=cp.upd)
            if REGIONS:             # a stage spanning two regions where the stages cannot each sit in one
                from planner.search.mixregion import region_sync
                unit.tab = tab = replace(tab, sync=np.maximum(tab.sync, region_sync(ctx, cluster, tab,
                                                                                   unit._core.params, memo.rings)))
            units.append(unit)
            if MERGED and unit.exact_ok():      # the merged pools' exact floor orders the heap (no pricing)
                base = float(tab.sync[1:].min()) + tab.upd
                node = _Node(len(units) - 1, 1, tab.d_max, unit.merged_floor(1, tab.d_max, base))
            else:
                i = unit.add(np.zeros(len(tab.grp.caps)))
                node = _Node(len(units) - 1, 1, tab.d_max, node_floor(tab, unit.priced[i], 1, tab.d_max), [i])
            heapq.heappush(heap, (node.key(), id(node), node))
    if not heap:
        return None
    done = 0
    complete = True
    while True:
        _, _, node = heapq.heappop(heap)
        unit = units[node.unit]
        tab = unit.tab
        if not math.isfinite(node.floor):
            complete = True
            break
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            complete = False
            break
        done += 1
        if not node.exact and unit.exact_ok() and unit.usage() is not None:
            # a D range is split later anyway: its floor only orders the heap, to 0.1 %
            rel = 1e-5 if node.d_lo == node.d_hi else 1e-3
            cp = None if node.types is None else unit.coupled(node.types, ctx, cluster)
            if cp is None and node.types is not None:       # no plan of the node's types
                node.floor, node.exact = math.inf, True
                heapq.heappush(heap, (node.key(), id(node), node))
                continue
            node.floor = max(node.floor, unit.exact_floor(node, rel, cp))
            node.exact = True
            heapq.heappush(heap, (node.key(), id(node), node))
            continue
        if node.exact:
            if node.d_lo < node.d_hi:
                edges = np.unique(np.linspace(node.d_lo, node.d_hi + 1, SPLIT + 1).astype(int))
                for lo, hi in zip(edges[:-1], edges[1:] - 1):
                    child = _Node(node.unit, int(lo), int(hi), node.floor, list(node.ys), types=node.types)
                    heapq.heappush(heap, (child.key(), id(child), child))
                continue
            if COUPLE and node.types is None:
                # a single D at the exact floor: one child per set of GPU types its plans use (each plan uses
                # exactly one), with the coupled sync and step floors (mixcouple)
                from planner.search.mixcouple import type_sets
                for types in type_sets(tab):
                    cp = unit.coupled(types, ctx, cluster)
                    f = math.inf if cp is None else max(node.floor, float(cp.sync[node.d_lo]) + cp.upd)
                    child = _Node(node.unit, node.d_lo, node.d_hi, f, types=types)
                    heapq.heappush(heap, (child.key(), id(child), child))
                continue
            if REGION_SPLIT and COUPLE and node.types is not None and node.region is None:
                kids = unit.region_children(units, node, ctx, cluster)
                if kids is not None:
                    for child in kids:
                        heapq.heappush(heap, (child.key(), id(child), child))
                    continue
            break       # a single D (and type set) at the exact LP's floor: the smallest floor left
        if node.cg_at < 0 or (node.floor > node.cg_at * (1 + 1e-6) and node.cg_runs < CG_REPEAT):
            # a little above the floor: at it, the chains that set it are borderline infeasible and the LP
            # would not see them (alternating ahead factors)
            y = column_y(unit, node.floor * (1 + CG_AHEAD[node.cg_runs % len(CG_AHEAD)]), node.d_lo, node.d_hi)
            node.cg_at, node.cg_runs = node.floor, node.cg_runs + 1
            if y is not None:
                i = unit.add(y)
                node.ys.append(i)
                node.floor = max(node.floor, node_floor(tab, unit.priced[i], node.d_lo, node.d_hi))
            heapq.heappush(heap, (node.key(), id(node), node))
            continue
        if node.ys and (node.dp_at < 0 or (node.floor > node.dp_at * (1 + 1e-6) and node.dp_runs < CG_REPEAT)):
            node.dp_at, node.dp_runs = node.floor, node.dp_runs + 1
            node.floor = max(node.floor, node_floor_dp(tab, unit.priced[node.ys[-1]], node.d_lo, node.d_hi,
                                                       node.floor))
            heapq.heappush(heap, (node.key(), id(node), node))
            continue
        if node.d_lo < node.d_hi:
            edges = np.unique(np.linspace(node.d_lo, node.d_hi + 1, SPLIT + 1).astype(int))
            for lo, hi in zip(edges[:-1], edges[1:] - 1):
                f = max([node.floor] + [node_floor(tab, unit.priced[i], int(lo), int(hi)) for i in node.ys])
                child = _Node(node.unit, int(lo), int(hi), f, list(node.ys))
                heapq.heappush(heap, (child.key(), id(child), child))
            continue
        break           # a single D, its floor stable under column generation: the smallest floor left
    log.info("sailor-space bound %.6g s at S=%d b=%d D=%d..%d (%d refinements, complete=%s)", node.floor,
             tab.s_num, tab.mbs, node.d_lo, node.d_hi, done, complete)
    return SpaceBound(node.floor, tab.s_num, tab.mbs, node.d_lo, node.d_hi, complete, done,
                      time.perf_counter() - t0, node.types or (), node.region or ())
