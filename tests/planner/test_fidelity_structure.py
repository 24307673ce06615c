"""The model's structure on random heterogeneous plans (hypothesis): a slower link is never faster, more
micro-batches are never faster per micro-batch than the slowest stage allows, more memory never fits less; and
the event timeline agrees with the closed form within 1% where both claim to apply (uniform plans)."""
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from planner.hardware import GPUCatalog
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.sailor_data import load_sailor_data
from planner.simulator import OURS, SAILOR_DEEPSPEED, SimContext, simulate
from planner.simulator.events import simulate_events
from planner.simulator.stage import all_replica_costs

TYPES = ("A100-40", "V100-16")   # the types the fitted file links across all these zones
ZONES = ("us-central1-a", "us-central1-b", "us-west1-b")   # two zones of one region, one other region
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def sd(sailor_data_dir):
    return load_sailor_data(sailor_data_dir, "OPT-350")


@st.composite
def hetero_plans(draw, max_stages=4, max_d=3):
    S = draw(st.integers(1, max_stages))
    D = draw(st.integers(1, max_d))
    cuts = sorted(draw(st.sets(st.integers(1, 23), min_size=S - 1, max_size=S - 1)))
    bounds = [0] + cuts + [24]
    stages = tuple(Stage(bounds[s], bounds[s + 1] - bounds[s], tuple(
        Replica(draw(st.sampled_from(TYPES)), draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from(ZONES)))
        for _ in range(D))) for s in range(S))
    mbs = draw(st.sampled_from((1, 2, 4)))
    counts = tuple(draw(st.integers(1, 12)) for _ in range(D))
    return Plan(num_layers=24, stages=stages, micro_batch_size=mbs, global_batch_size=mbs * sum(counts),
                microbatches_per_pipeline=counts)


def scaled_network(net: NetworkModel, f: float) -> NetworkModel:
    return replace(net, class_links={k: v.scaled(f) for k, v in net.class_links.items()},
                   pair_links={k: v.scaled(f) for k, v in net.pair_links.items()},
                   intra_links={k: v.scaled(f) for k, v in net.intra_links.items()})


def ctx_for(sd, runtime, net=None, catalog=None):
    cat = catalog or sd.profiles.catalog
    return SimContext(sd.model, sd.profiles, net or sd.network, cat, runtime)


@FAST
@given(plan=hetero_plans(), f=st.floats(0.05, 0.95), runtime=st.sampled_from((OURS, SAILOR_DEEPSPEED)))
def test_slower_links_are_never_faster(sd, plan, f, runtime):
    fast = simulate(plan, ctx_for(sd, runtime)).iteration_time_s
    slow = simulate(plan, ctx_for(sd, runtime, scaled_network(sd.network, f))).iteration_time_s
    assert slow >= fast * (1 - 1e-12)


@FAST
@given(plan=hetero_plans(), extra=st.integers(1, 8), runtime=st.sampled_from((OURS, SAILOR_DEEPSPEED)))
def test_more_microbatches_never_beat_the_slowest_stage(sd, plan, extra, runtime):
    """Adding micro-batches never shortens the iteration, and each added micro-batch costs at least a
    pipeline's bottleneck-stage compute: beyond the bubble there is nothing left to amortise."""
    ctx = ctx_for(sd, runtime)
    more = tuple(m + extra for m in plan.microbatch_counts)
    bigger = replace(plan, global_batch_size=plan.micro_batch_size * sum(more), microbatches_per_pipeline=more)
    base, grown = simulate(plan, ctx), simulate(bigger, ctx)
    assert grown.iteration_time_s >= base.iteration_time_s
    costs = all_replica_costs(plan, ctx)
    # each pipeline's bottleneck compute; the slowest pipeline grows by at least its own
    bottleneck = min(max(row[j].fwd_s + row[j].bwd_s for row in costs) for j in range(plan.dp_degree))
    assert grown.iteration_time_s - base.iteration_time_s >= extra * bottleneck * (1 - 1e-9)


@FAST
@given(plan=hetero_plans(), factor=st.floats(1.0, 4.0), gpu=st.sampled_from(TYPES))
def test_more_memory_never_fits_less(sd, plan, factor, gpu):
    cat = sd.profiles.catalog
    bigger = GPUCatalog({**{n: cat.get(n) for n in cat.names()},
                         gpu: replace(cat.get(gpu), memory_bytes=int(cat.get(gpu).memory_bytes * factor))})
    small = simulate(plan, ctx_for(sd, SAILOR_DEEPSPEED)).fits_in_memory
    large = simulate(plan, ctx_for(sd, SAILOR_DEEPSPEED, catalog=bigger)).fits_in_memory
    assert large or not small


@FAST
@given(split=st.sampled_from(((4,), (2, 2), (1, 1, 1, 1))), d=st.integers(1, 3), m=st.integers(1, 12),
       log_bw=st.floats(5, 10), fwd=st.floats(0.5, 3), bwd_ratio=st.floats(1, 3),
       runtime=st.sampled_from((OURS, SAILOR_DEEPSPEED.with_(profile_offset_s=0.0))))
def test_timeline_matches_closed_form_on_uniform_plans(split, d, m, log_bw, fwd, bwd_ratio, runtime):
    """Equal stages of one GPU type in one zone, every pipeline alike: the closed form claims to be exact."""
    from tests.planner.test_simulator import costs, ctx_with, plan
    ctx = ctx_with(runtime, bw=10 ** log_bw, entries=[costs(layer=(fwd, fwd * bwd_ratio))])
    pl = plan(split=split, d=d, gbs=m * d)
    closed = simulate(pl, ctx).iteration_time_s
    assert simulate_events(pl, ctx).makespan_s == pytest.approx(closed, rel=0.01)


@pytest.mark.parametrize("runtime", [SAILOR_DEEPSPEED, OURS], ids=["deepspeed", "ours"])
def test_timeline_matches_closed_form_on_the_gh200_runs(sailor_data_dir, runtime):
    from benchmarks.validate_simulator import NETWORK, load_cases
    from planner.inputs import load_network_file
    sd = load_sailor_data(sailor_data_dir, "OPT-350")
    net = load_network_file(str(NETWORK), sd.network)
    for c in load_cases(sailor_data_dir):
        ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog, runtime, dict(c.info.gpus_per_node),
                         c.info.replica_node_gpus)
        closed = simulate(c.plan, ctx).iteration_time_s
        assert simulate_events(c.plan, ctx).makespan_s == pytest.approx(closed, rel=0.01), c.name
