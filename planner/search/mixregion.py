"""A sync floor for plans too large for one region per stage (session 20, helper s20b).

Contract: for one (S, b, smallest TP tau) unit of :mod:`planner.search.mixtab`, :func:`region_sync` returns
[d_max + 1] a floor on the gradient sync of EVERY plan of the unit with D replicas per stage (0 where it
proves nothing). Each stage's D replicas have TP >= tau, so a stage holds >= D x tau GPUs; a stage whose
replicas all sit in one region r takes them from r's pools, so if every stage sat in one region, the stages in
region r would number at most floor(C_r / (D tau)) (C_r: the GPUs of r's pools) and
sum_r floor(C_r / (D tau)) >= S. Where that fails, some stage has replicas in >= 2 regions, and its sync (a flat
ring, whose time is the largest over its edges, or a hierarchical one, whose leaders' ring spans the same
regions) has an edge between two regions: it is >= mixtab's stage floor with only the links between regions
as cross-zone ones (``stage_sync_floor(..., spans_regions=True)``). The stage is unknown, so the minimum over
the stages is taken. Only with ``dp_sync_waits_for_all`` (the plan's sync is the max over its stages) and
without per-replica node sizes (mixtab's link floors do not see zones). docs/PLANNER.md 7.1 item 11,
7.2 item 11.

:func:`region_patterns` / :func:`pattern_kmax` / :func:`spanning_sync` split one node of
:mod:`planner.search.mixbound` by where its plans' stages sit: either some stage has replicas in >= 2 regions
(its sync is >= :func:`spanning_sync`), or every stage sits in one region, and the plan has one assignment of
stages to regions (a pattern) within the regions' GPUs, its chains using at stage s only groups of its
region (the unit with ``kmax`` masked). The children cover every plan of the node.

On Fig10 (four us-central1 zones and us-west1-b, 32 A100 each) the bound sat at S 2 x D 77 (154 GPUs: more
than us-central1's 128), whose floor took intra-region syncs; a plan there pays a ring through us-west1-b.
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.plan import region_of
from planner.search.mixtab import MixUnit, stage_sync_floor
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


def stages_fit_regions(tab: MixUnit, d: np.ndarray, tau: int) -> np.ndarray:
    """[len(d)] whether S stages of ``d`` x ``tau`` GPUs each can each sit in one region within the regions'
    GPUs (every pool of the unit's groups counted: an over-estimate of what a plan may use)."""
    grp = tab.grp
    caps: dict[str, int] = {}
    seen: set[int] = set()
    for g, name in enumerate(grp.names):
        p = int(grp.pool[g])
        if p not in seen:
            seen.add(p)
            caps[region_of(name[1])] = caps.get(region_of(name[1]), 0) + int(grp.caps[p])
    need = np.maximum(d * tau, 1)
    room = sum(np.floor_divide(c, need) for c in caps.values())
    return room >= tab.s_num


def region_sync(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, params: np.ndarray, rings: dict
                ) -> np.ndarray:
    """The floor of the module docstring; ``params`` [G, S]: per replica parameters per GPU (``stage_core``'s)."""
    out = np.zeros(tab.d_max + 1)
    if not _applies(ctx, tab):
        return out
    tau = int(tab.grp.tp[tab.usable.any(axis=1)].min())
    d = np.arange(tab.d_max + 1)
    spans = (d >= 2) & ~stages_fit_regions(tab, d, tau)
    if not spans.any():
        return out
    return np.where(spans, spanning_sync(ctx, cluster, tab, params, rings), 0.0)


def _applies(ctx: SimContext, tab: MixUnit) -> bool:
    return (not ctx.replica_node_gpus and ctx.settings.dp_sync_waits_for_all and bool(tab.usable.any())
            and len({region_of(n[1]) for n in tab.grp.names}) >= 2)


def spanning_sync(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, params: np.ndarray, rings: dict,
                  keep: np.ndarray | None = None) -> np.ndarray:
    """[d_max + 1] floor on the sync of a plan of the unit with some stage whose replicas sit in >= 2 regions
    (the stage unknown: the minimum over the stages of :func:`spanning_stages`)."""
    return spanning_stages(ctx, cluster, tab, params, rings, keep).min(axis=0)


def spanning_stages(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, params: np.ndarray, rings: dict,
                    keep: np.ndarray | None = None) -> np.ndarray:
    """[S, d_max + 1] per stage s, a floor on the sync of a plan whose stage s has replicas in >= 2 regions
    (:func:`_spanning_stage`; inf where s has no usable group, 0 at D < 2); ``keep`` [G]: the groups a plan
    may use (None: all)."""
    out = np.full((tab.s_num, tab.d_max + 1), np.inf)
    for s in range(tab.s_num):
        use = tab.usable[:, s] if keep is None else tab.usable[:, s] & keep
        if use.any():
            out[s] = _spanning_stage(ctx, cluster, tab, use, params[:, s], rings)
    out[:, :2] = 0.0
    return out


def stage_kmax(tab: MixUnit, s: int, region: str) -> np.ndarray:
    """The unit's ``kmax`` with every group outside ``region`` unusable at stage ``s`` (a plan whose stage s sits
    in that region)."""
    out = tab.kmax.copy()
    out[group_regions(tab) != region, s] = 0
    return out


def _spanning_stage(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, use: np.ndarray, params_s: np.ndarray,
                    rings: dict) -> np.ndarray:
    """[d_max + 1] floor on the sync of a stage of the groups ``use`` whose replicas sit in >= 2 regions, coupled
    with the stage's smallest TP k as :mod:`planner.search.mixcouple` does (the ring's gradient is >= a TP-k
    member's, its members have TP >= k and hold >= D x k GPUs): the minimum over k of mixtab's floor over the
    groups of TP >= k at the fewest parameters of a TP-k group, with only the links between regions as
    cross-zone ones."""
    grp = tab.grp
    best = np.full(tab.d_max + 1, np.inf)
    for k in sorted({int(t) for t in grp.tp[use]}):
        at_k = use & (grp.tp == k)
        grad_b = float(F.grad_bytes(params_s[at_k].min()))
        best = np.minimum(best, stage_sync_floor(ctx, grp, use & (grp.tp >= k), grad_b, tab.d_max, cluster, rings,
                                                 k, spans_regions=True))
    return best


def group_regions(tab: MixUnit) -> np.ndarray:
    """[G] each group's region."""
    return np.array([region_of(n[1]) for n in tab.grp.names], dtype=object)


def region_patterns(tab: MixUnit, keep: np.ndarray, d: int, most: int) -> list[tuple[str, ...]] | None:
    """Every assignment of the S stages to regions that a plan of the unit with D = ``d`` and every stage in one
    region can have: stage s's region has a usable group of ``keep`` [G] at s, and the stages in region r hold
    >= D x tau GPUs each within r's pools of ``keep``'s groups. None: more than ``most`` of them, or fewer than
    two regions (no split)."""
    grp = tab.grp
    reg = group_regions(tab)
    regions = sorted({str(r) for r in reg[keep]})
    if len(regions) < 2 or not tab.usable.any():
        return None
    tau = int(grp.tp[tab.usable.any(axis=1)].min())
    caps = {r: int(sum(grp.caps[p] for p in set(grp.pool[keep & (reg == r)].tolist()))) for r in regions}
    ok = [[r for r in regions if (tab.usable[:, s] & keep & (reg == r)).any()] for s in range(tab.s_num)]
    out: list[tuple[str, ...]] = []

    def walk(prefix: tuple, room: dict) -> bool:
        if len(prefix) == tab.s_num:
            out.append(prefix)
            return len(out) <= most
        for r in ok[len(prefix)]:
            if room[r] >= d * tau:
                room[r] -= d * tau
                going = walk(prefix + (r,), room)
                room[r] += d * tau
                if not going:
                    return False
        return True

    return out if walk((), dict(caps)) else None


def pattern_kmax(tab: MixUnit, pattern: tuple[str, ...]) -> np.ndarray:
    """The unit's ``kmax`` with every group outside stage s's region ``pattern[s]`` unusable at s."""
    reg = group_regions(tab)
    inside = reg[:, None] == np.array(pattern)[None, :]
    return np.where(inside, tab.kmax, 0)
