"""The zone-aware row floors and the row-class floor of a pool task (docs/PLANNER.md 2.6, round 4, session 13
s13v; :mod:`planner.search.rowzone`, :mod:`planner.search.rowclass`) against the brute force of
tests/planner/test_search_bounds_h13y.py (every pool plan of random small clusters over 1-3 zones scored by
``simulate``): per plan with d pipelines over z zones, the zone sync table at (z, d) is <= its sync (stage syncs
and tied all-reduce), z x the egress per edge is <= its egress when z >= 2, and the row-class floor at its per-type
pipeline totals and zone count is <= its key under throughput, cost and value (bare and
constrained); the floors are tight somewhere (50% more fails); the search returns the same top 3 with the floors
and without."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.search import Objective, rowclass, rowzone
from planner.search.caps import task_dmax
from planner.search.taskbound import task_bound
from planner.search.taskrun import pool_models
from planner.search.tasks import Task
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_cases import assert_same_top3, random_pools  # noqa: E402
from test_search_bounds_h13c import _objectives  # noqa: E402
from test_search_bounds_h13y import _ctx, _gpus, task_setup  # noqa: E402

REL = 1e-9
# one case per setting (9 cases, 3 seeds x 3 settings, until the tracker's CI of stop 30 took 3,465 s of its
# 1,800 s budget)
CASES = [(0, OURS, False), (1, OURS, True), (0, SAILOR_DEEPSPEED, False)]


@pytest.fixture(autouse=True)
def _class_table_everywhere(monkeypatch):
    """The row-class table on every task (the engine builds it only for large row products)."""
    monkeypatch.setattr(rowclass, "MIN_ROWS", 0)
    monkeypatch.setattr(rowclass, "ROWS_PER_CELL", 0)


def _check(ctx, gpus: str, seed: int) -> dict[str, list[float]]:
    """Asserts the per-plan claims; returns the ratios floor / simulated value per kind (sync, egress, class)."""
    cluster, gbs, space, tables, cache, by_task = task_setup(ctx, gpus, seed)
    every = [p for v in by_task.values() for p in v]
    objectives = [Objective("throughput")] + _objectives(every)
    ratios: dict[str, list[float]] = {"sync": [], "egress": [], "class": []}
    for (s_num, mbs, combo, dist), plans in by_task.items():
        n_mb = gbs // mbs
        task = Task(s_num, mbs, combo, 0.0, False, dist, task_dmax(cluster, combo, s_num, n_mb) if dist else 0)
        out: dict = {}
        task_bound(ctx, cluster, tables, combo, s_num, mbs, n_mb, Objective("value"), cache, sync_out=out, dist=dist)
        by_d = out.get("by_d")
        zt = rowzone.zone_terms(ctx, cluster, tables, cache, task, n_mb)
        idx = np.nonzero(tables.task_fits(combo, mbs, s_num, False, dist, task.dmax))[0]
        models = {int(k): pool_models(ctx, cluster, tables, cache, task, int(k), n_mb, space) for k in idx}
        max_total = min(n_mb, task.dmax) if not dist and task.dmax else n_mb
        tabs = [(o, rowclass.task_class_table(cluster, task, models, n_mb, o, by_d, zt, max_total))
                for o in objectives]
        for plan, e in plans:
            if not e.fits_in_memory:
                continue
            reps = plan.stages[0].replicas
            d, z = len(reps), len({r.zone for r in reps})
            totals = [sum(1 for r in reps if r.gpu_type == g) for g, _ in combo]
            if zt is not None:
                table, per_edge = zt
                assert table[z, d] <= e.sync_s * (1 + REL) + 1e-15, (combo, s_num, mbs, dist, z, d, table[z, d],
                                                                     e.sync_s)
                if e.sync_s > 0 and z >= 2:
                    ratios["sync"].append(table[z, d] / e.sync_s)
                if z >= 2:
                    egress = z * per_edge * rowzone.SCALE
                    assert egress <= e.egress_usd_per_iteration * (1 + REL), (combo, z, egress,
                                                                             e.egress_usd_per_iteration)
                    ratios["egress"].append(egress / e.egress_usd_per_iteration)
            for o, tab in tabs:
                if tab is None or not o.allows(e.iteration_time_s, e.cost_per_iteration_usd, e.num_gpus):
                    continue
                key = o.key(e.iteration_time_s, e.cost_per_iteration_usd)
                fl = tab[tuple(totals) + (z,)]
                assert fl <= key * (1 + REL), (combo, s_num, mbs, dist, o, totals, z, fl, key)
                if o.kind == "value" and o == Objective("value"):
                    ratios["class"].append(fl / key)
    return ratios


@pytest.mark.parametrize("seed,settings,small", CASES)
def test_row_floors_below_every_plan(seed, settings, small):
    _check(_ctx(settings, small), _gpus(random.Random(5000 + seed)), seed)


def test_row_floors_on_several_zones_and_tight():
    ratios = _check(_ctx(OURS, False), "A100-40@us-a=2,A100-40@us-b=2,V100-16@us-b=3,V100-16@eu-c=2", 1)
    ratios2 = _check(_ctx(OURS, False), "A100-40@us-a=3,GH-96@us-b=2,V100-16@eu-c=3", 2)
    for kind in ratios:
        ratios[kind] += ratios2[kind]
    assert len(ratios["egress"]) > 20 and len(ratios["class"]) > 50, {k: len(v) for k, v in ratios.items()}
    # 50% more would fail (each floor is reached within that somewhere)
    assert max(ratios["egress"]) * 1.5 > 1 + REL, max(ratios["egress"])
    assert max(ratios["sync"]) * 1.5 > 1 + REL, max(ratios["sync"])
    assert max(ratios["class"]) * 1.5 > 1 + REL, max(ratios["class"])


def test_inflated_zone_floor_fails(monkeypatch):
    monkeypatch.setattr(rowzone, "SCALE", 2.0)
    with pytest.raises(AssertionError):
        _check(_ctx(OURS, False), "A100-40@us-a=2,A100-40@us-b=2,V100-16@us-b=3,V100-16@eu-c=2", 1)


@pytest.mark.parametrize("seed", range(9))
def test_search_same_with_and_without_row_floors(seed, monkeypatch):
    """6-9 pools over 3 zones; the objective cycles through value, cost and throughput."""
    gpus = random_pools(random.Random(6000 + seed), ("us-a", "us-b", "eu-c"), 6, 9)
    assert_same_top3(_ctx(OURS, seed % 2 == 1), gpus, Objective(("value", "cost", "throughput")[seed % 3]),
                     monkeypatch, [(rowzone, "ZONE_SYNC"), (rowclass, "ROW_CLASS")])


def _grid_case(rng: random.Random):
    from planner.cluster import parse_gpus
    from planner.hardware import GPUCatalog
    types = rng.sample(["A100-40", "V100-16", "GH-96"], rng.randint(2, 3))
    zones = rng.sample(["us-a", "us-b", "us-c", "eu-c"], rng.randint(1, 4))
    gpus = ",".join(f"{g}@{z}={rng.randint(1, 6)}" for g in types for z in zones if rng.random() < 0.8)
    cluster = parse_gpus(gpus or f"{types[0]}@{zones[0]}=2,{types[1]}@{zones[0]}=2", GPUCatalog())
    present = sorted({p.gpu_type for p in cluster.pools})
    task = Task(1, 1, tuple((g, 1) for g in present), 0.0)
    return cluster, task


@pytest.mark.parametrize("chunk", [7, 50, 400_000])
def test_class_row_grid_is_row_grid_less_dropped_classes(chunk, monkeypatch):
    """Both paths (head x rest, mixed radix): the same rows, in the same order and chunks, as ``row_grid`` less
    the rows whose class (per-type totals, number of zones used) the table rejects."""
    from planner.search import rows, taskrun
    rng = random.Random(chunk)
    real = rows.ordered_product_chunks
    monkeypatch.setattr(taskrun, "ordered_product_chunks",
                        lambda opts, mt, order: real(opts, mt, order, chunk=chunk))
    for _ in range(25):
        cluster, task = _grid_case(rng)
        if len(task.tps) < 2:
            continue
        max_total = rng.randint(2, 30)
        want = list(taskrun.row_grid(cluster, task, max_total))
        if not want:
            continue
        n_cols = want[0][0].shape[1]
        type_cols = [[j for j, c in enumerate(want[0][1]) if c[1] == t] for t, _ in task.tps]
        zones = len({c[0] for c in want[0][1]})
        caps = [min(max_total, int(sum(want[0][0][:, c].sum(axis=1).max() for c in [cs]))) for cs in type_cols]
        caps = [max(c, max_total) for c in caps]
        table = np.array(np.random.default_rng(rng.randint(0, 99)).random([c + 1 for c in caps] + [zones + 1]))
        thr = rng.choice([0.3, 0.7, 2.0])
        got = list(rowclass.class_row_grid(cluster, task, max_total, 0, table, thr, chunk=chunk))
        kept = []
        for D, cols in want:
            assert D.shape[1] == n_cols
            t = [D[:, cs].sum(axis=1) for cs in type_cols]
            zs = sorted({c[0] for c in cols})
            k = np.sum([(D[:, [j for j, c in enumerate(cols) if c[0] == z]] > 0).any(axis=1) for z in zs], axis=0)
            D = D[table[tuple(t) + (k,)] <= thr]
            if len(D):
                kept.append((D, cols))
        got = [(D, c) for D, c in got if len(D)]
        assert len(got) == len(kept)
        for (a, ca), (b, cb) in zip(got, kept):
            assert ca == cb and np.array_equal(a, b)
