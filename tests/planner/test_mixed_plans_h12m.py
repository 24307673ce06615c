"""Mixed plans (planner/search/mixplan.py, docs/PLANNER.md 8): stages shared by pipelines of different chains.

Checked: every mixed plan the local search scores is scored as ``simulate`` scores it (rel 1e-9), stays within
the pools and keeps Sailor's shape (D replicas on every stage, the base's split and micro-batch size, counts
>= 1 summing to N); the water-filled counts are the best over every count vector (brute force); on the small
random clusters of benchmarks/sailor_full_space.py ours with mixed plans is >= the exact (b) and never worse
than without; on the known mixing case the local search from (b') finds a plan mixing chains at least as good
as the exact (b); the engine's production check catches a mixed candidate whose scores were tampered with."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from itertools import product
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from sailor_full_space import contexts, random_cases, sailor_full_space_best  # noqa: E402

from planner.baselines.spaces import PLANNERS  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.errors import InternalError  # noqa: E402
from planner.search import Objective, build_plan, plan_search  # noqa: E402
from planner.search.verify import check_candidates  # noqa: E402
from planner.search import mixplan as M  # noqa: E402
from planner.search.tasks import cluster_options  # noqa: E402
from planner.simulator import simulate  # noqa: E402

A, V = "A100-40", "V100-16"
ZA, ZB = "us-central1-a", "us-central1-b"
OPTS = dict(max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))
SAILOR = ROOT.parent / "shared" / "data" / "sailor"


@pytest.fixture(scope="module")
def ctxs():
    return contexts(SAILOR if SAILOR.is_dir() else None)


def _space(name: str, **kw):
    return replace(PLANNERS[name], **{**OPTS, **kw})


def _caps(cluster) -> dict:
    out: dict = {}
    for p in cluster.pools:
        out[(p.gpu_type, p.zone)] = out.get((p.gpu_type, p.zone), 0) + p.count
    return out


def _check_mixed(ctx, cluster, gbs, base, cand) -> None:
    """``cand`` is scored as simulate scores its plan, within the pools, of the base's shape."""
    plan = build_plan(cand, ctx.model.num_layers, gbs, None)
    est = simulate(plan, ctx)
    assert math.isclose(cand.iteration_s, est.iteration_time_s, rel_tol=1e-9, abs_tol=0.0)
    assert math.isclose(cand.cost_usd, est.cost_per_iteration_usd, rel_tol=1e-9, abs_tol=0.0)
    assert cand.gpus == est.num_gpus and est.fits_in_memory
    caps = _caps(cluster)
    for pool, used in cand.gpus_by_pool().items():
        assert used <= caps.get(pool, 0), (pool, used)
    d = plan.dp_degree
    assert all(len(st.replicas) == d for st in plan.stages)
    assert tuple(st.num_layers for st in plan.stages) == tuple(base.layers_per_stage)
    assert plan.micro_batch_size == base.mbs
    assert min(plan.microbatch_counts) >= 1 and sum(plan.microbatch_counts) * base.mbs == gbs
    pipes = cand.pipeline_chains()
    assert len(pipes) == d and all(len(c) == plan.num_stages for c in pipes)


def _mixing_case(ctxs):
    if "opt-350" not in ctxs:
        pytest.skip("Sailor's data not present")
    ctx = ctxs["opt-350"]
    return ctx, parse_gpus(f"{V}@{ZA}=4,{V}@{ZB}=4", ctx.catalog), 4


def test_known_mixing_case_from_the_comparator_reaches_the_exact_b(ctxs):
    """OPT-350, 4 V100 in each of two zones, S <= 2, D <= 2: the exact (b) mixes two chains crossing the zones
    in opposite directions; from (b') (the sailor-space search's best) the local search finds a plan that
    mixes chains and is at least as good as the exact (b)."""
    ctx, cluster, gbs = _mixing_case(ctxs)
    objective = Objective()
    b, _, _ = sailor_full_space_best(ctx, cluster, gbs, objective, 2, (1, 2), (1, 2), 2)
    space = _space("sailor-space", max_stages=2)
    base = plan_search(ctx, cluster, gbs, objective, space).best
    assert base.key > b * (1 + 1e-6)                  # (b') alone misses it
    found = M.improve(ctx, cluster, gbs, objective, cluster_options(ctx, cluster, space), base, min_gain=0.0)
    assert found is not None and found.key <= b * (1 + 1e-9)
    assert len({c for c, _ in found.mix}) >= 2 and any(len(set(c)) > 1 for c, _ in found.mix)
    _check_mixed(ctx, cluster, gbs, base, found)


def test_plan_search_with_mixed_plans_improves_the_known_case_and_passes_its_check(ctxs, monkeypatch):
    """``plan_search`` with ``mixed_plans`` on the mixing case: the mixed plan beats the plain one by less than
    ``MIN_GAIN``, so by default the plain plan is returned; with ``MIN_GAIN`` 0 the mixed plan is returned, the
    engine's check passes on it, and the same candidate with a tampered iteration time fails it."""
    ctx, cluster, gbs = _mixing_case(ctxs)
    space = _space("ours", max_stages=2)
    plain = plan_search(ctx, cluster, gbs, Objective(), space).best
    kept = plan_search(ctx, cluster, gbs, Objective(), replace(space, mixed_plans=True)).best
    assert not M.is_mixed(kept) and kept.key == plain.key
    monkeypatch.setattr(M, "MIN_GAIN", 0.0)
    mixed = plan_search(ctx, cluster, gbs, Objective(), replace(space, mixed_plans=True)).best
    assert M.is_mixed(mixed) and plain.key * (1 - 1e-3) <= mixed.key < plain.key
    _check_mixed(ctx, cluster, gbs, plain, mixed)
    check_candidates(ctx, [mixed], gbs)
    with pytest.raises(InternalError):
        check_candidates(ctx, [replace(mixed, iteration_s=mixed.iteration_s * 1.001)], gbs)


def test_every_move_is_scored_as_simulate_and_within_the_pools(ctxs):
    """Every neighbour of the base plans of a few small clusters (adds, crossovers, swaps) that fits: scored
    as ``simulate`` scores it, within the pools, of the base's shape (>= 20 plans checked)."""
    checked = 0
    for case in random_cases(6, 3, False):
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        for name in ("ours", "sailor-space"):
            space = _space(name)
            res = plan_search(ctx, cluster, case.gbs, Objective(case.objective), space)
            if res.best is None:
                continue
            base = res.best
            pipes = base.pipeline_chains()
            caps = _caps(cluster)
            used = M.usage(pipes)
            free = {p: caps[p] - used.get(p, 0) for p in caps}
            opts = cluster_options(ctx, cluster, space)
            groups = [(g, z, tp) for (g, z) in caps for m, tp in opts.get(g, ()) if m == base.mbs]
            chains = M.candidate_chains(pipes, groups, base.num_stages)
            shape = M.Shape.of(base, case.gbs)
            for new in list(M._moves(pipes, chains, free, case.gbs // base.mbs))[:12]:
                res2 = M.score(ctx, shape, new, Objective(case.objective))
                if res2 is None:
                    continue
                _check_mixed(ctx, cluster, case.gbs, base, res2[0])
                assert res2[0].pipeline_chains() == new
                checked += 1
    assert checked >= 20


def test_water_fill_is_the_best_count_vector(ctxs):
    """The water-filled counts' largest pipeline makespan (simulate's ``pipeline_s``) equals the smallest over
    every vector of positive counts summing to N (brute force, mixed plans of 2-3 pipelines)."""
    ctx = ctxs["small"]
    shape = M.Shape((2, 2), 1, 8, "fp32", "adamw", False, False, False)
    g1, g2, g3 = (A, ZA, 1), (V, ZA, 2), (V, ZB, 1)
    for pipes in ([(g1, g2), (g2, g1)], [(g1, g1), (g2, g3), (g3, g2)], [(g1, g3), (g1, g1), (g2, g2)]):
        base = tuple([8 // len(pipes)] * len(pipes))
        plan = M.plan_of(shape, pipes, base if sum(base) == 8 else (3, 3, 2), 4, None)
        counts, makespan = M.water_fill(ctx, plan)
        assert sum(counts) == 8 and min(counts) >= 1
        got = max(simulate(M.plan_of(shape, pipes, counts, 4, None), ctx).pipeline_s)
        assert math.isclose(got, makespan, rel_tol=1e-9)
        best = min(max(simulate(M.plan_of(shape, pipes, c, 4, None), ctx).pipeline_s)
                   for c in product(range(1, 9), repeat=len(pipes)) if sum(c) == 8)
        assert math.isclose(got, best, rel_tol=1e-9), (pipes, counts)


def _random_check(ctxs, n: int, seed: int, max_d: int) -> int:
    mixes = 0
    for case in random_cases(n, seed, False):
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        objective = Objective(case.objective)
        b, _, _ = sailor_full_space_best(ctx, cluster, case.gbs, objective, 3, (1, 2), (1, 2), max_d)
        space = _space("ours")
        plain = plan_search(ctx, cluster, case.gbs, objective, space).best
        mixed = plan_search(ctx, cluster, case.gbs, objective, replace(space, mixed_plans=True)).best
        if plain is None:
            assert mixed is None and b == math.inf
            continue
        assert mixed.key <= plain.key                     # only adds candidates
        assert mixed.key <= b * (1 + 1e-9), case          # ours >= the exact (b)
        if M.is_mixed(mixed):
            mixes += 1
            _check_mixed(ctx, cluster, case.gbs, plain, mixed)
    return mixes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_small_clusters_never_worse_and_at_least_the_exact_b(ctxs, seed):
    """8 seeded small clusters per seed (D <= 3 enumerated for (b)): ours with mixed plans <= ours without
    and <= the exact (b)."""
    _random_check(ctxs, 8, seed, 3)


FIG12 = ",".join(f"{g}@{z}=128" for g in (A, V) for z in (ZA, ZB))


def test_sailor_plan_mixed_plans_flag_prints_writes_and_simulates_the_mixed_plan(capsys, tmp_path, monkeypatch):
    """``sailor-plan --mixed-plans`` (Fig12's cluster, ``MIN_GAIN`` 0 so that its 0.02 % mixed plan is kept):
    the text lists the pipelines per chain and says the plan came from the local search; ``--json`` says
    ``mixed_plan``; the written plan mixes chains in a stage and ``sailor-sim`` scores it as the search did.
    Without the flag the plan is the exact search's; with ``--planner grid`` the flag is one error line, exit 2."""
    from planner.cli_plan import main
    from planner.cli_sim import main as sim_main
    from planner.plan import Plan
    data = ["--sailor-data", str(SAILOR), "--model", "OPT-350", "--gpus", FIG12,
            "--max-cost-per-iter", "1.2", "--no-comparator"]
    assert main(data) == 0
    plain = capsys.readouterr().out
    assert "(exact search)" in plain and "local search" not in plain
    monkeypatch.setattr(M, "MIN_GAIN", 0.0)
    assert main(data + ["--mixed-plans"]) == 0
    text = capsys.readouterr().out
    assert "local search for mixed plans" in text and " x A100-40@" in text.replace("\n", " ")
    path = tmp_path / "plan.json"
    assert main(data + ["--mixed-plans", "--json", "-o", str(path)]) == 0
    out = json.loads(capsys.readouterr().out.split("plan written")[0])
    assert out["search"] == {"complete": True, "mixed_plan": True}
    plan = Plan.load(path)
    pipes = {tuple((st.replicas[j].gpu_type, st.replicas[j].zone, st.replicas[j].tp) for st in plan.stages)
             for j in range(len(plan.stages[0].replicas))}
    assert len({p for p in pipes if len(set(p)) > 1}) >= 1 and len(pipes) >= 2      # chains of several shapes
    assert sim_main([str(path), *data[:4], "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time_s"] == pytest.approx(out["estimate"]["iteration_time_s"], rel=1e-12)
    assert main(data + ["--mixed-plans", "--planner", "grid"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --mixed-plans applies to --planner ours only, got --planner grid"]
