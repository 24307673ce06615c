"""The search's vectorised evaluator agrees with simulate() on many plans, and its building blocks are exact."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.makespan import assign_counts, min_makespan
from planner.search.netvec import link_time
from planner.search.rows import pareto_min, zone_splits
from planner.search.tables import split_family
from planner.simulator import simulate
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext

SAILOR_DIR = Path(os.environ.get("SAILOR_DATA", Path(__file__).resolve().parents[3] / "shared" / "data" / "sailor"))
MODEL = ModelSpec("ev", num_layers=6, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                  vocab_size=4096, max_position_embeddings=2048)


def _ctx(settings=OURS) -> SimContext:
    cat = GPUCatalog()
    return SimContext(MODEL, ProfileStore(MODEL, cat), NetworkModel(cat), cat, settings)


def _agree(ctx, cluster, gbs, objective, k=60, space=SearchSpace(max_stages=4)):
    res = plan_search(ctx, cluster, gbs, objective, space, top_k=k)
    assert len(res.candidates) > 5
    for c in res.candidates:
        plan = build_plan(c, ctx.model.num_layers, gbs, None, precision=space.precision)
        est = simulate(plan, ctx)
        assert est.iteration_time_s == pytest.approx(c.iteration_s, rel=1e-9)
        assert est.cost_per_iteration_usd == pytest.approx(c.cost_usd, rel=1e-9)
        assert est.num_gpus == c.gpus
        assert est.fits_in_memory
    keys = [c.key for c in res.candidates]
    assert keys == sorted(keys)


@pytest.mark.parametrize("settings", [OURS, SAILOR_DEEPSPEED, OURS.with_(dp_sync_waits_for_all=False),
                                      OURS.with_(grad_sync="hierarchical", per_microbatch_overhead_s=1e-3)])
@pytest.mark.parametrize("objective", [Objective("throughput"), Objective("cost"), Objective("value")])
def test_top_candidates_agree_with_simulate(settings, objective):
    ctx = _ctx(settings)
    cluster = parse_gpus("A100-40@us-a=8,V100-16@us-a=6,V100-16@us-b=6,GH-96@eu-c=4", ctx.catalog)
    _agree(ctx, cluster, 64, objective)


def test_top_candidates_agree_with_simulate_bf16_and_headroom():
    cat = GPUCatalog()
    ctx = SimContext(MODEL, ProfileStore(MODEL, cat, precision="bf16"), NetworkModel(cat), cat,
                     OURS.with_(memory_headroom_fraction=0.1, activation_reserve_factor=1.3))
    cluster = parse_gpus("A100-40@us-a=8,V100-16@us-b=8", ctx.catalog)
    _agree(ctx, cluster, 64, Objective("throughput"), space=SearchSpace(max_stages=4, precision="bf16"))


def test_top_candidates_agree_with_simulate_sailor_data():
    if not (SAILOR_DIR / "sailor" / "Planner").is_dir():
        pytest.skip(f"Sailor data folder not found at {SAILOR_DIR} (set SAILOR_DATA)")
    from planner.sailor_data import load_sailor_data
    sd = load_sailor_data(SAILOR_DIR, "OPT-350")
    for settings in (OURS, SAILOR_DEEPSPEED):
        ctx = SimContext(sd.model, sd.profiles, sd.network, GPUCatalog(), settings, dict(sd.gpus_per_node))
        cl = parse_gpus("A100-40@us-central1-a=16,A100-40@us-central1-b=8,V100-16@us-central1-a=24,"
                        "A100-40@us-west1-b=8", ctx.catalog)
        _agree(ctx, cl, 256, Objective("throughput"), k=40)
        _agree(ctx, cl, 256, Objective("cost", min_throughput_iters_per_s=0.2), k=40)


def test_min_makespan_is_optimal_against_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(40):
        p = int(rng.integers(1, 4))
        n = int(rng.integers(3, 12))
        T = [rng.uniform(0.1, 1.0) + np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 1.0, n - 1))])
             for _ in range(p)]
        D = rng.integers(0, 3, size=p)
        if D.sum() == 0 or D.sum() > n:
            continue
        got = min_makespan(D[None, :].astype(np.int64), T, n)[0]
        sizes = [int(x) for x in D for _ in range(x)]
        owner = [i for i, x in enumerate(D) for _ in range(x)]
        best = np.inf
        for counts in itertools.product(range(1, n + 1), repeat=len(sizes)):
            if sum(counts) == n:
                best = min(best, max(T[o][c - 1] for o, c in zip(owner, counts)))
        assert got == best
        counts = assign_counts([int(x) for x in D], T, n, got)
        assert sum(map(sum, counts)) == n and all(c >= 1 for cs in counts for c in cs)
        assert max(T[i][c - 1] for i, cs in enumerate(counts) for c in cs) <= got


def test_link_time_vectorised_matches_scalar():
    from planner.errors import InputError
    from planner.network import Link
    links = [Link(2.4e9, 0.0, (-0.0024, 0.14, 1.1)), Link(5e9, 1e-5, (0.01, -0.05, 0.3)), Link(1e9, 2e-3)]
    sizes = np.logspace(0, 11, 300)
    for link in links:
        want = []
        for x in sizes:   # the search prices a size simulate refuses (fit not positive / finite there) as inf
            try:
                want.append(link.checked_time_s(x))
            except InputError:
                want.append(np.inf)
        np.testing.assert_allclose(link_time(link, sizes), want, rtol=1e-12)


def test_split_family_and_zone_options():
    fam = split_family(7, 4)
    assert all(r.sum() == 7 and r.min() >= 1 for r in fam)
    assert all(abs(r[2] - r[1]) <= 1 for r in fam)        # even middle, larger stage last or first (staircase)
    assert len({tuple(r) for r in fam}) == len(fam)
    assert len(split_family(6, 3)) == 10          # S <= 3: every composition, C(5, 2)
    opts = zone_splits((2, 3), 10)
    assert {tuple(r) for r in opts} >= {(1, 0), (2, 0), (0, 3), (1, 1), (2, 1), (2, 3)}
    assert (2, 2) in {tuple(r) for r in opts} and (1, 3) not in {tuple(r) for r in opts}


def test_pareto_min():
    c = np.array([[1, 2], [2, 1], [2, 2], [1, 2], [0, 5]])
    assert list(pareto_min(c)) == [0, 1, 4]


def test_zone_options_are_water_filling():
    import random
    from itertools import combinations
    from tests.planner.test_planner_bruteforce import balanced
    rng = random.Random(1)
    for _ in range(150):
        z = rng.randint(1, 4)
        caps = tuple(rng.randint(1, 7) for _ in range(z))
        top = rng.randint(1, 30)
        got = [tuple(r) for r in zone_splits(caps, top)]
        want = {tuple(c) for k in range(1, z + 1) for sub in combinations(range(z), k)
                for d in range(1, min(top, sum(caps[i] for i in sub)) + 1)
                for c in [balanced(list(caps), sub, d)] if c}
        assert len(got) == len(set(got)) and set(got) == want


def test_production_check_rejects_a_mismatched_evaluation():
    """plan_search checks its returned plans against simulate(); a deliberately wrong score must fail."""
    from dataclasses import replace

    from planner.errors import InternalError
    from planner.search.verify import check_candidates
    ctx = _ctx()
    cluster = parse_gpus("A100-40@us-a=8,V100-16@us-b=8", ctx.catalog)
    best = plan_search(ctx, cluster, 64, Objective("throughput"), SearchSpace(max_stages=3)).best
    (plan, est), = check_candidates(ctx, [best], 64)          # the real evaluation passes
    assert est.iteration_time_s == pytest.approx(best.iteration_s, rel=1e-9)
    for bad in (replace(best, iteration_s=best.iteration_s * (1 + 1e-8)),
                replace(best, cost_usd=best.cost_usd * (1 - 1e-8)), replace(best, gpus=best.gpus + 1)):
        with pytest.raises(InternalError):
            check_candidates(ctx, [bad], 64)


def test_sailor_plan_fails_loudly_when_the_evaluator_disagrees(monkeypatch, capsys, tmp_path):
    """A corrupted evaluator inside the search: sailor-plan prints one internal-error line, exits 3, writes
    no plan."""
    from dataclasses import replace

    import planner.search.taskrun as taskrun
    from planner.cli_plan import main
    real = taskrun._candidate

    def skewed(*a, **k):
        c = real(*a, **k)
        return replace(c, iteration_s=c.iteration_s * 1.001)
    monkeypatch.setattr(taskrun, "_candidate", skewed)
    out_file = tmp_path / "plan.json"
    rc = main(["--model", "opt-350m", "--gpus", "A100-40@us-central1-a=8", "--no-comparator", "-o", str(out_file)])
    out, err = capsys.readouterr()
    assert rc == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("internal error:") and "disagree" in lines[0]
    assert not out_file.exists()


def test_sailor_space_comparator_is_even_last_and_never_beats_ours():
    """(b') of the benchmark: Sailor's even split (extras on the last stages) with homogeneous pipelines; it is
    a subset of our space, so our optimum is at least as good, and its plans agree with simulate()."""
    from planner.baselines.spaces import baseline_space
    ctx = _ctx()
    cluster = parse_gpus("A100-40@us-a=8,V100-16@us-a=12,V100-16@us-b=6", ctx.catalog)
    for objective in (Objective("throughput"), Objective("cost")):
        sp = baseline_space("sailor-space", max_stages=4)
        res = plan_search(ctx, cluster, 64, objective, sp, top_k=30)
        for c in res.candidates:
            q, r = divmod(MODEL.num_layers, c.num_stages)
            assert c.layers_per_stage == tuple([q] * (c.num_stages - r) + [q + 1] * r)
        _agree(ctx, cluster, 64, objective, k=30, space=sp)
        ours = plan_search(ctx, cluster, 64, objective, SearchSpace(max_stages=4)).best
        assert ours.key <= res.best.key * (1 + 1e-12)
