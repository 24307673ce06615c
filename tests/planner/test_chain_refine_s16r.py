"""Segment-split refinement of chain plans (docs/PLANNER.md 2.7, ``chain_splits == "refine"``): never worse than
the even split's search, every refined plan scored as ``simulate`` scores it, on small cases the best segment
split of the refined chain's shape by brute force, Fig8b 32+96's better chain found; the flag checked."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.chains import score_chain
from planner.search.netvec import LinkCache
from planner.search.space import CHAIN_SPLITS
from planner.search.tasks import Tables
from planner.simulator import simulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_chain_splits_s15c import _case, _plan, _runs, _splits_by_hand  # noqa: E402
from test_planner_bruteforce import chain_count_choices  # noqa: E402
from test_planner_bruteforce import sailor_ctx as sailor_opt  # noqa: E402,F401 - the OPT-350 fixture

A, V = "A100-40", "V100-16"
KW = dict(max_stages=3, mbs_options=(1,), tp_options=(1, 2), recompute=(False,))


def _key(objective, est) -> float:
    ok = est.fits_in_memory and objective.allows(est.iteration_time_s, est.cost_per_iteration_usd, est.num_gpus)
    return objective.key(est.iteration_time_s, est.cost_per_iteration_usd) if ok else float("inf")


def _shape_best(ctx, cluster, gbs, objective, cand) -> float:
    """min objective key (``simulate``) over every segment split of ``cand``'s chain shape (its groups per
    stage, its runs) x D x micro-batch counts, its micro-batch size and optimizer settings."""
    seq = [(g, t, z) for g, z, t in cand.chain]
    need: dict[tuple[str, str], int] = {}
    for g, t, z in seq:
        need[(g, z)] = need.get((g, z), 0) + t
    d_max = min(min(cluster.count(g, z) // n for (g, z), n in need.items()), gbs // cand.mbs)
    best = float("inf")
    for split in _splits_by_hand(ctx.model.num_layers, _runs(seq)):
        for d in range(1, d_max + 1):
            for counts in chain_count_choices(gbs // cand.mbs, d):
                est = simulate(_plan(split, seq, d, cand.mbs, gbs, counts, cand.recompute,
                                     cand.distributed_optimizer), ctx)
                best = min(best, _key(objective, est))
    return best


@pytest.mark.parametrize("seed,wins", [(5, True), (23, True), (25, True), (29, True), (0, False)])
def test_refine_never_worse_scored_as_simulate_best_split_of_its_shape(seed, wins):
    """Seeded small clusters (the segment search's cases): the refined search's best is never worse than the
    even split's, its key is ``simulate``'s, and where it returns a chain with its own run totals (``wins``:
    the case exercises one), no segment split of that chain shape (any D, any micro-batch counts, by brute
    force with ``simulate``) scores better."""
    ctx, cluster, gbs, objective, dist = _case(seed)
    kw = dict(KW, distributed_optimizer=dist)
    even = plan_search(ctx, cluster, gbs, objective, SearchSpace(**kw)).best
    ref = plan_search(ctx, cluster, gbs, objective, SearchSpace(chain_splits="refine", **kw)).best
    assert even is not None
    assert ref.key <= even.key and wins == (ref.key < even.key)
    est = simulate(build_plan(ref, ctx.model.num_layers, gbs, None), ctx)
    assert _key(objective, est) == pytest.approx(ref.key, rel=1e-9)
    if wins:        # a refined chain: two or three runs, its split the best of its shape
        assert ref.chain and 2 <= len(_runs(ref.chain)) <= 3
        assert ref.key == pytest.approx(_shape_best(ctx, cluster, gbs, objective, ref), rel=1e-9)


def test_fig8b_32_96_refine_finds_the_split_witness(sailor_opt):
    """Fig8b 32+96 (OPT-350, GBS 1024, S <= 4): the even split's best is beaten by the refinement, whose plan
    scores at least as well as the witness V100 (4 layers) x 3 -> A100 (12), TP 1, 32 pipelines, distributed
    optimizer (:func:`score_chain` with that split) and as ``simulate`` scores it."""
    ctx, z, gbs = sailor_opt, "us-central1-a", 1024
    cluster = parse_gpus(f"{A}@{z}=32,{V}@{z}=96", ctx.catalog)
    kw = dict(max_stages=4, mbs_options=(1,), recompute=(False,))
    even = plan_search(ctx, cluster, gbs, Objective(), SearchSpace(**kw)).best
    ref = plan_search(ctx, cluster, gbs, Objective(), SearchSpace(chain_splits="refine", **kw)).best
    witness = score_chain(ctx, cluster, Tables(ctx, SearchSpace(**kw)), LinkCache(ctx),
                          ((V, z, 1),) * 3 + ((A, z, 1),), 32, 1, gbs, distributed_optimizer=True,
                          layers=(4, 4, 4, 12))
    assert witness is not None and witness.key < even.key
    assert ref.key <= witness.key * (1 + 1e-12)
    est = simulate(build_plan(ref, ctx.model.num_layers, gbs, None), ctx)
    assert est.fits_in_memory and est.iteration_time_s == pytest.approx(ref.iteration_s, rel=1e-9)


def test_chain_splits_flag_one_list_and_defaults(capsys):
    """PlanRequest and SearchSpace accept exactly :data:`CHAIN_SPLITS`; both default to the even split (the
    refinement is off by default); a bad ``--chain-splits`` is one line naming the flag and the value, exit 2."""
    from planner.api import PlanRequest
    from planner.cli_plan import main
    from planner.errors import InputError
    cluster = parse_gpus(f"{A}@z=2", GPUCatalog())
    for value in CHAIN_SPLITS:
        assert SearchSpace(chain_splits=value).chain_splits == value
        assert PlanRequest(cluster=cluster, global_batch_size=4, chain_splits=value).chain_splits == value
    with pytest.raises(InputError):
        SearchSpace(chain_splits="refined")
    assert PlanRequest(cluster=cluster, global_batch_size=4).chain_splits == "even"     # off by default (2.7)
    assert SearchSpace().chain_splits == "even"
    assert main(["--model", "opt-350m", "--gpus", f"{A}@z=2", "--gbs", "4", "--chain-splits", "refined"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--chain-splits" in err[0] and "'refined'" in err[0]
