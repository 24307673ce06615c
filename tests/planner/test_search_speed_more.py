"""More speed-ups that compute exactly what they replaced (docs/PLANNER.md 2.3, helper h13v): a sync ring prices
each distinct endpoint pair once (the same first slowest link as pricing every pair), ``dist_min_dp`` skips
its last fit check when the rounding settled (still the least D that fits), ``Tables.dist_dmin`` memoises its per-split maxima, and stage
arrays built from precomputed memory terms equal the ones that compute them."""
from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.network import Endpoint
from planner.search import tasks as T
from planner.search.space import SearchSpace
from planner.search.tables import NEVER, _memory_terms, dist_min_dp, memory_terms_of, opt_ratio, stage_arrays
from planner.simulator import formulas as F
from planner.simulator import time as simtime

GPUS = "A100-40@us-central1-a=32,V100-16@us-central1-a=64,V100-16@us-central1-b=32,H100-80@us-west1-b=16"


@pytest.fixture(scope="module")
def ctx():
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    return api.context_for(api.make_context(bundle, None), parse_gpus(GPUS, bundle.catalog))


def test_ring_pairs_priced_once_give_the_same_sync(ctx, monkeypatch) -> None:
    rng = np.random.default_rng(3)
    kinds = [("A100-40", "us-central1-a"), ("V100-16", "us-central1-a"), ("V100-16", "us-central1-b"),
             ("H100-80", "us-west1-b")]
    shared = [Endpoint(g, z) for g, z in kinds]
    cases = []
    for _ in range(150):
        n = int(rng.integers(1, 40))
        picks = rng.integers(0, int(rng.integers(1, len(kinds) + 1)), size=n)
        # the same objects (as the tied all-reduce builds them) or fresh equal ones (as the stage syncs do)
        ends = [shared[i] if rng.random() < 0.5 else Endpoint(*kinds[i]) for i in picks]
        rule = ["flat", "hierarchical", "auto"][int(rng.integers(0, 3))]
        grad = float(rng.uniform(1e6, 1e9))
        param = None if rng.random() < 0.5 else grad / 2
        cases.append((ends, rule, grad, grad * 3, int(rng.choice([1, 2, 4])), param))
    fast = [simtime.zone_aware_sync(e, ctx, r, g, m, c, p) for e, r, g, m, c, p in cases]
    monkeypatch.setattr(simtime, "_distinct_pairs", lambda pairs: pairs)          # every pair, as before
    plain = [simtime.zone_aware_sync(e, ctx, r, g, m, c, p) for e, r, g, m, c, p in cases]
    assert fast == plain
    assert any(len({id(x) for x in e}) < len(e) for e, *_ in cases)


def _fits(ctx, tt, counts, precision, optimizer, recompute, shards):
    """The memory rule itself: does each (split, stage) fit at D replicas with the optimizer states sharded."""
    s_num = counts.shape[1]
    first = (np.arange(s_num) == 0)[None, :]
    last = (np.arange(s_num) == s_num - 1)[None, :]
    params = counts * tt.layer_params + first * tt.emb_params + last * tt.head_params
    ratio = opt_ratio(ctx, tt, counts, params, first, last, shards)
    w, g, _, a, t, ov = _memory_terms(ctx, tt, counts, params, first, last, precision, optimizer, recompute)
    o = F.state_bytes_per_param(precision, optimizer)[2]

    def fits(d):
        o_d = (F.sharded_optimizer_bytes(o, np.asarray(d, dtype=float), True) * ratio) * params
        return F.memory_total((w, g, o_d, a, t, ov)) <= tt.usable_bytes
    return fits


def test_dist_min_dp_and_its_memo_equal_the_plain_computation(ctx) -> None:
    space = SearchSpace()
    tables = T.Tables(ctx, space)
    checked = never = 0
    for g, tp, mbs in [("V100-16", 1, 1), ("V100-16", 2, 4), ("A100-40", 1, 8), ("H100-80", 4, 2)]:
        tt = tables.table(g, tp, mbs)
        for s_num in (1, 2, 3, 5, 8, 16, 32):
            counts = T.splits_for(space, ctx.model.num_layers, s_num)
            for rc in (False, True):
                for shards in (1, 2, 4):
                    got = dist_min_dp(ctx, tt, counts, space.precision, space.optimizer, rc, shards)
                    fits = _fits(ctx, tt, counts, space.precision, space.optimizer, rc, shards)
                    found = got < NEVER              # the least D that fits; NEVER: not even at 2**40
                    assert got.dtype == np.int64 and (got >= 1).all()
                    assert fits(np.where(found, got, 1))[found].all()
                    assert not fits(np.maximum(got - 1, 1))[found & (got > 1)].any()
                    assert not fits(np.full(got.shape, NEVER - 1))[~found].any()
                    checked += 1
                    never += int((got == NEVER).any())
                    per_stage = tables.dist_dmin(g, tp, mbs, s_num, rc, shards, per_stage=True)
                    for _ in range(2):      # computed, then read from the memo
                        assert np.array_equal(tables.dist_dmin(g, tp, mbs, s_num, rc, shards),
                                              per_stage.max(axis=1))
    assert checked == 4 * 7 * 2 * 3 and never > 0


def test_stage_arrays_from_precomputed_terms_equal_the_computed_ones(ctx) -> None:
    space = SearchSpace()
    tables = T.Tables(ctx, space)
    for g, tp, mbs in [("V100-16", 1, 1), ("A100-40", 2, 4), ("H100-80", 8, 2)]:
        tt = tables.table(g, tp, mbs)
        for s_num in (1, 2, 4, 11, 32):
            counts = T.splits_for(space, ctx.model.num_layers, s_num)
            for rc in (False, True):
                args = (ctx, tt, counts, space.precision, space.optimizer, rc, space.tie_embeddings)
                a = stage_arrays(*args)
                b = stage_arrays(*args, memory_terms_of(*args))
                for f in a.__dataclass_fields__:
                    assert np.array_equal(getattr(a, f), getattr(b, f)), f
