"""Session 15 (helper s15b): the bound on Sailor's whole space split by the GPU types a plan uses
(planner/search/mixcouple.py, docs/PLANNER.md 7.1 item 7, 7.2 item 8) and the merged-pool first floor
(mixexact.merged, 7.1 item 8): each coupled floor is <= the simulator's own sync and step of every random plan
of Sailor's space using exactly those types (term by term), the merged table's LP is a relaxation of the
exact one, and the bound with both is >= the bound without (the s14b and h11b tests check it against the
independent enumeration, with both on by default)."""
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
from test_mix_bound_h11b import _random_plans  # noqa: E402

import planner.search.mixbound as MB  # noqa: E402
from planner.baselines.spaces import PLANNERS  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.search.mixcouple import coupled_floors, type_sets, unit_types  # noqa: E402
from planner.search.mixexact import lp_value, merged, scalar_y, solve_lp, usage_table, weak_dual  # noqa: E402
from planner.search.mixtab import MixMemo, mix_unit  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402
from planner.simulator import simulate  # noqa: E402

REL = 1e-9
SPACE = replace(PLANNERS["sailor-space"], max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))


@pytest.fixture(scope="module")
def ctxs():
    return contexts(None)


def _setup(ctx, cluster):
    tables = Tables(ctx, replace(SPACE, recompute=(False,), distributed_optimizer=(False,)))
    return tables, cluster_options(ctx, cluster, SPACE), MixMemo()


@pytest.mark.parametrize("seed", [0, 1])
def test_coupled_floors_below_every_random_plans_sync_and_step(ctxs, seed):
    """Every random plan of Sailor's space that fits: its sync and step (``simulate``'s) are >= the coupled
    floors of its (S, b, smallest TP) unit and its exact type set (and the unit's floors for every plan,
    ``through`` False), and its pools are the set's; the coupling must raise the sync floor above mixtab's on
    some of them (else the test says nothing)."""
    rng = random.Random(70 + seed)
    fitted = raised = 0
    for case in random_cases(4, 40 + seed, False):
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        tables, options, memo = _setup(ctx, cluster)
        for plan in _random_plans(ctx, cluster, case.gbs, rng, 200):
            est = simulate(plan, ctx)
            if not est.fits_in_memory:
                continue
            reps = [r for st in plan.stages for r in st.replicas]
            types = tuple(sorted({r.gpu_type for r in reps}))
            tau = min(r.tp for r in reps)
            tab = mix_unit(ctx, cluster, tables, options, case.gbs, plan.num_stages, plan.micro_batch_size,
                           SPACE.precision, tau, memo)
            assert tab is not None
            core = memo.core[(plan.num_stages, plan.micro_batch_size)][0]
            cp = coupled_floors(ctx, cluster, tab, core.params, core.upd, types, memo.rings)
            assert cp is not None and types in type_sets(tab)
            d = plan.dp_degree
            fitted += 1
            assert est.sync_s >= cp.sync[d] * (1 - REL), (plan, est.sync_s, cp.sync[d])
            assert est.update_s >= cp.upd * (1 - REL), (plan, est.update_s, cp.upd)
            pools = {int(np.nonzero([(g, z) == (r.gpu_type, r.zone) for g, z, _ in tab.grp.names])[0][0])
                     for r in reps}
            assert all(cp.keep[tab.grp.pool[g]] for g in pools)
            every = coupled_floors(ctx, cluster, tab, core.params, core.upd, tuple(unit_types(tab)), memo.rings,
                                   False)
            assert est.sync_s >= every.sync[d] * (1 - REL) and est.update_s >= every.upd * (1 - REL)
            raised += cp.sync[d] > tab.sync[d] * (1 + 1e-6) or cp.upd > tab.upd * (1 + 1e-6)
    assert fitted >= 40 and raised >= 10, (fitted, raised)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merged_lp_relaxes_the_exact_lp(ctxs, seed):
    """At random makespans the merged-pool LP's optimum is >= the exact LP's (it is a relaxation), on the
    units of small two-pool clusters."""
    rng = np.random.default_rng(seed)
    checked = 0
    for case in random_cases(3, 60 + seed, False):
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        tables, options, memo = _setup(ctx, cluster)
        for s_num in (1, 2, 3):
            tab = mix_unit(ctx, cluster, tables, options, case.gbs, s_num, 1, SPACE.precision, 1, memo)
            if tab is None:
                continue
            one = merged(tab)
            full, small = usage_table(tab), usage_table(one)
            vmax = float(tab.comp[tab.usable].max())
            for t in rng.uniform(0.5, 2.0 * case.gbs, 4) * vmax:
                d_hi = int(rng.integers(1, tab.d_max + 1))
                d_lo = int(rng.integers(1, d_hi + 1))
                v_full = lp_value(tab, full, t, d_lo, d_hi)[0]
                v_one = lp_value(one, small, t, d_lo, d_hi)[0]
                assert v_one >= v_full - 1e-9 * max(1.0, abs(v_full)), (case, s_num, t, v_one, v_full)
                checked += 1
    assert checked >= 12


@pytest.mark.parametrize("case", [random_cases(8, 23, False)[i] for i in (1, 3, 7)], ids=lambda c: c.name)
def test_coupled_bound_is_at_least_the_uncoupled(ctxs, case):
    """With the coupling and the merged first floor (the defaults) the bound is complete and >= the bound
    without either (the exact floor's bisection: relative 1e-5). That it stays <= the exact (b) of the
    enumeration and <= (b') is checked, with the defaults, by
    test_mix_exact_s14b.py::test_exact_bound_below_the_exact_b_and_above_the_old and the h11b tests."""
    ctx = ctxs[case.ctx_name]
    cluster = parse_gpus(case.gpus, ctx.catalog)
    assert MB.COUPLE and MB.MERGED and MB.EXACT
    new = MB.sailor_space_bound(ctx, cluster, case.gbs, SPACE, time_limit_s=None)
    try:
        MB.COUPLE = MB.MERGED = False
        old = MB.sailor_space_bound(ctx, cluster, case.gbs, SPACE, time_limit_s=None)
    finally:
        MB.COUPLE = MB.MERGED = True
    if new is None:
        assert old is None
        return
    assert new.complete
    assert new.iteration_s >= old.iteration_s * (1 - 1.1e-5)


def test_scalar_price_reaches_the_lp_optimum():
    """One pool: the ternary search's price gives a weak-duality bound >= the LP optimum (HiGHS) and within
    1e-6 of it, on random columns."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        c = int(rng.integers(1, 60))
        u = rng.integers(1, 40, c).astype(float)[:, None]
        m = rng.integers(1, 50, c).astype(float)
        cap = np.array([int(rng.integers(1, 200))])
        n, d_hi = int(rng.integers(1, 300)), int(rng.integers(1, 30))
        d_lo = int(rng.integers(1, d_hi + 1))
        opt = solve_lp(u, m, cap, n, d_lo, d_hi)[0]
        val = weak_dual(u, m, scalar_y(u, m, cap, n, d_lo, d_hi), cap, n, d_lo, d_hi)
        assert opt - 1e-9 * max(1.0, abs(opt)) <= val <= opt + 1e-6 * max(1.0, abs(opt))
