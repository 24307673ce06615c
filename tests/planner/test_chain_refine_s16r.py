"""Segment-split refinement of chain plans (docs/PLANNER.md 2.7, ``chain_splits == "refine"``): never worse than
the even split's search, every refined plan scored as ``simulate`` scores it, on small cases the best segment
split of the refined chain's shape by brute force, Fig8b 32+96's better chain found; the flag checked. Session 17
(s17r): the pruned estimates equal every chain's estimate written with loops, and the first D scored skips no D
that could push a plan."""
from __future__ import annotations

import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.chains import score_chain
from planner.search.netvec import LinkCache
from planner.search.space import CHAIN_SPLITS
from planner.search.tasks import Tables
from planner.simulator import simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_chain_splits_s15c import _case, _plan, _runs, _splits_by_hand  # noqa: E402
from test_planner_bruteforce import chain_count_choices  # noqa: E402
from test_planner_bruteforce import sailor_ctx as sailor_opt  # noqa: E402,F401 - the OPT-350 fixture

A, V = "A100-40", "V100-16"
KW = dict(max_stages=3, mbs_options=(1,), tp_options=(1, 2), recompute=(False,))


def _key(objective, est) -> float:
    ok = est.fits_in_memory and objective.allows(est.iteration_time_s, est.cost_per_iteration_usd, est.num_gpus)
    return objective.key(est.iteration_time_s, est.cost_per_iteration_usd) if ok else float("inf")


def _shape_best(ctx, cluster, gbs, objective, cand) -> float:
    """min objective key (``simulate``) over every segment split of ``cand``'s chain shape (its groups per
    stage, its runs) x D x micro-batch counts, its micro-batch size and optimizer settings."""
    seq = [(g, t, z) for g, z, t in cand.chain]
    need: dict[tuple[str, str], int] = {}
    for g, t, z in seq:
        need[(g, z)] = need.get((g, z), 0) + t
    d_max = min(min(cluster.count(g, z) // n for (g, z), n in need.items()), gbs // cand.mbs)
    best = float("inf")
    for split in _splits_by_hand(ctx.model.num_layers, _runs(seq)):
        for d in range(1, d_max + 1):
            for counts in chain_count_choices(gbs // cand.mbs, d):
                est = simulate(_plan(split, seq, d, cand.mbs, gbs, counts, cand.recompute,
                                     cand.distributed_optimizer), ctx)
                best = min(best, _key(objective, est))
    return best


@pytest.mark.parametrize("seed,wins", [(5, True), (23, True), (25, True), (29, True), (0, False)])
def test_refine_never_worse_scored_as_simulate_best_split_of_its_shape(seed, wins):
    """Seeded small clusters (the segment search's cases): the refined search's best is never worse than the
    even split's, its key is ``simulate``'s, and where it returns a chain with its own run totals (``wins``:
    the case exercises one), no segment split of that chain shape (any D, any micro-batch counts, by brute
    force with ``simulate``) scores better."""
    ctx, cluster, gbs, objective, dist = _case(seed)
    kw = dict(KW, distributed_optimizer=dist)
    even = plan_search(ctx, cluster, gbs, objective, SearchSpace(**kw)).best
    ref = plan_search(ctx, cluster, gbs, objective, SearchSpace(chain_splits="refine", **kw)).best
    assert even is not None
    assert ref.key <= even.key and wins == (ref.key < even.key)
    est = simulate(build_plan(ref, ctx.model.num_layers, gbs, None), ctx)
    assert _key(objective, est) == pytest.approx(ref.key, rel=1e-9)
    if wins:        # a refined chain: two or three runs, its split the best of its shape
        assert ref.chain and 2 <= len(_runs(ref.chain)) <= 3
        assert ref.key == pytest.approx(_shape_best(ctx, cluster, gbs, objective, ref), rel=1e-9)


def test_fig8b_32_96_refine_finds_the_split_witness(sailor_opt):
    """Fig8b 32+96 (OPT-350, GBS 1024, S <= 4): the even split's best is beaten by the refinement, whose plan
    scores at least as well as the witness V100 (4 layers) x 3 -> A100 (12), TP 1, 32 pipelines, distributed
    optimizer (:func:`score_chain` with that split) and as ``simulate`` scores it."""
    ctx, z, gbs = sailor_opt, "us-central1-a", 1024
    cluster = parse_gpus(f"{A}@{z}=32,{V}@{z}=96", ctx.catalog)
    kw = dict(max_stages=4, mbs_options=(1,), recompute=(False,))
    even = plan_search(ctx, cluster, gbs, Objective(), SearchSpace(**kw)).best
    ref = plan_search(ctx, cluster, gbs, Objective(), SearchSpace(chain_splits="refine", **kw)).best
    witness = score_chain(ctx, cluster, Tables(ctx, SearchSpace(**kw)), LinkCache(ctx),
                          ((V, z, 1),) * 3 + ((A, z, 1),), 32, 1, gbs, distributed_optimizer=True,
                          layers=(4, 4, 4, 12))
    assert witness is not None and witness.key < even.key
    assert ref.key <= witness.key * (1 + 1e-12)
    est = simulate(build_plan(ref, ctx.model.num_layers, gbs, None), ctx)
    assert est.fits_in_memory and est.iteration_time_s == pytest.approx(ref.iteration_s, rel=1e-9)


def test_chain_splits_flag_one_list_and_defaults(capsys):
    """PlanRequest and SearchSpace accept exactly :data:`CHAIN_SPLITS`; both default to the even split (the
    refinement is off by default); a bad ``--chain-splits`` is one line naming the flag and the value, exit 2."""
    from planner.api import PlanRequest
    from planner.cli_plan import main
    from planner.errors import InputError
    cluster = parse_gpus(f"{A}@z=2", GPUCatalog())
    for value in CHAIN_SPLITS:
        assert SearchSpace(chain_splits=value).chain_splits == value
        assert PlanRequest(cluster=cluster, global_batch_size=4, chain_splits=value).chain_splits == value
    with pytest.raises(InputError):
        SearchSpace(chain_splits="refined")
    assert PlanRequest(cluster=cluster, global_batch_size=4).chain_splits == "even"     # off by default (2.7)
    assert SearchSpace().chain_splits == "even"
    assert main(["--model", "opt-350m", "--gpus", f"{A}@z=2", "--gbs", "4", "--chain-splits", "refined"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--chain-splits" in err[0] and "'refined'" in err[0]


# --- session 17 (s17r): the refinement's pruning (split floors, sparse estimates, first D) -------------------

def _unit_cases():
    """(ctx, tables, unit, objective) of seeded small clusters with two GPU types: every chain unit of S <= 4."""
    from planner.search.chains import chain_units
    from planner.search.tasks import cluster_options
    for seed in (5, 23, 25, 29, 0, 3):
        ctx, cluster, gbs, objective, dist = _case(seed)
        if len({p.gpu_type for p in cluster.pools}) < 2:
            continue
        space = SearchSpace(**dict(KW, max_stages=4, distributed_optimizer=dist))
        tables = Tables(ctx, space)
        for unit in chain_units(ctx, cluster, cluster_options(ctx, cluster, space), gbs, space):
            yield ctx, tables, unit, objective


def _estimate_by_hand(tables, unit, objective, split, seg, groups) -> float:
    """:func:`chainrefine._estimates`' estimate of one chain written with loops: group groups[i] (a group
    index) on segment i of ``split`` ([S] layers, ``seg`` [S] its stages' segments)."""
    import math
    s_num, _, mbs, n_mb, grp, d_cap, rc, dist = unit
    counts = np.array([split], dtype=np.int64)
    comp, upd, dmin, fits, gpu, usd = [], [], [], [], 0, 0.0
    used: dict[int, int] = {}
    for s in range(s_num):
        gi = groups[seg[s]]
        g, _, tp = grp.names[gi]
        arr = tables.raw_arrays(g, tp, mbs, counts, rc)
        comp.append(float(arr.compute_s[0, s]))
        upd.append(float(arr.update_s[0, s]))
        if dist:
            dmin.append(int(tables.dist_dmin(g, tp, mbs, s_num, rc, 1, counts, per_stage=True)[0, s]))
            fits.append(dmin[-1] <= d_cap)
        else:
            dmin.append(1)
            fits.append(bool(arr.memory_bytes[0, s] <= tables.table(g, tp, mbs).usable_bytes))
        gpu += tp
        usd += tp * float(grp.usd_per_s[gi])
        used[int(grp.pool[gi])] = used.get(int(grp.pool[gi]), 0) + tp
    room = min([n_mb, d_cap] + [int(grp.caps[p]) // u for p, u in used.items()])
    dd = max(room, 1)
    it = (math.ceil(n_mb / dd) - 1) * max(comp) + sum(comp) + (max(upd) / dd if dist else max(upd))
    cost = dd * usd * it
    if not (all(fits) and room >= max(dmin) and objective.allows(it, cost, dd * gpu)):
        return float("inf")
    return float(objective.key(it, cost))


def test_refine_estimates_pruned_equal_every_chain_by_hand():
    """``_estimates`` with a cutoff (none, and between the 3rd and 4th, and the 12th and 13th distinct finite
    estimates of the unit) returns exactly the chains whose estimate, written with loops over every split
    of every cut (listed by hand), every sequence of one group per (type, TP) with adjacent groups different,
    is at most the cutoff: the same estimates (to 1e-12), ordered by estimate; the split floors and the
    (segment, group) floors drop no chain that enters. Seeded small clusters, two and three segments."""
    from itertools import combinations
    from planner.search.chainrefine import _estimates
    checked = 0
    for ctx, tables, unit, objective in _unit_cases():
        s_num, even, _, _, grp, *_ = unit
        L = ctx.model.num_layers
        reps = sorted({(g, tp): gi for gi, (g, _, tp) in reversed(list(enumerate(grp.names)))}.values())
        for n_seg in range(2, min(3, s_num) + 1):
            hand = {}
            for cut in combinations(range(1, s_num), n_seg - 1):
                bounds = (0,) + cut + (s_num,)
                seg = [sum(b <= s for b in cut) for s in range(s_num)]
                runs = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
                for split in _splits_by_hand(L, runs):
                    if split == tuple(int(x) for x in even[0]):
                        continue
                    for groups in product(reps, repeat=n_seg):
                        if any(a == b for a, b in zip(groups, groups[1:])):
                            continue
                        e = _estimate_by_hand(tables, unit, objective, split, seg, groups)
                        if np.isfinite(e):      # a chain: its split and its group per stage
                            hand[(split, tuple(groups[i] for i in seg))] = e
            values = sorted(set(hand.values()))
            cutoffs = [np.inf] + [(values[i] + values[i + 1]) / 2 for i in (2, 11) if i + 1 < len(values)]
            for cutoff in cutoffs:
                got = _estimates(ctx, tables, unit, objective, n_seg, cutoff)
                want = {k: v for k, v in hand.items() if v <= cutoff}
                if got is None:
                    assert not want
                    continue
                counts, seg_of, est, ks, groups = got
                pairs = {(tuple(int(x) for x in counts[k]), tuple(int(gr[i]) for i in seg_of[k])): e
                         for e, k, gr in zip(est, ks, groups)}
                assert len(pairs) == len(est) and set(pairs) == set(want)
                assert all(pairs[k] == pytest.approx(want[k], rel=1e-12) for k in want)
                assert list(est) == sorted(est)
                checked += len(want)
    assert checked > 100


def test_refine_first_d_skips_no_pushable_d():
    """``_first_d``: on the chains the refinement scores in seeded small cases, at every D below the first D it
    returns, every chain's exact key (:func:`planner.search.chains.iterate_d`, sync and all) is above the
    threshold given; at that D some chain's key without the sync is at most it (checked through the keys:
    the exact key >= that bound)."""
    from planner.search.chainrefine import _first_d
    from planner.search.chains import iterate_d, score_chains
    from planner.search.chaintab import Linked
    checked = 0
    for ctx, tables, unit, objective in _unit_cases():
        s_num, counts, mbs, n_mb, grp, d_cap, rc, dist = unit
        linked = Linked(ctx, LinkCache(ctx), tables, grp, mbs, counts, rc, d_cap, tables.space.precision,
                        dist)
        seqs = [np.array(q) for q in product(range(len(grp.names)), repeat=s_num)]
        gs = np.array([q for q in seqs if linked.tab.fits[q, np.arange(s_num)].all()], dtype=np.int64)
        if not len(gs):
            continue
        sc = score_chains(ctx, linked.tab, grp, gs, n_mb)
        keys = {d: k for d, _, _, _, _, k in iterate_d(ctx, sc, linked.full(), n_mb, s_num, objective, False)}
        finite = sorted({float(x) for k in keys.values() for x in k if np.isfinite(x)})
        for thr in finite[::max(1, len(finite) // 5)]:
            d_from = _first_d(ctx, linked.tab, grp, gs, n_mb, s_num, objective, thr)
            assert all(not (k <= thr).any() for d, k in keys.items() if d < (d_from or np.inf))
            assert d_from >= 1      # thr is some chain's exact key: its bound is at most it
            checked += 1
    assert checked > 10
