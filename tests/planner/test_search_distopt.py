"""The distributed optimizer as a searched option (docs/PLANNER.md 1 item 9, 2.1): exact against the independent
brute force of ``test_planner_bruteforce.py`` on small clusters (memory-bound ones where only the distributed
optimizer makes a plan fit, bf16 where its sync differs, mixed TP degrees where a rank holds several fine
shards), the pruning rules it relies on, and the CLI flag."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.tables import dist_min_dp
from planner.search.tasks import Tables
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext
from tests.planner.test_planner_bruteforce import GIB, check_exact

ROOT = Path(__file__).resolve().parents[2]
# wide layers, short sequences: the weights and optimizer states weigh as much as the activations
WIDE_MODEL = ModelSpec("bfw", num_layers=4, hidden_size=1024, num_heads=8, ffn_hidden_size=4096, seq_length=512,
                       vocab_size=1024, max_position_embeddings=512)


def _ctx(v100_gib: float, a100_gib: float, model: ModelSpec = WIDE_MODEL) -> SimContext:
    catalog = GPUCatalog().with_entries({"V100-16": {"memory_bytes": int(v100_gib * GIB)},
                                         "A100-40": {"memory_bytes": int(a100_gib * GIB)}})
    return SimContext(model, ProfileStore(model, catalog), NetworkModel(catalog), catalog, OURS)


def test_distributed_optimizer_is_chosen_when_memory_demands_it():
    """On GPUs too small for any plan without it (recomputation searched too), the search returns a plan with
    the distributed optimizer over >= 2 replicas, and the brute force agrees on its value."""
    ctx = _ctx(0.8, 1.0)
    cluster = parse_gpus("V100-16@us-a=4", ctx.catalog)
    base = dict(max_stages=2, mbs_options=(1,), tp_options=(1,))
    assert plan_search(ctx, cluster, 8, Objective("throughput"),
                       SearchSpace(**base, distributed_optimizer=(False,))).best is None
    best = plan_search(ctx, cluster, 8, Objective("throughput"), SearchSpace(**base)).best
    assert best is not None and best.distributed_optimizer and best.num_pipelines >= 2
    plan = build_plan(best, 4, 8, None)
    assert plan.distributed_optimizer and simulate(plan, ctx).fits_in_memory
    assert not simulate(replace(plan, distributed_optimizer=False), ctx).fits_in_memory
    check_exact(ctx, cluster, 8, Objective("throughput"), max_stages=2, mbs_opts=(1,), tp_opts=(1,))


@pytest.mark.parametrize("gpus,objective,precision,tps", [
    ("V100-16@us-a=4,A100-40@us-b=2", Objective("throughput"), "bf16", (1, 2)),       # sync differs in bf16
    ("V100-16@us-a=2,V100-16@us-b=2", Objective("cost"), "bf16", (1,)),               # egress, flat vs hier
    ("V100-16@us-a=2,A100-40@us-a=4", Objective("throughput"), "fp32", (1, 2)),       # mixed TP: fine shards
    ("V100-16@us-a=3,A100-40@us-b=3", Objective("value"), "fp32", (1, 2)),
])
def test_search_matches_brute_force_with_distributed_optimizer(gpus, objective, precision, tps):
    """Memory-bound GPUs where the optimizer states decide what fits; the search over both settings equals the
    brute force over both."""
    ctx = _ctx(0.85, 1.0)
    check_exact(ctx, parse_gpus(gpus, ctx.catalog), 16, objective, max_stages=3, mbs_opts=(1,), tp_opts=tps,
                precision=precision)


def _random_case(seed: int):
    rng = random.Random(seed)
    pools = []
    for g in rng.sample(["V100-16", "A100-40"], rng.randint(1, 2)):
        for z in rng.sample(["us-a", "us-b"], rng.randint(1, 2)):
            pools.append(f"{g}@{z}={rng.randint(1, 4)}")
    kind = rng.choice(["throughput", "cost", "value"])
    objective = Objective(kind, min_throughput_iters_per_s=2.0 if kind == "cost" else None)
    return (",".join(pools), objective, rng.choice(["fp32", "bf16"]), rng.uniform(0.6, 1.2),
            rng.choice([(1,), (1, 2)]))


def _check_random(seed: int) -> None:
    gpus, objective, precision, gib, tps = _random_case(seed)
    ctx = _ctx(gib, gib + 0.2)
    check_exact(ctx, parse_gpus(gpus, ctx.catalog), 8, objective, max_stages=3, mbs_opts=(1,), tp_opts=tps,
                precision=precision, allow_empty=True)


@pytest.mark.parametrize("seed", range(10))
def test_search_matches_brute_force_random_distributed_optimizer(seed):
    """Random small clusters, objectives, precisions and memory sizes (some where only the distributed
    optimizer fits, some where nothing does): the search equals the brute force."""
    _check_random(seed)


@pytest.mark.parametrize("gpus", ["V100-16@us-a=4", "V100-16@us-a=2,V100-16@us-b=2"])
def test_search_matches_brute_force_when_sharded_collectives_are_slower(gpus):
    """A backend whose reduce-scatter + all-gather is 3x the ring model (gloo on CPU measures about that): in
    fp32 with one TP the distributed optimizer no longer dominates, so the dominance rules are off; with room
    for either setting the plain optimizer wins, and the search equals the brute force (which scores with
    simulate). With the rules left on, the search would return the distributed optimizer."""
    ctx = _ctx(8.0, 8.0)
    ctx.settings = ctx.settings.with_(sharded_collective_scale=3.0)
    cluster = parse_gpus(gpus, ctx.catalog)
    best = plan_search(ctx, cluster, 8, Objective("throughput"),
                       SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1,))).best
    assert best is not None and best.num_pipelines >= 2 and not best.distributed_optimizer
    check_exact(ctx, cluster, 8, Objective("throughput"), max_stages=2, mbs_opts=(1,), tp_opts=(1,),
                precision="fp32")


def test_sharded_collective_scale_multiplies_only_the_distributed_optimizer_sync():
    ctx = _ctx(4.0, 4.0)
    plan = next(p for p in _plans(3, 50) if p.dp_degree > 1)
    for dist in (False, True):
        p = replace(plan, distributed_optimizer=dist)
        base = simulate(p, ctx)
        ctx3 = replace(ctx, settings=ctx.settings.with_(sharded_collective_scale=3.0))
        slow = simulate(p, ctx3)
        for a, b in zip(base.stages, slow.stages):
            assert b.sync_s == pytest.approx(a.sync_s * (3.0 if dist else 1.0), rel=1e-12, abs=1e-15)
    with pytest.raises(InputError, match="sharded_collective_scale"):
        ctx.settings.with_(sharded_collective_scale=0.5)


def _plans(seed: int, n: int):
    """Random fp32 plans whose every stage has one TP degree, with the distributed optimizer off."""
    rng = random.Random(seed)
    for _ in range(n):
        s_num = rng.randint(1, 3)
        cuts = sorted(rng.sample(range(1, 4), s_num - 1))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [4])]
        d = rng.randint(1, 4)
        tp = rng.choice([1, 2])
        stages, first = [], 0
        for n_l in sizes:
            reps = tuple(Replica(rng.choice(["V100-16", "A100-40"]), tp, rng.choice(["us-a", "us-b"]))
                         for _ in range(d))
            stages.append(Stage(first, n_l, reps))
            first += n_l
        yield Plan(num_layers=4, stages=tuple(stages), micro_batch_size=1, global_batch_size=8 * d,
                   tie_embeddings=rng.random() < 0.3)


def test_distributed_optimizer_dominates_in_fp32_with_one_tp():
    """The rule that skips plain plans (``distopt.dist_dominated``, ``distopt.chain_dist_options``): in fp32, with
    one TP degree per stage, the same plan with the distributed optimizer is never slower, never dearer and
    never uses more memory per GPU, on random plans (types and zones mixed along and across stages)."""
    ctx = _ctx(16.0, 40.0)
    for plan in _plans(7, 150):
        a = simulate(plan, ctx)
        b = simulate(replace(plan, distributed_optimizer=True), ctx)
        assert b.iteration_time_s <= a.iteration_time_s * (1 + 1e-12)
        assert b.cost_per_iteration_usd <= a.cost_per_iteration_usd * (1 + 1e-12)
        assert b.egress_usd_per_iteration <= a.egress_usd_per_iteration * (1 + 1e-12)
        assert b.peak_memory_bytes <= a.peak_memory_bytes
        if plan.dp_degree > 1:
            assert b.update_s < a.update_s


@pytest.mark.parametrize("gpus,precision", [("V100-16@us-a=4,A100-40@us-b=4", "fp32"),
                                            ("V100-16@us-a=4,A100-40@us-b=4", "bf16")])
def test_dominance_rule_keeps_the_optimum(gpus, precision):
    """Searching both settings gives the better of the two searched alone (the plain setting skipped where
    dominated must not lose the optimum)."""
    ctx = _ctx(0.85, 1.0)
    cluster = parse_gpus(gpus, ctx.catalog)
    base = dict(max_stages=3, mbs_options=(1,), tp_options=(1, 2), precision=precision)
    for objective in (Objective("throughput"), Objective("cost")):
        both = plan_search(ctx, cluster, 16, objective, SearchSpace(**base)).best
        alone = [plan_search(ctx, cluster, 16, objective, SearchSpace(**base, distributed_optimizer=(d,))).best
                 for d in (False, True)]
        assert both.key == pytest.approx(min(c.key for c in alone if c is not None), rel=1e-12)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_top_k_lists_no_one_replica_plan_twice(precision):
    """With one replica per stage the distributed optimizer changes nothing (memory / 1, step / 1, no sync):
    the top-K must not hold the same one-pipeline plan with it on and off (review finding: it did in bf16)."""
    catalog = GPUCatalog()
    ctx = SimContext(WIDE_MODEL, ProfileStore(WIDE_MODEL, catalog), NetworkModel(catalog), catalog, OURS)
    cluster = parse_gpus("V100-16@us-a=8,A100-40@us-b=8", catalog)
    res = plan_search(ctx, cluster, 32, Objective("throughput"), SearchSpace(precision=precision), top_k=20)
    assert len(res.candidates) == 20
    seen = set()
    for c in res.candidates:
        if c.num_pipelines == 1:
            layout = (c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.microbatches, c.chain, c.recompute)
            assert layout not in seen, c
            seen.add(layout)
    assert seen, "no one-pipeline plan among the 20: the case no longer tests the rule"


def test_min_replicas_to_fit_matches_the_simulator():
    """``dist_min_dp`` (the per-split memory filter's exact check) is the smallest D at which simulate() says
    every replica fits, for every split of 1..3 stages, with and without recomputation, one or two fine shards."""
    ctx = _ctx(0.8, 0.9)
    tables = Tables(ctx, SearchSpace())
    for s_num in (1, 2, 3):
        from planner.search.tables import split_family
        counts = split_family(4, s_num)
        for rc in (False, True):
            for g, tp, other in (("V100-16", 1, None), ("V100-16", 1, 2), ("A100-40", 2, None)):
                shards = 1 if other is None else other // tp
                dmin = dist_min_dp(ctx, tables.table(g, tp, 1), counts, "fp32", "adamw", rc, shards).max(axis=1)
                for k, split in enumerate(counts):
                    for d in range(1, 7):
                        reps = tuple(Replica(g, tp, "us-a") for _ in range(d))
                        if other is not None:       # a second replica set of TP `other` sets the fine shards
                            reps = reps + (Replica("A100-40", other, "us-a"),)
                        stages, first = [], 0
                        for n_l in split:
                            stages.append(Stage(first, int(n_l), reps))
                            first += int(n_l)
                        plan = Plan(num_layers=4, stages=tuple(stages), micro_batch_size=1,
                                    global_batch_size=len(reps) * s_num, recompute_activations=rc,
                                    distributed_optimizer=True)
                        est = simulate(plan, ctx)
                        ours = [p for st in est.stages for p, r in zip(st.replica_peak_bytes, reps) if r.gpu_type == g
                                and r.tp == tp]
                        fits = max(ours) <= tables.table(g, tp, 1).usable_bytes
                        assert fits == (len(reps) >= dmin[k]), (s_num, rc, g, tp, other, split, d)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli_plan", *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_cli_no_distributed_optimizer_and_baselines():
    """``--no-distributed-optimizer`` leaves it out; the baselines never use it; the text output says which."""
    common = ["--model", "opt-350m", "--gpus", "V100-16@us-central1-a=16", "--gbs", "64", "--max-stages", "2",
              "--chain-segments", "1"]
    on = _cli(*common, "--json")
    assert on.returncode == 0, on.stderr
    off = _cli(*common, "--json", "--no-distributed-optimizer")
    assert off.returncode == 0, off.stderr
    p_on, p_off = json.loads(on.stdout)["plan"], json.loads(off.stdout)["plan"]
    assert p_off["distributed_optimizer"] is False
    if len(p_on["stages"][0]["replicas"]) > 1:
        assert p_on["distributed_optimizer"] is True
    for planner in ("grid", "sailor", "sailor-space"):
        r = _cli(*common, "--json", "--planner", planner)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["plan"]["distributed_optimizer"] is False
    text = _cli(*common, "--no-distributed-optimizer")
    assert "distributed optimizer off" in text.stdout
    bad = _cli(*common, "--no-distributed-optimizer=1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error")
