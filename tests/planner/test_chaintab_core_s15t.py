"""chaintab.stage_core reads each (GPU type, TP)'s rows once and copies them to the same type's groups in other
zones (session 15): every field equals the group-by-group rule it replaced (kept below as the reference), on the
random chain cases (several zones per type, plain and distributed optimizer, with and without recomputation)."""
from __future__ import annotations

import numpy as np
import pytest

from planner.model import ModelSpec
from planner.search import SearchSpace, chains
from planner.search.chaintab import StageTab, stage_core
from planner.search.tasks import Tables, cluster_options
from planner.simulator import formulas as F
from tests.planner.chain_cases import random_chain_case

MODEL = ModelSpec("core15", num_layers=6, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                  vocab_size=1024, max_position_embeddings=2048)
SPACE = SearchSpace(max_stages=4, mbs_options=(1, 2), tp_options=(1, 2), recompute=(False, True),
                    distributed_optimizer=(False, True), chain_segments=3)


def _reference(ctx, tables, grp, mbs, counts, recompute, d_cap, precision, dist) -> StageTab:
    """The rule before session 15: every group's rows read from its own table, one group at a time."""
    rows = [tables.raw_arrays(g, tp, mbs, counts, recompute) for g, _, tp in grp.names]
    usable = [tables.table(g, tp, mbs).usable_bytes for g, _, tp in grp.names]
    comp, bwd, upd, params = (np.stack([np.asarray(getattr(r, f)[0], dtype=float) for r in rows])
                              for f in ("compute_s", "bwd_s", "update_s", "params"))
    plain_fit = np.stack([r.memory_bytes[0] <= u for r, u in zip(rows, usable)])
    dmin = np.ones(comp.shape, dtype=np.int64)
    if dist:
        for gi, (g, _, tp) in enumerate(grp.names):
            if not plain_fit[gi].all():
                dmin[gi] = tables.dist_dmin(g, tp, mbs, counts.shape[1], recompute, 1, counts, per_stage=True)[0]
    fits = (dmin <= d_cap) if dist else plain_fit
    return StageTab(comp, bwd, upd, fits, None, None, None, dmin, upd / d_cap if dist else upd,
                    F.bytes_per_element(precision) if dist else None, params, d_cap)


@pytest.mark.parametrize("seed", range(6))
def test_stage_core_equals_the_group_by_group_rule(seed):
    ctx, cluster, gbs, _ = random_chain_case(MODEL, 2000 + seed, 9, (4, 8, 16, 32, 64))
    options = cluster_options(ctx, cluster, SPACE)
    tables = Tables(ctx, SPACE)
    n = 0
    for s_num, counts, mbs, n_mb, grp, d_cap, rc, dist in chains.chain_units(ctx, cluster, options, gbs, SPACE):
        got = stage_core(ctx, tables, grp, mbs, counts, rc, d_cap, SPACE.precision, dist)
        want = _reference(ctx, Tables(ctx, SPACE), grp, mbs, counts, rc, d_cap, SPACE.precision, dist)
        for f in ("comp", "bwd", "upd", "fits", "dmin", "upd_floor", "params"):
            a, b = getattr(got, f), getattr(want, f)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f
        assert got.param_bytes == want.param_bytes and got.d_cap == want.d_cap
        n += 1
    assert n > 0


def test_the_cases_hold_one_type_in_several_zones():
    """The comparison above is not vacuous: some of its units have groups of one (type, TP) in two zones."""
    twins = 0
    for seed in range(6):
        ctx, cluster, gbs, _ = random_chain_case(MODEL, 2000 + seed, 9, (4, 8, 16, 32, 64))
        for *_, grp, _d, _rc, _dist in chains.chain_units(ctx, cluster, cluster_options(ctx, cluster, SPACE), gbs,
                                                          SPACE):
            twins += len(grp.names) - len({(g, tp) for g, _, tp in grp.names})
    assert twins > 0
