"""Session 20 (helper s20b): the exact pricing over pools merged by type (planner/search/mixcoarse.py, docs/PLANNER.md
7.1 item 10, 7.2 item 10) and the usage table computed in chunks of levels (mixexact.CHUNK_CELLS).

The merged LP is a relaxation of the exact LP (its optimum is >= at random makespans); the bound with every
unit forced onto pools merged by type is complete, <= the exact (b) of the independent enumeration
(benchmarks/sailor_full_space.py, D <= 2) and <= (b'), <= the default bound (a relaxation, within the bisection),
and <= every random plan of Sailor's space that fits (stages mixing chains, random counts); chunking the levels
gives the same table, bit for bit."""
from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "planner"))

from sailor_full_space import contexts, random_cases  # noqa: E402
from test_mix_bound_h11b import check_random_plans  # noqa: E402
from test_mix_exact_s14b import BISECT, SPACE, check_below_exact_b  # noqa: E402

import planner.search.mixbound as MB  # noqa: E402
import planner.search.mixcoarse as MC  # noqa: E402
import planner.search.mixexact as MX  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.search.chaintab import ChainGroups  # noqa: E402
from planner.search.mixtab import MixMemo, MixUnit, mix_unit  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402



@pytest.fixture(scope="module")
def ctxs():
    return contexts(None)


def _toy(names, pools, caps) -> MixUnit:
    n_g = len(names)
    grp = ChainGroups(names, np.array(pools), np.array(caps), np.ones(n_g, dtype=np.int64), np.ones(n_g))
    return MixUnit(2, 1, 4, grp, np.ones((n_g, 2)), np.ones((n_g, 2), dtype=np.int64), np.zeros((n_g, n_g)),
                   np.zeros(5), 0.0, 4)


def test_partitions_merge_and_keep():
    """Pools (A, z0), (V, z0), (A, z1): by type {0, 2} and {1}; counts summed; a merged pool is kept when any of
    its pools is; one pool per type: no partition by type (types are never merged together)."""
    unit = _toy([("A", "z0", 1), ("V", "z0", 1), ("A", "z1", 1), ("A", "z1", 2)], [0, 1, 2, 2], [4, 8, 2])
    parts = MC.partitions(unit)
    assert [h for h, _ in parts] == ["pools", "types"]
    assert parts[1][1].tolist() == [0, 1, 0]
    m = MC.merge_pools(unit, parts[1][1])
    assert m.grp.caps.tolist() == [6, 8] and m.grp.pool.tolist() == [0, 1, 0, 0]
    assert m.grp.names == unit.grp.names and np.array_equal(m.grp.tp, unit.grp.tp)
    c = MC.Coarse(m, parts[1][1], "types")
    assert MC.keep(c, np.array([False, True, False])).tolist() == [False, True]
    assert MC.keep(c, np.array([False, False, True])).tolist() == [True, False]
    homo = _toy([("A", "z0", 1), ("A", "z1", 1)], [0, 1], [4, 4])
    assert [h for h, _ in MC.partitions(homo)] == ["pools", "types"]
    het = _toy([("A", "z0", 1), ("V", "z0", 1)], [0, 1], [4, 4])
    assert [h for h, _ in MC.partitions(het)] == ["pools"]
    # by region first: (A, r-a), (A, r-b), (A, s-a), (V, r-a) -> regions {0, 1} {2} {3}, types {0, 1, 2} {3}
    reg = _toy([("A", "r-a", 1), ("A", "r-b", 1), ("A", "s-a", 1), ("V", "r-a", 1)], [0, 1, 2, 3], [4, 4, 2, 8])
    rp = MC.partitions(reg)
    assert [h for h, _ in rp] == ["pools", "regions", "types"]
    assert rp[1][1].tolist() == [0, 0, 1, 2] and rp[2][1].tolist() == [0, 0, 0, 1]
    assert MC.merge_pools(reg, rp[1][1]).grp.caps.tolist() == [8, 2, 8]
    assert [h for h, _ in MC.partitions(_toy([("A", "r-a", 1), ("A", "r-b", 1)], [0, 1], [4, 4]))] == [
        "pools", "regions"]
    # the finest that fits: the unit itself at a large limit, by type at the merged table's size, else none
    assert MC.coarse(unit, 10 ** 9).how == "pools" and MC.coarse(unit, 10 ** 9).unit is unit
    small = MX.table_cells(m)
    assert small < MX.table_cells(unit)
    assert MC.coarse(unit, small).how == "types" and MC.coarse(unit, small - 1) is None


def _units(ctxs, n: int, seed: int):
    for case in random_cases(n, seed, False):
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        tables = Tables(ctx, replace(SPACE, recompute=(False,), distributed_optimizer=(False,)))
        options, memo = cluster_options(ctx, cluster, SPACE), MixMemo()
        for s_num in (1, 2, 3):
            tab = mix_unit(ctx, cluster, tables, options, case.gbs, s_num, 1, SPACE.precision, 1, memo)
            if tab is not None:
                yield case, tab


@pytest.mark.parametrize("seed", [43, 24, 54])
def test_coarse_lp_relaxes_the_exact_lp(ctxs, seed):
    """At random makespans and D ranges, the LP over the table of the pools merged by type has an optimum >= the
    exact LP's (a relaxation), on the units of small clusters of 2-3 pools (some with two pools of one type)."""
    rng = np.random.default_rng(seed)
    checked = by_type = 0
    for case, tab in _units(ctxs, 6, seed):
        full = MX.usage_table(tab)
        vmax = float(tab.comp[tab.usable].max())
        for how, part in MC.partitions(tab)[1:]:
            one = MC.merge_pools(tab, part)
            small = MX.usage_table(one)
            by_type += 1
            for t in rng.uniform(0.5, 2.0 * case.gbs, 3) * vmax:
                d_hi = int(rng.integers(1, tab.d_max + 1))
                d_lo = int(rng.integers(1, d_hi + 1))
                v_full = MX.lp_value(tab, full, t, d_lo, d_hi)[0]
                v_one = MX.lp_value(one, small, t, d_lo, d_hi)[0]
                assert v_one >= v_full - 1e-9 * max(1.0, abs(v_full)), (case, how, t, v_one, v_full)
                checked += 1
    assert checked >= 12 and by_type >= 1, (checked, by_type)


@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_levels_give_the_same_table(ctxs, seed, monkeypatch):
    """One level per chunk (CHUNK_CELLS 1) and every level at once give the same table, bit for bit."""
    done = 0
    for _, tab in _units(ctxs, 3, 90 + seed):
        whole = MX.usage_table(tab)
        monkeypatch.setattr(MX, "CHUNK_CELLS", 1)
        one_by_one = MX.usage_table(tab)
        monkeypatch.setattr(MX, "CHUNK_CELLS", 10_000_000)
        assert whole.dims == one_by_one.dims and np.array_equal(whole.fill, one_by_one.fill)
        done += whole.fill.shape[1] > 1
    assert done >= 3


def _force(monkeypatch) -> None:
    """Every unit's exact table on the pools merged by type where the unit has such a partition."""
    real = MC.partitions
    monkeypatch.setattr(MC, "partitions", lambda unit: real(unit)[-1:])


CASES = random_cases(6, 43, False) + [random_cases(6, 24, False)[i] for i in (2, 5)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name + "-" + c.gpus.replace("us-central1-", ""))
def test_coarse_bound_below_the_exact_b(ctxs, case, monkeypatch):
    """With every unit's table on pools merged by type (every case has two pools of one type): complete, <= the
    enumeration's exact (b) (D <= 2) and (b'), and <= the default bound (a relaxation; the exact floor's
    bisection is relative 1e-5)."""
    ctx = ctxs[case.ctx_name]
    cluster = parse_gpus(case.gpus, ctx.catalog)
    assert MB.EXACT and MB.COARSE
    default = MB.sailor_space_bound(ctx, cluster, case.gbs, SPACE, time_limit_s=None)
    _force(monkeypatch)
    coarse = MB.sailor_space_bound(ctx, cluster, case.gbs, SPACE, time_limit_s=None)
    if check_below_exact_b(ctx, cluster, case.gbs, coarse, default):
        assert coarse.iteration_s <= default.iteration_s * (1 + BISECT)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_random_plan_beats_the_coarse_bound(ctxs, seed, monkeypatch):
    """Hundreds of random plans of Sailor's space (stages mixing chains, random counts) on 4 clusters, with every
    unit's table on pools merged by type: every one that fits iterates in at least the bound."""
    _force(monkeypatch)
    check_random_plans(ctxs, 30 + seed, random.Random(7 + seed))
