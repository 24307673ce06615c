"""The simulator's core-sharing term (planner.simulator.core_sharing): the slowdown follows the ranks busy at
once on the plan's own timeline, not the rank count; TP ranks hold the core share their profile shows; the
multiplier is a fixed point of the term; and the search gives simulate()'s time under it."""
import json
import sys

import pytest

from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.plan import Plan
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.simulator import simulate
from planner.simulator.constants import core_share_scale
from planner.simulator.core_sharing import busy_ranks_seen, core_demand, core_sharing
from planner.simulator.events import Event, Timeline, simulate_events
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import closed_loop as cl  # noqa: E402

GPU = "cpu-test"
TABLE = ((0.5, 1.0), (1.0, 1.0), (1.5, 1.6), (2.0, 2.0))


def _ctx(tmp_path, tp2_layer_s=(0.01, 0.02)):
    L = cl.MODEL["num_layers"]
    layers = {1: (0.01, 0.02), 2: tp2_layer_s}
    entries = [{"mbs": 1, "tp": tp, "embedding_s": [1e-3, 1e-3], "layers_s": [list(layers[tp])] * L,
                "head_s": [0.01, 0.01], "update_s_per_param": 1e-9} for tp in (1, 2)]
    files = {"profile": tmp_path / "profile.json", "network": tmp_path / "network.json",
             "catalog": tmp_path / "catalog.json"}
    files["profile"].write_text(json.dumps({"format": "megatron-sailor-profile/1", "gpu_type": GPU,
                                            "model": cl.MODEL["name"], "entries": entries}))
    files["network"].write_text(json.dumps({"format": "megatron-sailor-network/1", "class_links": {
        "inter_node": {"bw_bytes_per_s": 1e9}}}))
    files["catalog"].write_text(json.dumps({GPU: {
        "memory_bytes": 2 ** 33, "peak_flops": 1e11, "mem_bw_bytes_per_s": 1e10, "usd_per_hour": 0.1,
        "peak_fp32_flops": 1e11, "intra_node_bw_bytes_per_s": 1e9, "gpus_per_node": 3}}))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(cl.MODEL))
    return cl.sim_context(model, files, gpus_per_node={GPU: 3})


def _plan(stages, counts=None):
    d = cl.plan_dict(stages, 1, counts)
    return Plan.from_dict(dict(d, global_batch_size=sum(counts)) if counts else d)


def _ev(dev, start, end, kind="fwd"):
    return Event(f"s{dev}/r0", dev, 0, kind, 0, start, end)


def test_busy_ranks_seen_by_compute():
    # device 0 computes [0, 2), device 1 computes [1, 3): each compute second sees 1.5 ranks on average
    tl = Timeline((_ev(0, 0, 2), _ev(1, 1, 3)), 3.0, 0)
    assert busy_ranks_seen(tl, {(0, 0): 1.0, (1, 0): 1.0}) == pytest.approx(1.5)
    # a TP-2 replica at half a core each counts as one rank; an update holds a core but is not weighed
    tl = Timeline((_ev(0, 0, 2), _ev(1, 0, 2), _ev(1, 2, 4, "update")), 4.0, 0)
    assert busy_ranks_seen(tl, {(0, 0): 1.0, (1, 0): 2 * 0.5}) == pytest.approx(2.0)
    assert busy_ranks_seen(Timeline((), 0.0, 0), {}) == 0.0


def test_sequential_stages_share_no_cores_but_replicas_do(tmp_path):
    ctx = _ctx(tmp_path)
    L = cl.MODEL["num_layers"]
    # one micro-batch through 3 stages: never two ranks at once, so 3 ranks on 2 cores cost nothing
    seq = core_sharing(_plan([(3, [(GPU, 1)]), (3, [(GPU, 1)]), (L - 6, [(GPU, 1)])], [1]), ctx, 2, 2, TABLE)
    assert seq.busy_ranks == pytest.approx(1.0) and seq.compute_scale == 1.0
    # three data-parallel replicas compute together all the time: the table's slowdown at 3 ranks
    dp = core_sharing(_plan([(L, [(GPU, 1)] * 3)], [3, 3, 3]), ctx, 2, 2, TABLE)
    assert dp.busy_ranks == pytest.approx(3.0)
    assert dp.compute_scale == pytest.approx(core_share_scale(3, 2, 2, TABLE), rel=1e-6)
    # a full 3-stage pipeline: between the two (fill and drain keep some stages idle)
    pipe = core_sharing(_plan([(3, [(GPU, 1)]), (3, [(GPU, 1)]), (L - 6, [(GPU, 1)])]), ctx, 2, 2, TABLE)
    assert 2.0 < pipe.busy_ranks < 3.0
    assert 1.0 < pipe.compute_scale < dp.compute_scale
    # enough cores: nothing
    assert core_sharing(_plan([(3, [(GPU, 1)]), (3, [(GPU, 1)]), (L - 6, [(GPU, 1)])]), ctx, 4, 2,
                        TABLE).compute_scale == 1.0


def test_emulated_type_holds_a_core_for_the_head_of_each_compute(tmp_path):
    """An emulated 2x slower type computes, then sleeps as long: replicas in step still compute together (3
    ranks busy at once), while a one-micro-batch pipeline's stages never overlap either way."""
    ctx = _ctx(tmp_path)
    L = cl.MODEL["num_layers"]
    dp = _plan([(L, [(GPU, 1)] * 3)], [3, 3, 3])
    half = core_sharing(dp, ctx, 2, 2, TABLE, demand_by_type={GPU: 0.5})
    assert half.busy_ranks == pytest.approx(3.0)
    # a head of half each event: the timeline's events of one replica, busy only in their first halves
    tl = Timeline((_ev(0, 0, 2), _ev(1, 1, 3)), 3.0, 0)
    assert busy_ranks_seen(tl, {(0, 0): 1.0, (1, 0): 1.0}, head={(0, 0): 0.5, (1, 0): 0.5}) == pytest.approx(1.0)
    # device 0 busy [0, 2), device 1 [1, 2): its 2 s see 1 then 2 ranks, device 1's 1 s sees 2: (1 + 2 + 2) / 3
    assert busy_ranks_seen(tl, {(0, 0): 1.0, (1, 0): 1.0}, head={(0, 0): 1.0, (1, 0): 0.5}) == pytest.approx(5 / 3)
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(InputError, match="core demand"):
            core_sharing(dp, ctx, 2, 2, TABLE, demand_by_type={GPU: bad})


def test_data_parallel_optimizer_steps_share_the_cores(tmp_path):
    """Three replicas take their optimizer step at the same moment: the step gets the table's slowdown at 3
    ranks; a one-micro-batch pipeline's stages step apart and get less."""
    ctx = _ctx(tmp_path)
    L = cl.MODEL["num_layers"]
    dp = core_sharing(_plan([(L, [(GPU, 1)] * 3)], [3, 3, 3]), ctx, 2, 2, TABLE)
    assert dp.update_busy_ranks == pytest.approx(3.0)
    assert dp.update_scale == pytest.approx(core_share_scale(3, 2, 2, TABLE), rel=1e-9)
    seq = core_sharing(_plan([(3, [(GPU, 1)]), (3, [(GPU, 1)]), (L - 6, [(GPU, 1)])], [1]), ctx, 2, 2, TABLE)
    assert seq.update_busy_ranks < 3.0 and seq.update_scale < dp.update_scale
    # the simulator applies it to the step only
    plan = _plan([(L, [(GPU, 1)] * 3)], [3, 3, 3])
    a = simulate(plan, ctx)
    ctx.settings = ctx.settings.with_(update_scale=2.0)
    b = simulate(plan, ctx)
    assert b.stages[0].update_s == pytest.approx(2.0 * a.stages[0].update_s, rel=1e-12)
    assert b.stages[0].compute_s == a.stages[0].compute_s


def test_multiplier_is_the_fixed_point_of_the_term(tmp_path):
    ctx = _ctx(tmp_path)
    plan = _plan([(3, [(GPU, 1)]), (3, [(GPU, 1)]), (cl.MODEL["num_layers"] - 6, [(GPU, 1)])])
    share = core_sharing(plan, ctx, 2, 2, TABLE)
    ctx.settings = ctx.settings.with_(compute_scale=share.compute_scale)
    again = busy_ranks_seen(simulate_events(plan, ctx), {(s, 0): 1.0 for s in range(3)})
    assert again == pytest.approx(share.busy_ranks, rel=1e-9)
    assert core_share_scale(again, 2, 2, TABLE) == pytest.approx(share.compute_scale, rel=1e-6)


@pytest.mark.parametrize("tp2_layer_s, demand", [((0.01, 0.02), 0.5), ((0.005, 0.01), 1.0),
                                                 ((0.0075, 0.015), 2 / 3)])
def test_tp_rank_core_demand_from_the_profile(tmp_path, tp2_layer_s, demand):
    """TP 2 no faster than TP 1: each rank holds half a core; TP 2 twice as fast: a whole one."""
    ctx = _ctx(tmp_path, tp2_layer_s)
    plan = Plan.from_dict(cl.plan_dict([(cl.MODEL["num_layers"], [(GPU, 2)])], 1))
    got = core_demand(plan, ctx, 0, 0, plan.stages[0].replicas[0])
    # the embedding and head (1e-3 / 0.01 s at both TP degrees) are part of the replica's compute too
    L = cl.MODEL["num_layers"]
    one, two = L * 0.03 + 0.002 + 0.02, L * sum(tp2_layer_s) + 0.002 + 0.02
    assert got == pytest.approx(min(1.0, one / 2 / two), rel=1e-9)
    assert got == pytest.approx(demand, abs=0.1)


def test_search_gives_simulate_time_under_core_sharing(tmp_path):
    ctx = _ctx(tmp_path)
    plan = _plan([(3, [(GPU, 1)]), (3, [(GPU, 1)]), (cl.MODEL["num_layers"] - 6, [(GPU, 1)])])
    share = core_sharing(plan, ctx, 2, 2, TABLE)
    ctx.settings = ctx.settings.with_(compute_scale=share.compute_scale, update_scale=1.7)
    assert ctx.settings.compute_scale > 1.0
    cluster = parse_gpus(f"{GPU}@{cl.ZONE}=3", ctx.catalog)
    res = plan_search(ctx, cluster, cl.GBS, Objective(), SearchSpace(max_stages=3), top_k=4)   # verify=True
    assert res.candidates
    for c in res.candidates:
        est = simulate(build_plan(c, ctx.model.num_layers, cl.GBS, None), ctx)
        assert est.iteration_time_s == pytest.approx(c.iteration_s, rel=1e-9, abs=0)
