"""Session 14 (helper s14t): :func:`planner.search.midcaps.cap_vectors` builds every depth's cap vectors in one
pass over the tasks (the elementwise largest smallest-D over a task's types, counted at its values); it must give
exactly the vectors of the per-depth rule it replaced (each type's caps at each of its own replica-count steps,
combined by the least cap at every D of the union of the types' steps), kept here as the reference."""
from __future__ import annotations

from bisect import bisect_right
from itertools import combinations, product
import math

import numpy as np
import pytest

from benchmarks.uneven_middle import random_case
from planner.cluster import parse_gpus
from planner.search import SearchSpace
from planner.search import tasks as T
from planner.search.caps import caps_for
from planner.search.midcaps import cap_vectors, type_dmin
from planner.search.tables import NEVER


def _steps(ctx, tables, g, tp, mbs, s_num, rc, dist, shards):
    m = type_dmin(ctx, tables, g, tp, mbs, s_num, rc, dist, shards)
    levels = np.unique(m)
    levels = levels[levels < NEVER] if dist else np.array([1])
    caps = (m[None, :, :] <= levels[:, None, None]).sum(axis=1) if len(levels) else np.zeros((0, m.shape[1]))
    return tuple(zip(levels.tolist(), map(tuple, caps.tolist())))


def reference_cap_vectors(ctx, tables, options, s_num, cluster):
    """The per-depth rule of sessions 12-13, step by step."""
    sp = tables.space
    top = ctx.model.num_layers - s_num + 1
    if s_num < 4 or top < 2:
        return set()
    types = sorted(options)
    max_types = min(len(types), sp.max_gpu_types or len(types))
    out = set()
    for mbs in sorted({m for g in types for m, _ in options[g]}):
        choices = {g: sorted({t for m, t in options[g] if m == mbs}) for g in types}
        room = {(g, t): NEVER if cluster is None else sum(c for _, c in caps_for(cluster, g, t, s_num))
                for g in types for t in choices[g]}
        choices = {g: [t for t in c if room[g, t] > 0] for g, c in choices.items()}
        for rc, dist in product(sp.recompute, sp.distributed_optimizer):
            for k in range(1, max_types + 1):
                for subset in combinations(types, k):
                    for tps in product(*(choices[g] for g in subset)):
                        lcm = math.lcm(*tps)
                        steps = [_steps(ctx, tables, g, t, mbs, s_num, rc, dist, lcm // t if dist else 1)
                                 for g, t in zip(subset, tps)]
                        if any(not st for st in steps):
                            continue
                        dcap = sum(room[g, t] for g, t in zip(subset, tps))
                        for d in sorted({d for st in steps for d, _ in st if d <= dcap}):
                            at = [bisect_right(st, (d, (1 << 62,))) - 1 for st in steps]
                            if min(at) < 0:
                                continue
                            cap = tuple(map(min, zip(*(st[i][1] for st, i in zip(steps, at)))))
                            if min(cap) >= 1 and min(cap[1:-1]) < top:
                                out.add(cap)
    return out


def _case(seed: int, with_cluster: bool):
    case = random_case(seed)
    space = SearchSpace(mbs_options=(1, 2), tp_options=(1, 2, 4), recompute=(False, True),
                        distributed_optimizer=(False, True))
    cluster = parse_gpus(",".join(f"{g}@{z}={n * 4}" for g, z, n in case.pools), case.ctx.catalog)
    options = T.cluster_options(case.ctx, cluster, space)
    return case.ctx, T.Tables(case.ctx, space, options, cluster if with_cluster else None)


@pytest.mark.parametrize("seed", range(2000, 2040))
def test_all_depth_cap_vectors_equal_the_per_depth_rule(seed):
    ctx, tables = _case(seed, with_cluster=seed % 4 != 0)
    L = ctx.model.num_layers
    for s in range(1, L + 2):
        want = reference_cap_vectors(ctx, tables, tables.options, s, tables.cluster)
        got = cap_vectors(ctx, tables, tables.options, s, tables.cluster)
        assert got == want, (seed, s, sorted(got ^ want)[:5])


def test_some_random_case_has_binding_vectors_with_several_steps():
    """The comparison above is not vacuous: some cases give vectors, at several replica counts."""
    many = 0
    for seed in range(2000, 2040):
        ctx, tables = _case(seed, with_cluster=True)
        got = [cap_vectors(ctx, tables, tables.options, s, tables.cluster) for s in range(4, ctx.model.num_layers)]
        many += sum(len(v) for v in got) >= 3
    assert many >= 3


def _separate_probe_tables(ctx, tables, g, tp, mbs, rc, dist, shards):
    """The middle and end probe tables computed apart, as before session 14."""
    from planner.search.midcaps import _dmin, _probe
    L = ctx.model.num_layers
    tt = tables.table(g, tp, mbs)
    counts, inflight, none = _probe(L), np.arange(L, 0, -1), np.zeros((1, L), dtype=bool)
    mid = _dmin(ctx, tables, tt, counts, none, none, inflight, rc, dist, shards)
    ends = np.repeat(np.arange(1, counts.shape[0] + 1)[:, None], L + 1, axis=1)
    first = (np.arange(L + 1) < L)[None, :]
    end = _dmin(ctx, tables, tt, ends, first, ~first, np.append(inflight, 1), rc, dist, shards)
    return mid, end


@pytest.mark.parametrize("seed", range(2000, 2020))
def test_one_call_probe_tables_equal_the_separate_ones(seed):
    ctx, tables = _case(seed, with_cluster=True)
    L = ctx.model.num_layers
    for g, opts in tables.options.items():
        for mbs, tp in opts:
            for rc, dist, shards in ((False, False, 1), (True, False, 1), (False, True, 1), (True, True, 2)):
                type_dmin(ctx, tables, g, tp, mbs, min(4, L), rc, dist, shards)
                got = tables.memo[("midcap", g, tp, mbs, rc, dist, shards)]
                want = _separate_probe_tables(ctx, tables, g, tp, mbs, rc, dist, shards)
                assert all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(got, want)), (seed, g, tp)
