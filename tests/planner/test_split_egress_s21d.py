"""Split dominance with the exact per-class egress criterion (``splitegress.egress_columns``, docs/PLANNER.md 2.1
*Split dominance* and 10.8.4; helper s21d) against exhaustive optima.

Each task's exhaustive scores are every fitting split x every count vector (``twotp.task_rows``, free per-zone
counts), scored by the search's exact row scorer (``pools.score_batch``, tied embeddings included where the model
ties them); the criterion is given exactly those rows. Under ``grad_sync = "auto"`` on tasks over two and three
zones, under cost, value and throughput with a $/iteration cap, the splits the dominance keeps with the criterion
must hold each task's best split; the criterion must drop more splits than the stage-bytes class
(``SAME_STAGE_BYTES``), and comparing the summed bytes (the old rule) must lose the optimum of the 10.8.4
reproducer, which the criterion keeps. ``taskrun.split_parts`` (what run_task searches) must hold every optimum under
plain throughput too, where with tied embeddings the old rule (no stage-0 class) loses some.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace
from planner.search.caps import task_dmax
from planner.search.netvec import LinkCache
from planner.search.pools import score_batch
from planner.search.rows import pareto_min
from planner.search.splitegress import egress_columns
from planner.search.taskrun import SAME_STAGE_BYTES, _split_criteria, split_dominance_rule, split_parts
from planner.search.tasks import Tables, Task, cluster_options
from planner.search.twotp import column_models, enumerate_two_tp_tasks, task_rows
from planner.simulator.settings import OURS, SimContext
from tests.planner.test_planner_bruteforce import bf_ctx

REL = 1e-12


def _model(layers: int, tied: bool) -> ModelSpec:
    return ModelSpec(f"s21d-{layers}-{tied}", num_layers=layers, hidden_size=512, num_heads=8, ffn_hidden_size=2048,
                     seq_length=4096, vocab_size=8192, max_position_embeddings=4096, tied_embeddings=tied)


def _ctx(model: ModelSpec) -> SimContext:
    catalog = GPUCatalog()
    return SimContext(model, ProfileStore(model, catalog), NetworkModel(catalog), catalog, OURS)


def _space(max_stages: int, tied: bool, tps=(1, 2)) -> SearchSpace:
    return SearchSpace(max_stages=max_stages, mbs_options=(1,), tp_options=tps, recompute=(False,),
                       distributed_optimizer=(False,), chain_segments=1, tie_embeddings=tied)


def _tasks(ctx, cluster, gbs: int, sp: SearchSpace, min_stages: int = 2):
    """Per task with two or more fitting splits: (shell task, rows, columns, splits, [K, R] cost and time, tables,
    link cache, the two-TP task)."""
    options = cluster_options(ctx, cluster, sp)
    tables, cache = Tables(ctx, sp, options, cluster), LinkCache(ctx)
    out = []
    for task in enumerate_two_tp_tasks(ctx, cluster, tables, options, gbs, sp, 2):
        if task.num_stages < min_stages:
            continue
        n_mb = gbs // task.mbs
        D, cols = task_rows(cluster, task, n_mb)
        fits = np.logical_and.reduce([tables.arrays(g, t, task.mbs, task.num_stages, task.recompute).fits
                                      for g, t in task.pairs()])
        ks = np.nonzero(fits)[0]
        if len(D) == 0 or len(ks) < 2:
            continue
        cost, it = np.full((len(ks), len(D)), np.inf), np.full((len(ks), len(D)), np.inf)
        for i, k in enumerate(ks):
            pools = column_models(ctx, tables, cache, task, cols, int(k), n_mb)
            sc = score_batch(ctx, cache, [(pools, D)], n_mb, exact=True,
                             tied=cache.tied if sp.tie_embeddings else None)[0]
            ok = np.isfinite(sc.iteration_s)
            cost[i], it[i] = np.where(ok, sc.cost_usd, np.inf), np.where(ok, sc.iteration_s, np.inf)
        shell = Task(task.num_stages, task.mbs, task.pairs(), 0.0, task.recompute, False,
                     task_dmax(cluster, task.pairs(), task.num_stages, n_mb))
        out.append((shell, D, cols, ks, cost, it, tables, cache, task))
    return out


def _objectives(cost: np.ndarray) -> dict[str, Objective]:
    """Cost, value, throughput under a $/iteration cap at the task's median finite cost (so it binds), and
    throughput."""
    fin = cost[np.isfinite(cost)]
    cap = float(np.median(fin)) if len(fin) else 1.0
    return {"cost": Objective("cost"), "value": Objective("value"),
            "capped": Objective("throughput", max_cost_per_iter_usd=cap), "throughput": Objective("throughput")}


def _split_best(obj: Objective, cost: np.ndarray, it: np.ndarray) -> np.ndarray:
    gpus = np.zeros(cost.shape, dtype=np.int64)
    ok = obj.allows(it, cost, gpus) & np.isfinite(it)
    return np.where(ok, obj.key(it, cost), np.inf).min(axis=1)


def _kept(ctx, cluster, shell, D, cols, ks, tables, cache, how: str) -> np.ndarray:
    arrs = [tables.arrays(g, t, shell.mbs, shell.num_stages, shell.recompute) for g, t in shell.tps]
    if how == "egress":
        crit = _split_criteria(ctx, cluster, cache, tables, shell, arrs, ks, tables.space, same_stage_bytes=True,
                               rows=lambda: [(D, cols)])
    else:
        crit = _split_criteria(ctx, cluster, cache, tables, shell, arrs, ks, tables.space,
                               same_stage_bytes=how == "same")
    return pareto_min(crit)


CASES = [  # (model layers, tied, max stages, cluster, GBS): two and three zones, one and two types
    (8, True, 5, "A100-40@us-a=6,A100-40@us-b=5", 8),
    (8, False, 5, "V100-16@us-a=6,V100-16@us-b=4", 16),
    (8, True, 4, "H100-80@us-a=5,H100-80@us-b=6,V100-16@us-b=4", 8),
    (8, True, 4, "A100-40@us-a=4,A100-40@us-b=3,A100-40@us-c=5", 8),
    (8, False, 4, "V100-16@us-a=6,V100-16@us-b=4,H100-80@us-c=3", 8),
]


def _random_cases(seed: int, n: int):
    rng = random.Random(seed)
    out = []
    types = ["A100-40", "V100-16", "H100-80"]
    for _ in range(n):
        zones = ["us-a", "us-b", "us-c"][:rng.randint(2, 3)]
        ts = rng.sample(types, rng.randint(1, 2))
        pools = [(g, z) for g in ts for z in zones if rng.random() < 0.75]
        if len({z for _, z in pools}) < 2:
            pools = [(ts[0], zones[0]), (ts[-1], zones[1])]
        top = 8 if len(pools) <= 3 else 5
        gpus = ",".join(f"{g}@{z}={rng.randint(2, top)}" for g, z in pools)
        out.append((rng.choice([6, 8]), rng.random() < 0.5, rng.randint(3, 4), gpus, rng.choice([8, 16])))
    return out


@pytest.fixture(scope="module")
def checked():
    """Per case and task: the splits each rule keeps and each objective's best per split."""
    out = []
    for layers, tied, s_max, gpus, gbs in CASES + _random_cases(21, 10) + _random_cases(5, 30):
        ctx = _ctx(_model(layers, tied))
        cluster = parse_gpus(gpus, ctx.catalog)
        for shell, D, cols, ks, cost, it, tables, cache, _ in _tasks(ctx, cluster, gbs, _space(s_max, tied)):
            objs = _objectives(cost)
            if split_dominance_rule(ctx, cluster, shell, objs["cost"]) != SAME_STAGE_BYTES:
                continue            # pools in one zone: egress is 0 for every split
            kept = {how: _kept(ctx, cluster, shell, D, cols, ks, tables, cache, how) for how in ("egress", "same",
                                                                                                   "any")}
            arrs = [tables.arrays(g, t, shell.mbs, shell.num_stages, shell.recompute) for g, t in shell.tps]
            for kind, o in objs.items():        # as run_task applies it, per objective
                kept[kind] = np.searchsorted(ks, np.concatenate(
                    split_parts(ctx, cluster, cache, tables, shell, arrs, ks, o, tables.space,
                                rows=lambda: [(D, cols)])))
            best = {kind: _split_best(o, cost, it) for kind, o in objs.items()}
            out.append((gpus, tied, shell, kept, best))
    return out


def test_run_task_dominance_keeps_every_task_optimum(checked):
    """``taskrun.split_parts`` (the splits run_task searches, under each objective's rule) holds every task's best
    split under cost, value, capped and plain throughput; with tied embeddings under plain throughput the
    dominance over every split (no stage 0 class) loses optima here (the all-reduce runs in stage 0's mode)."""
    n = tied_misses = 0
    for gpus, is_tied, shell, kept, best in checked:
        for kind, per in best.items():
            if not np.isfinite(per.min()):
                continue
            assert per[kept[kind]].min() <= per.min() * (1 + REL), (gpus, is_tied, shell, kind)
            n += 1
            if kind == "throughput" and is_tied:
                tied_misses += per[kept["any"]].min() > per.min() * (1 + REL)
    assert n >= 1500 and tied_misses >= 1, (n, tied_misses)


def test_egress_criterion_keeps_every_task_optimum(checked):
    """On every two- and three-zone task (S >= 2) of the cases, under cost, value and capped throughput, the splits
    kept with the per-class egress criterion hold the task's best split: the same key up to rounding (the proof is in
    exact arithmetic; splits whose stages are the same in another order can differ in the last bit of a sum)."""
    n = three = tied = any_misses = 0
    for gpus, is_tied, shell, kept, best in checked:
        for kind, per in best.items():
            if kind == "throughput" or not np.isfinite(per.min()):
                continue
            assert per[kept["egress"]].min() <= per.min() * (1 + REL), (gpus, is_tied, shell, kind)
            n += 1
            three += gpus.count("us-c") > 0
            tied += is_tied
            any_misses += per[kept["any"]].min() > per.min() * (1 + REL)
    # the old rule (summed bytes, as the dominance over every split compares them) loses optima here
    assert n >= 1000 and three >= 500 and tied >= 600 and any_misses >= 5, (n, three, tied, any_misses)


def test_egress_criterion_drops_more_than_the_stage_bytes_class(checked):
    """The criterion is not vacuous: it keeps no more splits than the stage-bytes class on any task (it is implied by
    it up to the tied columns' modes) and strictly fewer on many; it keeps at least the splits the dominance over
    every split keeps in number."""
    fewer = total_egress = total_same = 0
    for gpus, _, shell, kept, _ in checked:
        total_egress += len(kept["egress"])
        total_same += len(kept["same"])
        fewer += len(kept["egress"]) < len(kept["same"])
        assert len(kept["egress"]) >= len(kept["any"])
    assert fewer >= 300 and total_egress < 0.5 * total_same, (fewer, total_egress, total_same)


def test_summed_bytes_rule_fails_on_the_reproducer():
    """docs/PLANNER.md 10.8.4's reproducer (V100-16 over two zones, GBS 32, the brute-force model, S = 3, b = 1, TP 1,
    value objective): comparing the summed bytes (the dominance over every split) drops the task's best split; the
    per-class egress criterion keeps it."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus("V100-16@us-a=6,V100-16@us-b=4", catalog)
    sp = SearchSpace(max_stages=3, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                     distributed_optimizer=(False,), chain_segments=1)
    found = False
    for shell, D, cols, ks, cost, it, tables, cache, _ in _tasks(ctx, cluster, 32, sp, min_stages=3):
        if shell.num_stages != 3 or shell.tps != (("V100-16", 1),):
            continue
        per = _split_best(Objective("value"), cost, it)
        k_any = _kept(ctx, cluster, shell, D, cols, ks, tables, cache, "any")
        k_egress = _kept(ctx, cluster, shell, D, cols, ks, tables, cache, "egress")
        assert per[k_any].min() > per.min()
        assert per[k_egress].min() == per.min() and len(k_any) < len(k_egress)
        found = True
    assert found


def test_egress_columns_give_each_rows_egress_order():
    """Where the columns say split X <= split Y, X's exact egress (the scorer's, tied all-reduce excluded) is <= Y's
    on every row over two zones, up to rounding (random splits' stage bytes, the reproducer's rows)."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus("V100-16@us-a=6,V100-16@us-b=4", catalog)
    sp = SearchSpace(max_stages=3, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                     distributed_optimizer=(False,), chain_segments=1)
    pairs = 0
    for shell, D, cols, ks, cost, it, tables, cache, task in _tasks(ctx, cluster, 32, sp, min_stages=3):
        arrs = [tables.arrays(g, t, shell.mbs, shell.num_stages, shell.recompute) for g, t in shell.tps]
        colv = egress_columns(ctx, cache, [a.params[ks] for a in arrs], list(shell.tps), [(D, cols)], None, False)
        n_mb = 32 // shell.mbs
        egress = []
        for k in ks:
            pools = column_models(ctx, tables, cache, task, cols, int(k), n_mb)
            egress.append(score_batch(ctx, cache, [(pools, D)], n_mb, exact=True)[0].egress_usd)
        egress = np.array(egress)
        for x in range(len(ks)):
            for y in range(len(ks)):
                if x != y and (colv[x] <= colv[y]).all():
                    assert (egress[x] <= egress[y] * (1 + 1e-12) + 1e-18).all()
                    pairs += 1
    assert pairs >= 3

