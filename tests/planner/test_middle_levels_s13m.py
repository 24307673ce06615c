"""Middle stages above the lowest fitting level (helper s13m; docs/PLANNER.md 2.1, "Uneven middle stages" (b)).

- the formulas-level lemma: on random pipelines (per-layer seconds, overhead, embedding and head seconds, one
  transfer time, memory caps, every micro-batch count), no fitting middle whose largest stage is at least
  ``max(lowest middle) + 2 P / alpha`` beats the lowest level's middle on any ``T(m)``, and every fitting middle
  is matched by one of the lowest middle and :func:`higher_middles` (the split list's rule);
- :func:`higher_middles` is :func:`middle_candidates` above the lowest level, cut at the bound;
- :func:`level_slack_layers`: 0 with blocking p2p, ``2 P / alpha`` from the search's own tables and links;
- brute force with ``simulate``: on random small cases with slow links and tight memory, the best pool plan
  over every contiguous split (memory at S micro-batches in flight, scored at the row's own counts, 3 to S - 1
  per pipeline included) is never better than the best over the split list (``Tables.splits``); with the
  higher levels taken away a found case loses (the test can fail); and ``plan_search`` equals that best.
"""
from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.uneven_middle import GIB, TYPES, _plan, compositions
from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import Link, NetworkModel
from planner.plan import Replica
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, plan_search
from planner.search import midlevels as ML
from planner.search import tasks as T
from planner.search.splits import front_loaded, middle_candidates
from planner.simulator import formulas as F
from planner.simulator import simulate
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext

REL = 1e-9


# ------------------------------------------------------------------------------- formulas-level lemma

def _times(a, mid, c, alpha, beta, emb, head, p2p):
    comp = np.array([alpha * a + emb + beta] + [alpha * x + beta for x in mid] + [alpha * c + head + beta])
    levels = F.period_levels(comp.max(), F.round_trip_bounds(comp, p2p))
    return F.pipeline_s_of_m(levels, float(F.fill_drain_s(comp, p2p)), 2 * len(comp) + 2)


def _middles(total, caps):
    """Every middle with 1 <= c_s <= caps[s] summing to total."""
    for m in compositions(total, len(caps)):
        if all(x <= u for x, u in zip(m, caps)):
            yield m


def test_no_middle_at_or_above_the_bound_beats_the_lowest_level_and_the_list_matches_every_middle():
    rng = random.Random(13)
    checked = 0
    for _ in range(600):
        n = rng.randint(2, 4)
        total = rng.randint(n, 10)
        caps = tuple(sorted(rng.randint(1, total - n + 1) for _ in range(n)))
        if sum(caps) < total:
            continue
        alpha, beta = rng.uniform(0.5, 2.0), rng.uniform(0.0, 1.0)
        emb, head = rng.uniform(0.0, 3.0), rng.uniform(0.0, 12.0)
        p2p = rng.choice([0.0, 0.1, 0.5, 1.0, 3.0, 8.0]) * alpha
        a, c = rng.randint(1, 4), rng.randint(1, 4)
        q, q_first, q_last = 2 * p2p / alpha, (2 * p2p - emb) / alpha, (2 * p2p - head) / alpha
        low = middle_candidates(total, caps)[0]
        t_low = _times(a, low, c, alpha, beta, emb, head, p2p)
        higher = ML.higher_middles(total, caps, q)[1] if a < max(low) + q_first and c < max(low) + q_last else ()
        listed = [low, *higher]
        t_list = [_times(a, m, c, alpha, beta, emb, head, p2p) for m in listed]
        for m in _middles(total, caps):
            t = _times(a, m, c, alpha, beta, emb, head, p2p)
            # the list holds one middle no slower than this one at every micro-batch count at once
            assert any((tl <= t * (1 + REL)).all() for tl in t_list), (total, caps, m, listed, p2p)
            s_num = n + 2       # with m <= 2 or m >= S micro-batches the lowest level is never beaten
            assert (t_low[:2] <= t[:2] * (1 + REL)).all() and (t_low[s_num - 1:] <= t[s_num - 1:] * (1 + REL)).all()
            if max(m) >= max(low) + q or a >= max(low) + q_first or c >= max(low) + q_last:
                assert (t_low <= t * (1 + REL)).all(), (total, caps, m, low, p2p)
            checked += 1
    assert checked > 2000


def test_a_higher_level_can_win_with_few_micro_batches():
    """The lemma is needed: a pipeline of 4 stages running 3 micro-batches with a heavy head and slow links is
    faster on the level-3 staircase (1 | 3, 1 | 1) than on the lowest level's (1 | 2, 2 | 1); with S or more
    micro-batches it is not."""
    alpha, beta, emb, head, p2p = 1.0, 0.0, 0.0, 4.0, 2.5
    low = _times(1, (2, 2), 1, alpha, beta, emb, head, p2p)
    high = _times(1, (3, 1), 1, alpha, beta, emb, head, p2p)
    assert high[2] < low[2] * (1 - 1e-6)           # m = 3
    assert (low[3:] <= high[3:] * (1 + REL)).all()  # m >= 4 = S
    assert ML.higher_middles(4, (3, 3), 2 * p2p / alpha) == (2, ((3, 1),))
    assert ML.higher_middles(4, (3, 3), 0.99) == (2, ())
    assert (2 * p2p - head) / alpha < 1 + 2     # c = 1 is below max(low) + the last stage's slack


def test_higher_middles_are_the_candidates_above_the_lowest_level_cut_at_the_bound():
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 6)
        total = rng.randint(n, 16)
        caps = tuple(sorted(rng.randint(1, total - n + 1) for _ in range(n)))
        cands = middle_candidates(total, caps)
        assert ML.higher_middles(total, caps, math.inf)[1] == tuple(cands[1:]), (total, caps)
        assert ML.higher_middles_rows(total, [caps], math.inf) == [ML.higher_middles(total, caps, math.inf)]
        if not cands:
            continue
        slack = rng.uniform(0, 4)
        low_max, got = ML.higher_middles(total, caps, slack)
        assert low_max == max(cands[0])
        assert ML.higher_middles_rows(total, [caps], slack) == [(low_max, got)]
        want = tuple(m for m in cands[1:] if min(lv for lv in range(1, total + 1) if front_loaded(total, caps, lv)
                                                 == m) < max(cands[0]) + slack)
        assert got == want, (total, caps, slack)


def test_level_splits_cover_every_first_and_last_within_the_caps_and_the_slack():
    L, S = 9, 5
    every, none = ML.EVERY, ML.NONE
    rows, need = ML.level_splits(L, S, {(2, 1, 3, 5, 3)}, every, np.zeros((0, S)))
    got = {tuple(r) for r in rows.tolist()}
    assert need.shape == (len(rows), 3) and ML.keep(need, every).all()
    for a in range(1, L - 3):
        for c in range(1, L - 3 - a + 1):
            total = L - a - c
            for m in middle_candidates(total, [total - 2] * 3)[1:]:
                assert (a,) + m + (c,) in got
            if a <= 2 and c <= 3:
                for m in middle_candidates(total, [min(x, total - 2) for x in (1, 3, 5)])[1:]:
                    assert (a,) + m + (c,) in got
    assert ML.level_splits(L, S, {(2, 1, 3, 5, 3)}, none, np.zeros((0, S)))[0].shape == (0, S)
    assert ML.level_splits(L, 3, set(), every, np.zeros((0, 3)))[0].shape == (0, 3)
    # a finite slack: exactly the rows of the cap-free vector the slack allows, and keep() selects them again
    sl = ML.Slack(2.5, 1.5, 2.5)
    rows, need = ML.level_splits(L, S, set(), sl, np.zeros((0, S)))
    want = set()
    for a in range(1, L - 3):
        for c in range(1, L - 3 - a + 1):
            total = L - a - c
            cands = middle_candidates(total, [total - 2] * 3)
            low = max(cands[0])
            if a < low + 1.5 and c < low + 2.5:
                want |= {(a,) + m + (c,) for m in cands[1:] if max(m) < low + 2.5}
    assert {tuple(r) for r in rows.tolist()} == want
    sub = ML.keep(need, ML.Slack(1.5, 0.5, 2.5))
    def lo(r):
        return max(middle_candidates(sum(r[1:-1]), [sum(r[1:-1]) - 2] * 3)[0])
    assert {tuple(r) for r in rows[sub].tolist()} == {r for r in want if max(r[1:-1]) < lo(r) + 1.5
                                                      and r[0] < lo(r) + 0.5}
    assert len(want) > sub.sum() > 0


# ------------------------------------------------------------------------------- cases with simulate

def slow_case(seed: int, settings=OURS):
    """(ctx, GPU type, label): a few layers, a heavy head (large vocabulary), a slow inter-node link and memory
    near an even pipeline's (caps often bind)."""
    rng = random.Random(seed)
    L = rng.randint(6, 9)
    seq = rng.choice([2048, 4096, 8192])
    vocab = rng.choice([51200, 128000, 256000])
    h = rng.choice([128, 256, 512])
    model = ModelSpec("lv", num_layers=L, hidden_size=h, num_heads=8, ffn_hidden_size=4 * h, seq_length=seq,
                      vocab_size=vocab, max_position_embeddings=seq)
    big = GPUCatalog().with_entries({g: {"memory_bytes": 64 * GIB} for g in TYPES})
    probe = SimContext(model, ProfileStore(model, big), NetworkModel(big), big, settings)
    s_probe = rng.choice([4, 5, 6])
    q, r = divmod(L, s_probe)
    even = [q] * (s_probe - r) + [q + 1] * r
    mem = {g: simulate(_plan(even, [Replica(g, 1, "z")], 8, [8], False, False), probe).peak_memory_bytes
           * rng.uniform(0.6, 1.3) for g in TYPES}
    cat = GPUCatalog().with_entries({g: {"memory_bytes": int(v)} for g, v in mem.items()})
    net = NetworkModel(cat).with_class_links({"inter_node": Link(rng.choice([3e8, 1e9, 3e9, 1e10]), 1e-5)})
    g = rng.choice(TYPES)
    return SimContext(model, ProfileStore(model, cat), net, cat, settings), g, f"seed {seed} L={L} {g}"


def _tables(ctx, g, n_gpus, s_num):
    space = SearchSpace(max_stages=s_num, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), chain_segments=1)
    cluster = parse_gpus(f"{g}@us-a={n_gpus}", ctx.catalog)
    return T.Tables(ctx, space, T.cluster_options(ctx, cluster, space), cluster)


COUNTS = ([3, 3], [4, 4], [3, 3, 3], [2, 5], [4, 3, 2])


def list_loss(ctx, g, s_num, counts) -> tuple[float, tuple, tuple | None]:
    """(best over the split list / best over every contiguous split, the best split, the list's best) of one
    pipeline row of ``g`` with ``counts`` micro-batches; memory at S in flight (the declared space)."""
    listed = {tuple(int(x) for x in r) for r in _tables(ctx, g, 16, s_num).splits(s_num)}
    reps = [Replica(g, 1, "us-a")] * len(counts)
    scored = {}
    for sp in compositions(ctx.model.num_layers, s_num):
        if simulate(_plan(sp, reps, s_num * len(counts), [s_num] * len(counts), False, False), ctx).fits_in_memory:
            scored[sp] = simulate(_plan(sp, reps, sum(counts), counts, False, False), ctx).iteration_time_s
    if not scored:
        return 1.0, (), None
    best = min(scored, key=scored.get)
    ours = [sp for sp in scored if sp in listed]
    if not ours:
        return math.inf, best, None
    got = min(ours, key=scored.get)
    return scored[got] / scored[best], best, got


def _sweep(seeds, depths=(4, 5, 6)):
    worst, n = 1.0, 0
    for seed in seeds:
        ctx, g, label = slow_case(seed)
        for s_num in depths:
            if s_num > ctx.model.num_layers:
                continue
            for counts in COUNTS:
                ratio, best, got = list_loss(ctx, g, s_num, counts)
                assert ratio <= 1 + REL, (label, s_num, counts, best, got, ratio)
                worst, n = max(worst, ratio), n + 1
    return n


def test_the_split_list_is_never_beaten_by_any_contiguous_split():
    assert _sweep(range(30, 42), depths=(4, 5)) >= 80


@pytest.mark.slow
def test_the_split_list_is_never_beaten_by_any_contiguous_split_many_cases():
    # 30 seeds, 450 rows (60 seeds until session 16 cut CI time)
    assert _sweep(range(100, 130)) >= 400


FOUND = 35      # slow_case(35): S = 4, 3 micro-batches per pipeline, (1, 4, 2, 1) beats the lowest level's (1, 3, 3, 1)


def test_without_the_higher_levels_the_list_loses(monkeypatch):
    ctx, g, _ = slow_case(FOUND)
    assert list_loss(ctx, g, 4, [3, 3])[0] == 1.0
    monkeypatch.setattr(ML, "level_slack_layers", lambda *a: ML.NONE)
    ratio, best, got = list_loss(ctx, g, 4, [3, 3])
    assert ratio > 1 + 1e-6 and best == (1, 4, 2, 1), (ratio, best, got)


def test_recomputation_case_with_a_heavy_head_keeps_its_higher_level():
    """benchmarks/uneven_middle.py --slow-links case 1116 (recomputation on, a head heavier than two transfers):
    (1, 4, 2, 1) beats (1, 3, 3, 1) for 3 pipelines sharing 8 micro-batches; the last stage's slack must be taken at
    the recomputation's per-layer seconds, or c = 1 is cut."""
    from benchmarks import uneven_middle as U
    case = U.slow_links(U.random_case(1116), 1116)
    assert case.recompute
    assert (1, 4, 2, 1) in U.search_splits(case, 4)
    reps = U.rows(case, 4)
    res = [U.structure(case, 4, r, declared_fit=True) for r in reps]
    assert any(r is not None and r.best_split == (1, 4, 2, 1) for r in res)
    assert all(r is None or r.search_ratio <= 1 + REL for r in res)


def test_slack_is_zero_with_blocking_p2p_and_two_transfers_per_layer_otherwise():
    ctx, g, _ = slow_case(FOUND)
    tables = _tables(ctx, g, 16, 4)
    sl = ML.level_slack_layers(ctx, tables, tables.options, tables.cluster)
    tt = tables.table(g, 1, 1)
    alpha = float(np.diff(tt.cum_fwd_s)[0] + np.diff(tt.cum_bwd_s)[0])
    p2p = ctx.network.class_links["inter_node"].time_s(ctx.model.boundary_activation_bytes(1, 4))
    assert sl.middle == pytest.approx(2 * p2p / alpha, rel=1e-6) and sl.middle > 1
    alpha_rc = float(2 * np.diff(tt.cum_fwd_s)[0] + np.diff(tt.cum_bwd_s)[0])     # recomputation
    for got, extra in ((sl.last, tt.head_fwd_s + tt.head_bwd_s), (sl.first, tt.emb_fwd_s + tt.emb_bwd_s)):
        assert got == pytest.approx(max((2 * p2p - extra) / alpha, (2 * p2p - extra) / alpha_rc), rel=1e-6)
    assert sl.last < 0 < sl.first       # a head heavier than two transfers: the recomputation alpha counts
    assert ML.level_slack_layers(ctx, tables, tables.options, None) == ML.EVERY
    blocking = replace(ctx, settings=SAILOR_DEEPSPEED)
    assert ML.level_slack_layers(blocking, tables, tables.options, tables.cluster) == ML.NONE


def test_plan_search_equals_the_best_over_every_contiguous_split_on_the_found_case():
    """Pool plans of one type (4 pipelines of 4 stages at most), 6 micro-batches: the search's best equals the
    best over every contiguous split, every row and every micro-batch assignment, scored by ``simulate``."""
    ctx, g, _ = slow_case(FOUND)
    from tests.planner.test_planner_bruteforce import count_splits, structures
    cluster = parse_gpus(f"{g}@us-a=8", ctx.catalog)
    gbs = 6
    best = math.inf
    for split, mbs, pools, reps, rc, do in structures(ctx, cluster, gbs, 4, (1,), (1,), (False,), (False,)):
        for per_pool in count_splits(gbs, [p[3] for p in pools]):
            counts = [m for seq in per_pool for m in seq]
            est = simulate(_plan(split, reps, gbs, counts, rc, do), ctx)
            if est.fits_in_memory:
                best = min(best, est.iteration_time_s)
    space = SearchSpace(max_stages=4, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), chain_segments=1)
    got = plan_search(ctx, cluster, gbs, Objective("throughput"), space).best
    assert got is not None and got.iteration_s == pytest.approx(best, rel=REL), got.layers_per_stage


@pytest.mark.slow
def test_uneven_middle_cases_with_slow_links_are_never_beaten():
    """``benchmarks/uneven_middle.py --slow-links`` as a test: one or two types in one or two zones, both presets,
    recomputation and the distributed optimizer on or off, a slow inter-node link; every row's best contiguous
    split (memory at S in flight) is matched by the search's split list."""
    from benchmarks import uneven_middle as U
    structures = 0
    for seed in range(1000, 1150):
        res = U.run_case(U.slow_links(U.random_case(seed), seed), declared_fit=True)
        for r in res:
            assert r.search_ratio <= 1 + REL, (seed, r.s_num, r.replicas, r.best_split, r.search_split)
        structures += len(res)
    assert structures > 300
