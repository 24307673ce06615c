"""The search's bounds on tasks that give a GPU type two TP degrees, against exhaustive optima (issue 13 item 1;
docs/PLANNER.md 10.8, helper s20u).

A two-TP task (:class:`planner.search.twotp.TwoTpTask`) is handed to each bound as a combo of (type, TP)
pseudo-types (``TwoTpTask.pairs()``), the way the wired search builds it. Its exhaustive optimum is every fitting
split of ``Tables.splits`` x every count vector under the joint pool caps (``twotp.task_rows``), scored by the
search's exact row scorer (the evaluator of ``twotp.task_best``; s19p's tests show it equals an independent
``simulate`` brute force). Every bound must be <= that optimum, under the throughput, cost and value objectives:

- the unit bound (:func:`planner.search.unitbound.unit_bounds`) with ``two_tp == 2`` (the knapsack of 10.8) and
  its task capacity floor (:func:`planner.search.unitbound.task_floors`); a pinned case where the old per-pool
  ``max_o cap_p(o) n_o(it)`` form exceeds a two-TP plan's iteration time, so the fix is needed;
- the exact and objective task floors (``taskfloor``, ``costfloor``);
- the split keep rule (``midlevels.task_keep``) and split dominance (``taskrun._split_criteria`` +
  ``rows.pareto_min``): the splits they keep hold the task's optimum;
- the row floors: split-free (``rowfloor``), per split (``taskrun.cheap_keys``), zone-aware (``rowzone``, with
  columns (zone, type, TP) as the wired search passes them) and the row-class table
  (``rowclass.class_floor_table`` from per-pseudo-type terms): <= the exact key of every row;
- water-filled pairs (``twotp.type_rows(water_filled=True)``) against free counts under class links (the extension
  of docs/PLANNER.md 9, Theorem 2, to two TP degrees sharing a pool).
"""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan
from planner.search.caps import task_dmax
from planner.search.costfloor import objective_task_floor
from planner.search.midlevels import task_keep
from planner.search.netvec import LinkCache
from planner.search.pools import score_batch
from planner.search.rowclass import class_floor_table, class_type_terms
from planner.search.rowfloor import floor_keys, pool_floors
from planner.search.rows import pareto_min
from planner.search.rowzone import zone_row_terms, zone_terms
from planner.search.taskbound import task_bound
from planner.search.taskrun import ANY_SPLIT, SAME_STAGE_BYTES, _split_criteria, _stage_bytes_class, cheap_keys, \
    row_terms, split_dominance_rule
from planner.search.tasks import Tables, Task, cluster_options
from planner.search.twotp import (TwoTpTask, column_models, enumerate_two_tp_tasks, task_best, task_rows, two_tp_search,
                                   type_rows)
from planner.search.unitbound import (makespan_floor, mix_vertices, mixed_makespan_floor, pair_hull, task_floors,
                                      unit_bounds)
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext
from tests.planner.test_planner_bruteforce import bf_ctx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from two_tp_pools_s19t import BF_TYPES, random_cluster  # noqa: E402

MBS, TPS = (1, 2), (1, 2, 4)
KINDS = ("throughput", "cost", "value")
REL = 1e-12


def space(two: bool, max_stages: int = 3) -> SearchSpace:
    return SearchSpace(max_stages=max_stages, mbs_options=MBS, tp_options=TPS, recompute=(False,),
                       distributed_optimizer=(False,), chain_segments=1, two_tp=2 if two else 1)


@dataclass
class TaskScores:
    """One task's exhaustive scores: its pseudo-type shell, rows, columns, and per fitting split the pool models
    and the exact key of every row under each objective."""

    task: TwoTpTask
    shell: Task
    D: np.ndarray
    cols: list
    splits: np.ndarray
    models: dict
    keys: dict          # kind -> [K splits, R rows]

    def best(self, kind: str) -> float:
        return float(self.keys[kind].min()) if self.keys[kind].size else np.inf

    def split_best(self, kind: str) -> np.ndarray:
        return self.keys[kind].min(axis=1)


def exhaustive(ctx, cluster, gbs: int, sp: SearchSpace, objectives: dict, max_tps: int = 2):
    """(tables, cache, [TaskScores]) of every task of ``twotp.enumerate_two_tp_tasks`` with a fitting split and a
    row (:func:`twotp.task_best`'s rows and splits, every objective at once)."""
    options = cluster_options(ctx, cluster, sp)
    tables, cache = Tables(ctx, sp, options, cluster), LinkCache(ctx)
    out = []
    for task in enumerate_two_tp_tasks(ctx, cluster, tables, options, gbs, sp, max_tps):
        n_mb = gbs // task.mbs
        D, cols = task_rows(cluster, task, n_mb)
        fits = np.logical_and.reduce([tables.arrays(g, t, task.mbs, task.num_stages, task.recompute).fits
                                      for g, t in task.pairs()])
        ks = np.nonzero(fits)[0]
        if len(D) == 0 or len(ks) == 0:
            continue
        models, keys = {}, {kind: np.full((len(ks), len(D)), np.inf) for kind in objectives}
        for i, k in enumerate(ks):
            pools = column_models(ctx, tables, cache, task, cols, int(k), n_mb)
            models[int(k)] = dict(zip(cols, pools))
            sc = score_batch(ctx, cache, [(pools, D)], n_mb, exact=True)[0]
            for kind, obj in objectives.items():
                ok = obj.allows(sc.iteration_s, sc.cost_usd, sc.gpus) & np.isfinite(sc.iteration_s)
                keys[kind][i] = np.where(ok, obj.key(sc.iteration_s, sc.cost_usd), np.inf)
        shell = Task(task.num_stages, task.mbs, task.pairs(), 0.0, task.recompute, False,
                     task_dmax(cluster, task.pairs(), task.num_stages, n_mb))
        out.append(TaskScores(task, shell, D, cols, ks, models, keys))
    return tables, cache, out


def clusters(seed: int, n: int):
    rng = random.Random(seed)
    return [random_cluster(rng, BF_TYPES, ("us-a", "us-b")) for _ in range(n)]


OBJECTIVES = {kind: Objective(kind) for kind in KINDS}
THREE_ZONES = [("A100-40@us-a=4,A100-40@us-b=3,A100-40@us-c=5", 8), ("V100-16@us-a=6,V100-16@us-b=4,H100-80@us-c=3", 8),
               ("H100-80@us-a=3,H100-80@us-b=5,A100-80@us-c=4", 16), ("GH-96@us-a=4,GH-96@us-b=2,GH-96@us-c=3", 16)]
CLUSTERS = clusters(20, 16) + THREE_ZONES


@pytest.fixture(scope="module")
def solved():
    """Every cluster of :data:`CLUSTERS` solved exhaustively (shared by the tests below)."""
    ctx, catalog = bf_ctx()
    out = []
    for gpus, gbs in CLUSTERS:
        cluster = parse_gpus(gpus, catalog)
        tables, cache, scores = exhaustive(ctx, cluster, gbs, space(False), OBJECTIVES)
        out.append((ctx, cluster, gbs, tables, cache, scores))
    return out


def test_exhaustive_scores_equal_task_best(solved):
    """The helper's per-split, per-row keys give twotp.task_best's optimum (the same evaluator, another loop)."""
    checked = 0
    for ctx, cluster, gbs, tables, cache, scores in solved[:4]:
        for ts in scores[::3]:
            for kind in ("throughput", "cost"):
                cand, _ = task_best(ctx, cluster, tables, cache, ts.task, gbs, OBJECTIVES[kind], space(False))
                want = np.inf if cand is None else cand.key
                assert ts.best(kind) == want
                checked += 1
    assert checked >= 20


def test_pair_hull_gives_the_integer_knapsack():
    """Over every (x_a, x_b) >= 0 with t_a x_a + t_b x_b <= U the largest n_a x_a + n_b x_b (n >= 0) is the
    largest over :func:`pair_hull`'s vertices, which are feasible (U <= 40, TP pairs also not dividing)."""
    rng = random.Random(3)
    for _ in range(1500):
        units = rng.randint(0, 40)
        t_a, t_b = sorted(rng.sample([1, 2, 3, 4, 6, 8], 2))
        hull = pair_hull(units, t_a, t_b)
        assert all(a >= 0 and b >= 0 and t_a * a + t_b * b <= units for a, b in hull)
        pts = [(a, b) for a in range(units // t_a + 1) for b in range(units // t_b + 1) if t_a * a + t_b * b <= units]
        for _ in range(4):
            n_a, n_b = rng.random() * 4, rng.random() * 4
            want = max(n_a * a + n_b * b for a, b in pts)
            got = max(n_a * a + n_b * b for a, b in hull)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_mix_vertices_give_each_pool_knapsack():
    """unitbound.mix_vertices per pool (two types, TP 1/2/4 and 1/2, S = 1..3): the largest weighted sum over its
    vectors equals the best mix of at most two TP degrees under the pool's TP units (every count vector, by
    itertools), and with ``max_tps = 3`` (the LP vectors) is >= the best mix of any number of them."""
    from itertools import product
    _, catalog = bf_ctx()
    cluster = parse_gpus("A100-40@us-a=13,V100-16@us-a=7", catalog)
    pools = list(cluster.pools)
    opts = [("A100-40", 1), ("A100-40", 2), ("A100-40", 4), ("V100-16", 1), ("V100-16", 2)]
    tp, s = np.array([t for _, t in opts]), np.arange(1, 4)
    cap = np.array([[[p.count // (si * t) if p.gpu_type == g else 0 for g, t in opts] for p in pools] for si in s])
    rng = np.random.default_rng(4)
    for max_tps in (2, 3):
        mix = mix_vertices(cap, opts, pools, s, tp, max_tps)
        for _ in range(30):
            n = rng.uniform(0.0, 5.0, size=len(opts))
            got = (mix * n).sum(axis=3).max(axis=2)                              # [S, P]
            for i, si in enumerate(s):
                for j, p in enumerate(pools):
                    mine = [o for o, (g, _) in enumerate(opts) if g == p.gpu_type]
                    units = p.count // int(si)
                    best = max(sum(x * n[o] for x, o in zip(xs, mine)) for xs in
                               product(*(range(units // int(tp[o]) + 1) for o in mine))
                               if sum(x * int(tp[o]) for x, o in zip(xs, mine)) <= units
                               and sum(1 for x in xs if x) <= max_tps)
                    if max_tps == 2:
                        assert got[i, j] == pytest.approx(best, rel=1e-12, abs=1e-12)
                    else:
                        assert got[i, j] >= best * (1 - 1e-12)


def test_mixed_floor_with_one_vector_per_option_is_todays_floor():
    """unitbound.mixed_makespan_floor with each option's capacity as its own candidate vector (no mixing) gives
    makespan_floor's values bit for bit (random capacities, compute terms and micro-batch counts)."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        s_n, p_n, o_n = rng.integers(1, 6), rng.integers(1, 4), rng.integers(1, 5)
        cap = rng.integers(0, 5, size=(s_n, p_n, o_n))
        c = rng.uniform(0.5, 3.0, size=(s_n, o_n))
        m = c / rng.uniform(1.0, 4.0, size=(s_n, o_n))
        mix = np.zeros((s_n, p_n, o_n, o_n))
        for o in range(o_n):
            mix[:, :, o, o] = cap[:, :, o]
        n_mb = int(rng.integers(1, 30))
        old, new = makespan_floor(cap, c, m, n_mb), mixed_makespan_floor(mix, c, m, n_mb)
        assert np.array_equal(old, new)


def _units(ctx, cluster, gbs, tables, sp, kind):
    options = cluster_options(ctx, cluster, sp)
    return {(u.num_stages, u.mbs, u.recompute): u.bound
            for u in unit_bounds(ctx, cluster, tables, options, gbs, OBJECTIVES[kind], sp) if not u.dist}


def test_unit_bound_with_two_tp_holds_on_every_unit(solved):
    """With ``two_tp == 2`` the unit bound is <= the best plan of every unit over its one- and two-TP tasks; with
    ``two_tp == 1`` it is the old bound (<= every one-TP task's optimum), and the two-TP bound is never above it."""
    checked = mixed = 0
    for ctx, cluster, gbs, tables, cache, scores in solved:
        for kind in KINDS:
            old = _units(ctx, cluster, gbs, tables, space(False), kind)
            new = _units(ctx, cluster, gbs, tables, space(True), kind)
            best1: dict = {}
            best2: dict = {}
            for ts in scores:
                u = (ts.task.num_stages, ts.task.mbs, ts.task.recompute)
                b = ts.best(kind)
                best2[u] = min(best2.get(u, np.inf), b)
                if all(len(t) == 1 for _, t in ts.task.tps):
                    best1[u] = min(best1.get(u, np.inf), b)
            for u, b in best2.items():
                assert new[u] <= old[u]
                assert new[u] <= b * (1 + REL) or b == np.inf, (cluster, kind, u, new[u], b)
                if u in best1 and best1[u] < np.inf:
                    assert old[u] <= best1[u] * (1 + REL)
                checked += 1
                mixed += new[u] < old[u]
    assert checked >= 200 and mixed >= 10


def test_task_capacity_floor_holds_on_two_tp_tasks(solved):
    """unitbound.task_floors (the heap key's capacity floor) given pseudo-type combos: <= each task's optimum."""
    checked = 0
    for ctx, cluster, gbs, tables, cache, scores in solved:
        for kind in KINDS:
            floors = task_floors(ctx, cluster, tables, [ts.shell for ts in scores], gbs, OBJECTIVES[kind])
            for ts, f in zip(scores, floors):
                b = ts.best(kind)
                if b < np.inf:
                    assert f <= b * (1 + REL) + 1e-15, (cluster, kind, ts.task, f, b)
                    checked += 1
    assert checked >= 500


def _sync_lb(ctx, cluster, tables, cache, ts, gbs, kind):
    out: dict = {}
    t = ts.task
    task_bound(ctx, cluster, tables, t.pairs(), t.num_stages, t.mbs, gbs // t.mbs, OBJECTIVES[kind], cache,
               sync_out=out, recompute=t.recompute)
    return out.get("by_d")


def test_exact_and_objective_task_floors_hold_on_two_tp_tasks(solved):
    """taskfloor.exact_task_floor (throughput) and costfloor.objective_task_floor (cost, value), with the task
    bound's sync floor per d as the engine passes it: <= the optimum of every two-TP task."""
    checked = 0
    for ctx, cluster, gbs, tables, cache, scores in solved:
        for ts in scores:
            if all(len(t) == 1 for _, t in ts.task.tps):
                continue
            for kind in KINDS:
                b = ts.best(kind)
                if b == np.inf:
                    continue
                slb = _sync_lb(ctx, cluster, tables, cache, ts, gbs, kind)
                f = objective_task_floor(ctx, cluster, tables, cache, ts.shell, gbs, tables.space, slb,
                                         OBJECTIVES[kind])
                assert f <= b * (1 + REL) + 1e-15, (cluster, kind, ts.task, f, b)
                checked += 1
    assert checked >= 300


def test_split_dominance_keeps_the_optimum_of_two_tp_tasks(solved):
    """taskrun._split_criteria + rows.pareto_min (run_task's split dominance) on the pseudo-type shell, under every
    objective on every task (one- and two-TP), as ``taskrun.split_dominance_rule`` has run_task apply it: the
    splits it keeps hold each task's optimum, and it drops splits on some tasks. Where the rule compares only
    splits with the same stage bytes (cost, value over several zones under ``grad_sync = "auto"``:
    docs/PLANNER.md 10.8.4), comparing every split must drop a task's best split somewhere here, or the
    restriction would be needless, and the restricted rule must still drop splits."""
    checked = dropped = restricted = unsound_misses = restricted_drops = 0
    for ctx, cluster, gbs, tables, cache, scores in solved:
        for ts in scores:
            if len(ts.splits) < 2:
                continue
            arrs = [tables.arrays(g, t, ts.task.mbs, ts.task.num_stages, ts.task.recompute) for g, t in ts.shell.tps]
            crit_any = _split_criteria(ctx, cluster, cache, tables, ts.shell, arrs, ts.splits, tables.space)
            crit_same = _split_criteria(ctx, cluster, cache, tables, ts.shell, arrs, ts.splits, tables.space,
                                        same_stage_bytes=True)
            kept_any, kept_same = pareto_min(crit_any), pareto_min(crit_same)
            for kind in KINDS:
                per = ts.split_best(kind)
                if not np.isfinite(per.min()):
                    continue
                rule = split_dominance_rule(ctx, cluster, ts.shell, OBJECTIVES[kind])
                assert rule in (ANY_SPLIT, SAME_STAGE_BYTES)
                kept = kept_any if rule == ANY_SPLIT else kept_same
                assert per[kept].min() == per.min(), (cluster, kind, ts.task, rule)
                checked += 1
                dropped += len(kept) < len(ts.splits)
                if rule == SAME_STAGE_BYTES:
                    restricted += 1
                    restricted_drops += len(kept) < len(ts.splits)
                    unsound_misses += per[kept_any].min() > per.min()
    assert checked >= 1000 and dropped >= 50 and restricted >= 100 and unsound_misses >= 1


def test_row_floors_hold_on_every_row_of_two_tp_tasks(solved):
    """Per row of every two-TP task: the split-free row floor (rowfloor.floor_keys over pool_floors of every split)
    and the per-split cheap key (taskrun.cheap_keys), both with the zone-aware sync and egress floors (rowzone) and
    the task bound's sync floor, are <= the row's exact key under every split (every objective)."""
    checked = zoned = 0
    for ctx, cluster, gbs, tables, cache, scores in solved:
        for ts in scores:
            if all(len(t) == 1 for _, t in ts.task.tps):
                continue
            n_mb = gbs // ts.task.mbs
            zt = zone_terms(ctx, cluster, tables, cache, ts.shell, n_mb)
            floors = pool_floors(ts.models, ts.cols)
            for kind in KINDS:
                obj = OBJECTIVES[kind]
                slb = _sync_lb(ctx, cluster, tables, cache, ts, gbs, kind)
                first = ts.models[int(ts.splits[0])]
                common = row_terms([first[c] for c in ts.cols], ts.D, slb)
                egress = None
                if zt is not None:
                    s2, egress = zone_row_terms(common, ts.D, ts.cols, zt, ts.D.sum(axis=1))
                    common = (s2,) + common[1:]
                    zoned += 1
                fl = floor_keys(*floors, ts.D, n_mb, obj, *common, egress=egress)
                exact = ts.keys[kind]
                assert (fl <= exact.min(axis=0) * (1 + REL) + 1e-15).all(), (cluster, kind, ts.task)
                for i, k in enumerate(ts.splits):
                    pools = [ts.models[int(k)][c] for c in ts.cols]
                    ck, _, _ = cheap_keys(pools, ts.D, n_mb, obj, *common, egress=egress)
                    assert (ck <= exact[i] * (1 + REL) + 1e-15).all(), (cluster, kind, ts.task, int(k))
                checked += 1
    assert checked >= 300 and zoned >= 20


def test_row_class_floors_hold_on_every_row_of_two_tp_tasks(solved):
    """rowclass.class_floor_table built per pseudo-type (each (type, TP) a class "type" with its own capacity, as
    task_class_table would with columns keyed (zone, type, TP)): at every row's class (per-pseudo-type totals,
    zones used) it is <= the row's exact key under every split."""
    checked = 0
    for ctx, cluster, gbs, tables, cache, scores in solved:
        for ts in scores:
            if all(len(t) == 1 for _, t in ts.task.tps):
                continue
            n_mb = gbs // ts.task.mbs
            zt = zone_terms(ctx, cluster, tables, cache, ts.shell, n_mb)
            m_t, f_t, u_t, r_t, g_t, caps_t, zones = class_type_terms(cluster, ts.shell, ts.models, n_mb)
            per_type = np.stack([ts.D[:, [j for j, c in enumerate(ts.cols) if c[1:] == gt]].sum(axis=1)
                                 for gt in ts.shell.tps], axis=1)
            zone_list = sorted(zones)
            used_z = np.stack([ts.D[:, [j for j, c in enumerate(ts.cols) if c[0] == z]].sum(axis=1) > 0
                               for z in zone_list], axis=1).sum(axis=1)
            for kind in KINDS:
                slb = _sync_lb(ctx, cluster, tables, cache, ts, gbs, kind)
                table = class_floor_table(m_t, f_t, u_t, r_t, g_t, caps_t, n_mb, OBJECTIVES[kind], slb, zt,
                                          len(zone_list), False)
                floor = table[tuple(per_type.T) + (used_z,)]
                assert (floor <= ts.keys[kind].min(axis=0) * (1 + REL) + 1e-15).all(), (cluster, kind, ts.task)
                checked += 1
    assert checked >= 300


LEVEL_MODEL = ModelSpec("s20u-levels", num_layers=8, hidden_size=512, num_heads=8, ffn_hidden_size=2048,
                        seq_length=4096, vocab_size=1024, max_position_embeddings=4096)


def test_split_keep_rule_keeps_the_optimum_of_two_tp_tasks():
    """midlevels.task_keep (the higher middle levels a task searches, from its pipelines' slack) given the
    pseudo-type combo: on 8-layer tasks with S = 4, 5 (where add_levels lists higher levels) the kept splits hold
    every task's optimum over every fitting split of Tables.splits, and the rule drops splits on some tasks."""
    catalog = GPUCatalog()
    ctx = SimContext(LEVEL_MODEL, ProfileStore(LEVEL_MODEL, catalog), NetworkModel(catalog), catalog, OURS)
    sp = SearchSpace(max_stages=5, mbs_options=(1,), tp_options=TPS, recompute=(False,),
                     distributed_optimizer=(False,), chain_segments=1)
    rng = random.Random(5)
    cases = [("A100-40@us-a=12", 8), ("V100-16@us-a=10,A100-40@us-a=6", 8), ("H100-80@us-a=9,H100-80@us-b=6", 8)]
    cases += [random_cluster(rng, BF_TYPES, ("us-a", "us-b")) for _ in range(4)]
    with_levels = dropping = checked = 0
    for gpus, gbs in cases:
        cluster = parse_gpus(gpus, catalog)
        tables, _, scores = exhaustive(ctx, cluster, gbs, sp, OBJECTIVES)
        for ts in scores:
            keep = task_keep(tables, ts.task.pairs(), ts.task.mbs, ts.task.num_stages)
            if ts.task.num_stages < 4 or keep is True:
                continue
            k = np.asarray(keep)[ts.splits]
            with_levels += 1
            dropping += bool((~k).any())
            for kind in KINDS:
                per = ts.split_best(kind)
                assert k.any() and per[k].min() == per.min(), (gpus, kind, ts.task)
                checked += 1
    assert with_levels >= 15 and dropping >= 8 and checked >= 45


def test_stage_bytes_class():
    """Splits get one id exactly when their stages carry the same (per-GPU, whole-stage) bytes in some order; no
    split, no id."""
    params = np.array([[1., 2, 1], [2, 1, 1], [1, 1, 2], [1, 2, 2], [1, 2, 1]])
    full = params * 2
    full[4, 0] = 3.0            # same per-GPU bytes as split 0, other whole-stage bytes
    cls = _stage_bytes_class(params, full)
    assert cls[0] == cls[1] == cls[2] and len({cls[0], cls[3], cls[4]}) == 3
    assert _stage_bytes_class(np.zeros((0, 3)), np.zeros((0, 3))).shape == (0,)


def test_same_stage_bytes_dominance_keeps_the_optimum_over_two_zones():
    """The restricted split dominance (``SAME_STAGE_BYTES``: only splits whose stages carry the same bytes in some
    order are compared, docs/PLANNER.md 10.8.4) on 8-layer tasks (S = 3-5, where splits permute the middle stages)
    over two zones under the cost and value objectives, grad_sync auto: the kept splits hold every task's optimum,
    and the rule drops splits on some tasks (so it prunes, unlike no dominance)."""
    catalog = GPUCatalog()
    ctx = SimContext(LEVEL_MODEL, ProfileStore(LEVEL_MODEL, catalog), NetworkModel(catalog), catalog, OURS)
    sp = SearchSpace(max_stages=5, mbs_options=(1,), tp_options=(1, 2), recompute=(False,),
                     distributed_optimizer=(False,), chain_segments=1)
    cases = [("A100-40@us-a=6,A100-40@us-b=5", 8), ("V100-16@us-a=6,V100-16@us-b=4", 16),
             ("H100-80@us-a=5,H100-80@us-b=6,V100-16@us-b=4", 8)]
    checked = dropping = 0
    for gpus, gbs in cases:
        cluster = parse_gpus(gpus, catalog)
        tables, cache, scores = exhaustive(ctx, cluster, gbs, sp, OBJECTIVES)
        for ts in scores:
            if ts.task.num_stages < 3 or len(ts.splits) < 2:
                continue
            arrs = [tables.arrays(g, t, ts.task.mbs, ts.task.num_stages, ts.task.recompute) for g, t in ts.shell.tps]
            kept = pareto_min(_split_criteria(ctx, cluster, cache, tables, ts.shell, arrs, ts.splits, tables.space,
                                              same_stage_bytes=True))
            for kind in ("cost", "value"):
                if split_dominance_rule(ctx, cluster, ts.shell, OBJECTIVES[kind]) != SAME_STAGE_BYTES:
                    continue        # a task whose pools lie in one zone
                per = ts.split_best(kind)
                if not np.isfinite(per.min()):
                    continue
                assert per[kept].min() == per.min(), (gpus, kind, ts.task)
                checked += 1
                dropping += len(kept) < len(ts.splits)
    assert checked >= 20 and dropping >= 5, (checked, dropping)


# ---- the old unit bound's per-pool max_o form fails on a two-TP plan ------------------------------------------

PIN_MODEL = ModelSpec("s20u", num_layers=16, hidden_size=512, num_heads=4, ffn_hidden_size=2048, seq_length=8192,
                      vocab_size=1024, max_position_embeddings=8192)
PIN_GPUS, PIN_GBS = "A100-80@us-a=10", 7


def pin_ctx() -> SimContext:
    catalog = GPUCatalog()
    return SimContext(PIN_MODEL, ProfileStore(PIN_MODEL, catalog), NetworkModel(catalog), catalog, OURS)


def test_old_unit_bound_exceeds_a_two_tp_plan():
    """10 A100-80 (5 TP units at S = 2), GBS 7, micro-batch 1: one TP-1 pipeline with 1 micro-batch and one TP-4
    pipeline with 6 beat the old unit bound of (S 2, b 1): the per-pool ``max_o cap_p(o) n_o`` caps the pool at
    max(5 n_1, 2 n_2, n_4) micro-batches, while 1 x TP 1 + 1 x TP 4 runs n_1 + n_4 > 5 n_1 near ``it = C_1``
    (``n_4 > 4 n_1``: TP 4 runs a micro-batch about 3.1x faster, and S = 2 halves its per-micro-batch period).
    The plan is simulated; the bound with ``two_tp == 2`` is below it."""
    ctx = pin_ctx()
    cluster = parse_gpus(PIN_GPUS, ctx.catalog)
    sp1, sp2 = space(False, 2), space(True, 2)
    options = cluster_options(ctx, cluster, sp1)
    tables, cache = Tables(ctx, sp1, options, cluster), LinkCache(ctx)
    obj = Objective("throughput")
    task = TwoTpTask(2, 1, False, (("A100-80", (1, 4)),))
    cand, _ = task_best(ctx, cluster, tables, cache, task, PIN_GBS, obj, sp1)
    assert sorted((p.tp, p.pipelines) for p in cand.pools) == [(1, 1), (4, 1)]
    assert sorted(cand.microbatches) == [1, 6]
    est = simulate(build_plan(cand, PIN_MODEL.num_layers, PIN_GBS, None), ctx)
    assert est.fits_in_memory and est.iteration_time_s == pytest.approx(cand.iteration_s, rel=1e-9)
    old = _units(ctx, cluster, PIN_GBS, tables, sp1, "throughput")[(2, 1, False)]
    new = _units(ctx, cluster, PIN_GBS, tables, sp2, "throughput")[(2, 1, False)]
    assert old > est.iteration_time_s * 1.02          # the old form would prune this unit's best plan
    assert new <= est.iteration_time_s
    # and no one-TP plan of the unit comes near it: the gain is the second TP degree's
    one = min((task_best(ctx, cluster, tables, cache, TwoTpTask(2, 1, False, (("A100-80", (t,)),)), PIN_GBS, obj,
                         sp1)[0].key for t in (1, 2, 4)))
    assert old <= one and est.iteration_time_s < one / 1.02


# ---- water-filled pairs against free counts (docs/PLANNER.md 9, Theorem 2, with two TP degrees) -------------

WF_GPUS, WF_GBS = "H100-80@us-a=6,H100-80@us-b=4", 32


def _classes(rows: np.ndarray, n_zones: int) -> dict:
    """(zones used, total per TP) -> the least fullest-zone count M over ``rows`` (columns (zone, TP), two TPs)."""
    out: dict = {}
    for p in rows.reshape(len(rows), n_zones, 2):
        k = (tuple(bool(v) for v in p.sum(axis=1) > 0), int(p[:, 0].sum()), int(p[:, 1].sum()))
        out[k] = min(out.get(k, 1 << 30), int(p.sum(axis=1).max()))
    return out


def test_water_filled_pairs_are_every_vector_in_one_zone():
    """A type in one zone: the water-filled pairs under the joint cap are every count vector (nothing to spread)."""
    for units in range(1, 13):
        for tps in ((1, 2), (1, 4), (2, 4)):
            free = {tuple(r) for r in type_rows((units,), tps, 12).tolist()}
            wf = {tuple(r) for r in type_rows((units,), tps, 12, water_filled=True).tolist()}
            assert wf == free


def test_water_filled_pairs_miss_the_least_fullest_zone_of_a_two_zone_type():
    """Caps (6, 4) TP units over zones a, b, TP degrees 2 and 4, three TP-2 pipelines and one TP-4 over both zones:
    free counts reach a fullest zone of M = 2 (TP 2 (1, 2) + TP 4 (1, 0)); water-filling puts TP 2's extra
    pipeline in zone a ((2, 1)), where TP 4 then overfills the pool, so the best water-filled pair of that class
    is TP 2 (3, 0) + TP 4 (0, 1), M = 3. With the zones swapped water-filling reaches M = 2. Over the classes
    both reach, water-filling is never below the free least M (a subset)."""
    k = ((True, True), 3, 1)
    free = _classes(type_rows((6, 4), (2, 4), 8), 2)
    wf = _classes(type_rows((6, 4), (2, 4), 8, water_filled=True), 2)
    assert free[k] == 2 and wf[k] == 3
    assert set(wf) <= set(free) and all(wf[c] >= free[c] for c in wf)
    assert _classes(type_rows((4, 6), (2, 4), 8, water_filled=True), 2)[((True, True), 3, 1)] == 2


def test_water_filled_pairs_lose_the_optimum_under_class_links():
    """The counterexample to Theorem 2 with two TP degrees: H100-80 6 + 4 GPUs in two zones (class links, the
    brute-force model), GBS 32, throughput. The free-count optimum (every plan checked against simulate by
    two_tp_search) runs TP 2 + TP 4 in zone a and two TP 2 in zone b (the class of the test above at S = 1); the
    best water-filled pair is 1.2 % slower. With the zones' sizes swapped water-filling reaches the same optimum."""
    ctx, catalog = bf_ctx()
    obj = Objective("throughput")
    cluster = parse_gpus(WF_GPUS, catalog)
    free = two_tp_search(ctx, cluster, WF_GBS, obj, space(False, 1)).best
    wf = two_tp_search(ctx, cluster, WF_GBS, obj, space(False, 1), water_filled=True).best
    assert sorted((p.zone, p.tp, p.pipelines) for p in free.pools) == [("us-a", 2, 1), ("us-a", 4, 1), ("us-b", 2, 2)]
    assert wf.key > free.key * 1.01
    mirror = parse_gpus("H100-80@us-a=4,H100-80@us-b=6", catalog)
    free_m = two_tp_search(ctx, mirror, WF_GBS, obj, space(False, 1)).best
    wf_m = two_tp_search(ctx, mirror, WF_GBS, obj, space(False, 1), water_filled=True).best
    assert free_m.key == pytest.approx(free.key, rel=1e-12) and wf_m.key == pytest.approx(free.key, rel=1e-12)


def test_water_filled_pairs_lose_the_optimum_under_the_flat_rule():
    """Under ``grad_sync = "flat"`` (Theorem 1's rule: only U, the totals and whether a zone holds two replicas
    matter) water-filled pairs still lose: caps (7, 5) TP units, TP degrees 1 and 4, four TP-1 and two TP-4
    pipelines over both zones fit only as TP 1 (3, 1) + TP 4 (1, 1); water-filling gives TP 1 (2, 2) (zone b
    overfilled) and no pair of that class exists, in either zone order. V100-16 7 + 5 GPUs (class links), GBS 32,
    throughput: that class is the optimum, 0.6 % faster than the best water-filled pair."""
    import dataclasses
    k = ((True, True), 4, 2)
    for caps in ((7, 5), (5, 7)):
        assert k in _classes(type_rows(caps, (1, 4), 8), 2)
        assert k not in _classes(type_rows(caps, (1, 4), 8, water_filled=True), 2)
    ctx, catalog = bf_ctx()
    ctx = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, grad_sync="flat"))
    obj = Objective("throughput")
    cluster = parse_gpus("V100-16@us-a=7,V100-16@us-b=5", catalog)
    free = two_tp_search(ctx, cluster, WF_GBS, obj, space(False, 1)).best
    wf = two_tp_search(ctx, cluster, WF_GBS, obj, space(False, 1), water_filled=True).best
    assert sorted((p.zone, p.tp, p.pipelines) for p in free.pools) == [("us-a", 1, 3), ("us-a", 4, 1), ("us-b", 1, 1),
                                                                         ("us-b", 4, 1)]
    assert wf.key > free.key * 1.005
