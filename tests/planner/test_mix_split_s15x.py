"""Session 15 (helper s15x) additions to the split-space bound (planner/search/mixsplit.py, mixsplit_sync.py,
docs/PLANNER.md 7.6): the smallest-over-compositions sync floor equals the enumeration of every composition, and
the bound, now with units per smallest TP, per-count memory masks and the distributed optimizer, is <= every
random plan of the covered space that ``simulate`` says fits (the distributed optimizer on or off, random
compositions of the layers, recomputation random, stages mixing chains and TP degrees, random counts)."""
from __future__ import annotations

import random
import sys
from dataclasses import replace
from itertools import product
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "planner"))

from sailor_full_space import contexts, random_cases  # noqa: E402
from test_mix_bound_h11b import random_compositions  # noqa: E402
from test_mix_split_s14x import check_random_plans  # noqa: E402

from planner.cluster import parse_gpus  # noqa: E402
from planner.plan import Plan, Replica, Stage  # noqa: E402
from planner.search.chaintab import chain_groups  # noqa: E402
from planner.search.mixsplit import split_core  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402
from planner.search.mixsplit_sync import minmax_composition  # noqa: E402
from planner.search.space import SearchSpace  # noqa: E402
from planner.simulator import simulate  # noqa: E402

REL = 1e-9
SPACE = replace(SearchSpace(), max_stages=3, mbs_options=(1, 2), tp_options=(1, 2), distributed_optimizer=(False, True))


@pytest.mark.parametrize("seed", range(8))
def test_minmax_composition_is_the_smallest_over_every_composition(seed):
    """Rows non-decreasing in the layer count (as the stage floors are: more layers, more parameters, a ring no
    faster): the result equals the enumerated optimum up to the bisection (2^-80 of the largest value), never
    above it, inf exactly where no composition is finite. Rows in any order (the code takes suffix minima): never
    above the enumerated optimum."""
    rng = np.random.default_rng(seed)
    s_num, n_l, n_d = int(rng.integers(1, 4)), int(rng.integers(3, 8)), 5
    s_num = min(s_num, n_l)
    raw = rng.uniform(0.0, 10.0, (s_num, n_l + 1, n_d))
    raw[rng.random(raw.shape) < 0.15] = np.inf
    for f, monotone in ((np.sort(raw, axis=1), True), (raw, False)):
        f = f.copy()
        f[:, 0] = np.inf
        got = minmax_composition(f, n_l)
        ref = np.full(n_d, np.inf)
        for ns in product(range(1, n_l + 1), repeat=s_num):
            if sum(ns) == n_l:
                ref = np.minimum(ref, np.max([f[s, n] for s, n in enumerate(ns)], axis=0))
        fin = np.isfinite(ref)
        assert np.all(got[fin] <= ref[fin])
        if monotone:
            assert np.array_equal(np.isfinite(got), fin)
            assert np.allclose(got[fin], ref[fin], rtol=1e-12, atol=1e-12)
            assert fin.any()


@pytest.fixture(scope="module")
def ctxs():
    return contexts(None)


@pytest.mark.parametrize("seed", [0])
def test_no_random_plan_beats_the_split_bound_with_the_distributed_optimizer(ctxs, seed):
    n = check_random_plans(ctxs, random.Random(170 + seed), random_cases(4, 140 + seed, False), SPACE, 250, True)
    assert n["fitted"] >= 40 and n["dist"] >= 5 and n["uneven"] >= 5 and n["few"] >= 2 and n["tp2"] >= 1, n


def _mem_ctx(ctx, gib: float):
    """``ctx`` with both GPU types at ``gib`` GiB (so memory binds at some in-flight counts and not others)."""
    from planner.network import NetworkModel
    from planner.profiles import ProfileStore
    from planner.simulator.settings import SimContext
    cat = ctx.catalog.with_entries({"V100-16": {"memory_bytes": int(gib * 2 ** 30)},
                                    "A100-40": {"memory_bytes": int(gib * 2 ** 30)}})
    return SimContext(ctx.model, ProfileStore(ctx.model, cat), NetworkModel(cat), cat, ctx.settings)


@pytest.mark.parametrize("gib,s_num", [(3.5, 3), (3.87, 4), (3.7, 3)])
def test_memory_masks_per_count_are_simulates(ctxs, gib, s_num):
    """``fit_m[m - 1, g, s, n]`` (the replica fits with min(S - s, m) in flight, recomputation off or on, from
    the memory at 1 and at S - s in flight, affine in between) equals what ``simulate`` says of stage s in a
    one-pipeline plan of group g running m micro-batches on random splits, recomputation off or on."""
    ctx = _mem_ctx(ctxs["small"], gib)
    cluster = parse_gpus("A100-40@z0=4,V100-16@z0=4", ctx.catalog)
    space = replace(SPACE, distributed_optimizer=(False,))
    rng = random.Random(s_num)
    checked = fits = 0
    for mbs in (1, 2):
        grp = chain_groups(cluster, cluster_options(ctx, cluster, space), mbs, ctx)
        core = split_core(ctx, Tables(ctx, replace(space, recompute=(False, True))), grp, s_num, mbs, space, None)
        for gi, (g, z, tp) in enumerate(grp.names):
            for _ in range(5):
                split = random_compositions(rng, ctx.model.num_layers, s_num)
                m = rng.randint(1, s_num + 1)
                ok = np.zeros(s_num, dtype=bool)
                for rec in (False, True):
                    stages, first = [], 0
                    for n in split:
                        stages.append(Stage(first, n, (Replica(g, tp, z),)))
                        first += n
                    plan = Plan(num_layers=ctx.model.num_layers, stages=tuple(stages), micro_batch_size=mbs,
                                global_batch_size=mbs * m, microbatches_per_pipeline=(m,), recompute_activations=rec)
                    ok |= np.array([st.fits_in_memory for st in simulate(plan, ctx).stages])
                for s, n in enumerate(split):
                    assert core.fit_m[min(m, s_num) - 1, gi, s, n] == ok[s], (g, tp, mbs, split, m, s)
                    checked += 1
                    fits += ok[s]
    assert fits >= 5 and checked - fits >= 5, (checked, fits)
