"""Simulator formulas on hand-computed cases, and monotonicity properties."""
from dataclasses import replace

import pytest

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.network import Link, NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import LayerCosts, ProfileStore
from planner.simulator import OURS, SAILOR_DEEPSPEED, SimContext, simulate
from planner.simulator.memory import inflight_microbatches

TINY = get_model("tiny")  # 4 layers, hidden 64, seq 32
BOUNDARY_BYTES = 1 * 32 * 64 * 4  # mbs 1, fp32


def costs(gpu="A100-40", mbs=1, tp=1, layer=(1.0, 2.0), upd=0.0):
    return LayerCosts(gpu, mbs, tp, 0.5, 0.5, (layer[0],) * 4, (layer[1],) * 4, 1.0, 1.0, upd,
                      layer_act_bytes=100.0, embedding_act_bytes=10.0, head_act_bytes=50.0)


def ctx_with(settings=OURS, bw=1e9, entries=None):
    cat = GPUCatalog()
    store = ProfileStore(TINY, cat, allow_estimates=False)
    for c in entries or [costs()]:
        store.add(c)
    net = NetworkModel(cat).with_class_links({"inter_node": Link(bw, 0.0), "cross_zone": Link(bw / 2, 0.0)})
    return SimContext(TINY, store, net, cat, settings.with_(memory_overhead_bytes=0.0))


def plan(split=(2, 2), d=1, gbs=4, zones=None, tps=None, mbs=1, **kw):
    stages, start = [], 0
    for s, n in enumerate(split):
        reps = tuple(Replica("A100-40", (tps or [1] * d)[j], (zones or ["z-a"] * d)[j]) for j in range(d))
        stages.append(Stage(start, n, reps))
        start += n
    return Plan(num_layers=4, stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs, **kw)


def test_1f1b_hand_computed():
    est = simulate(plan(), ctx_with())
    # stage 0: F = 2*1 + 0.5, B = 2*2 + 0.5 -> 7; stage 1: F = 2 + 1, B = 4 + 1 -> 8; m = 4; p = 8192 B / 1e9
    p = BOUNDARY_BYTES / 1e9
    assert est.iteration_time_s == pytest.approx(3 * 8 + 15 + 2 * p, rel=1e-12)
    assert est.bottleneck_stage == 1
    assert est.stages[0].p2p_s == pytest.approx(p)


def test_blocking_p2p_adds_transfers_to_the_steady_state():
    p = BOUNDARY_BYTES / 1e9
    st = SAILOR_DEEPSPEED.with_(profile_offset_s=0.0, per_microbatch_overhead_s=0.0)
    est = simulate(plan(), ctx_with(st))
    assert est.iteration_time_s == pytest.approx(3 * (8 + 2 * p) + 15 + 2 * p, rel=1e-12)


def test_memory_hand_computed_and_inflight_capped_by_microbatches():
    est = simulate(plan(gbs=4), ctx_with())
    params0 = 2 * sum(TINY.layer_params()) + sum(TINY.embedding_params())
    act0 = (2 * 100 + 10) * 2          # two in-flight micro-batches on stage 0 of 2
    transient = 100 + 2 * BOUNDARY_BYTES
    assert est.stages[0].peak_memory_bytes == pytest.approx(16 * params0 + act0 + transient)
    one = plan(gbs=1)
    assert inflight_microbatches(one, 0, 0) == 1   # m = 1 < S - s = 2: Sailor would count 2
    est1 = simulate(one, ctx_with())
    assert est1.stages[0].peak_memory_bytes == pytest.approx(16 * params0 + 210 + transient)


def test_optimizer_step_scales_with_each_stage_parameters():
    est = simulate(plan(split=(1, 3)), ctx_with(entries=[costs(upd=1e-6)]))
    p0 = sum(TINY.layer_params()) + sum(TINY.embedding_params())
    p1 = 3 * sum(TINY.layer_params()) + sum(TINY.head_params())
    assert est.stages[0].update_s == pytest.approx(p0 * 1e-6)
    assert est.stages[1].update_s == pytest.approx(p1 * 1e-6)
    assert est.update_s == pytest.approx(max(p0, p1) * 1e-6)


def test_more_bandwidth_never_slower():
    pl = plan(d=2, gbs=8, zones=["us-a-1", "us-b-1"])
    times = [simulate(pl, ctx_with(bw=bw)).iteration_time_s for bw in (1e6, 1e7, 1e8, 1e9, 1e10)]
    assert all(a >= b for a, b in zip(times, times[1:]))
    assert times[0] > times[-1]


def test_more_microbatches_never_fewer_seconds():
    c = ctx_with()
    times = [simulate(plan(gbs=g), c).iteration_time_s for g in (1, 2, 4, 8, 16)]
    assert all(a < b for a, b in zip(times, times[1:]))


def test_more_tp_never_more_memory_per_gpu():
    entries = [costs(tp=t) for t in (1, 2, 4)]
    c = ctx_with(entries=[replace(e, layer_act_bytes=None, head_act_bytes=None, embedding_act_bytes=None)
                          for e in entries])
    mems = [simulate(plan(split=(4,), tps=[t]), c).peak_memory_bytes for t in (1, 2, 4)]
    assert mems[0] > mems[1] > mems[2]


def test_cross_zone_sync_costs_egress_and_hierarchical_moves_fewer_bytes():
    zones = ["us-a-1", "us-a-1", "us-b-1", "us-b-1"]
    pl = plan(split=(4,), d=4, gbs=8, zones=zones)
    flat = simulate(pl, ctx_with(OURS.with_(grad_sync="flat")))
    hier = simulate(pl, ctx_with(OURS.with_(grad_sync="hierarchical")))
    assert flat.egress_usd_per_iteration > 0 and hier.egress_usd_per_iteration > 0
    assert hier.cross_zone_bytes_per_iteration < flat.cross_zone_bytes_per_iteration
    same = simulate(plan(split=(4,), d=4, gbs=8), ctx_with())
    assert same.egress_usd_per_iteration == 0.0


def test_cost_is_gpu_seconds_times_price():
    est = simulate(plan(d=2, gbs=8), ctx_with())
    price = GPUCatalog().get("A100-40").usd_per_hour / 3600
    assert est.gpu_usd_per_iteration == pytest.approx(4 * price * est.iteration_time_s)


def test_oom_is_flagged():
    big = replace(costs(), layer_act_bytes=20e9)
    est = simulate(plan(gbs=4), ctx_with(entries=[big]))
    assert not est.fits_in_memory and not est.stages[0].fits_in_memory


def test_tp_beyond_node_and_missing_profile_are_errors():
    c = ctx_with(entries=[costs(tp=4)])
    c.gpus_per_node["A100-40"] = 2
    with pytest.raises(InputError, match="TP 4 exceeds the 2 GPUs per node of A100-40"):
        simulate(plan(split=(4,), tps=[4]), c)
    with pytest.raises(InputError, match="no profile for GPU type 'A100-40' at micro-batch 2"):
        simulate(plan(mbs=2, gbs=4), ctx_with())


def test_analytic_estimate_is_marked():
    cat = GPUCatalog()
    c = SimContext(TINY, ProfileStore(TINY, cat), NetworkModel(cat), cat, OURS)
    est = simulate(plan(), c)
    assert est.estimated_profiles and est.iteration_time_s > 0


def test_formulas_give_the_same_numbers_on_arrays_and_scalars():
    """Each shared formula is one expression for the simulator (one pipeline) and the search (a batch)."""
    import numpy as np

    from planner.simulator import formulas as F
    rng = np.random.default_rng(3)
    for s_num in (1, 2, 3, 6):
        comp = rng.uniform(0.1, 1.0, size=(20, s_num))
        p2p = rng.uniform(0.0, 0.3, size=(20, max(s_num - 1, 0)))
        for blocking in (False, True):
            busy = F.busy_s(comp, p2p, blocking)
            trips = F.round_trip_bounds(comp, p2p)
            levels = F.period_levels(busy.max(axis=1), trips)
            for k in range(20):
                one = F.busy_s(comp[k], p2p[k], blocking)
                assert np.array_equal(one, busy[k])
                if blocking and s_num > 1:
                    assert one[0] == comp[k, 0] + 2 * p2p[k, 0] + 0.0
                for m in (1, s_num, s_num + 1, 40):
                    # the period is the busiest stage or a shared round trip of the stages k with m > S - k
                    want = max([one.max()] + [(comp[k, j:].sum() + 2 * p2p[k, j:].sum()) / (s_num - j)
                                              for j in range(s_num - 1) if m > s_num - j])
                    got = F.steady_period_s(one, F.round_trip_bounds(comp[k], p2p[k]), m)
                    assert got == pytest.approx(want, rel=1e-12)
                    assert levels[k, min(m, s_num + 1) - 1] == pytest.approx(got, rel=1e-15)
    w, g, o = F.state_bytes_per_param("bf16", "adamw")
    assert (w, g, o) == (2.0, 4.0, 12.0) and F.state_bytes_per_param("fp32", "sgd") == (4.0, 4.0, 4.0)
    terms = F.memory_terms(np.array([10.0, 20.0]), np.array([1.0, 2.0]), np.array([3, 1]), 5.0, 7.0, (w, g, o),
                           1.5, 4, 100.0)
    scalar = F.memory_terms(20.0, 2.0, 1, 5.0, 7.0, (w, g, o), 1.5, 4, 100.0)
    assert F.memory_total(terms)[1] == F.memory_total(scalar) == 2 * 20 + (4 * 20 + 16) + 12 * 20 + 3 + 19 + 100


def test_heterogeneous_mfu_hand_computed():
    """MFU = model FLOP/s (3 x forward FLOPs per sample) over the summed peak FLOP/s of the GPUs used, per plan
    and per stage; a mixed fleet is judged against its own summed peak."""
    entries = [costs(), costs("V100-16"), costs("V100-16", tp=2)]
    ctx = ctx_with(entries=entries)
    reps = (Replica("A100-40", 1, "z-a"), Replica("V100-16", 2, "z-a"))
    p = Plan(num_layers=4, stages=(Stage(0, 1, reps), Stage(1, 3, reps)), micro_batch_size=1, global_batch_size=8)
    est = simulate(p, ctx)
    cat = ctx.catalog
    peak_stage = cat.get("A100-40").peak_fp32_flops + 2 * cat.get("V100-16").peak_fp32_flops
    lf, hf = TINY.layer_fwd_flops(1), TINY.head_fwd_flops(1)
    work = [8 * 3 * lf, 8 * 3 * (3 * lf + hf)]
    for st, w in zip(est.stages, work):
        assert st.peak_flops_per_s == pytest.approx(peak_stage, rel=1e-12)
        assert st.mfu == pytest.approx(w / est.iteration_time_s / peak_stage, rel=1e-12)
    assert est.peak_flops_per_s == pytest.approx(2 * peak_stage, rel=1e-12)
    assert est.model_flops_per_s == pytest.approx(sum(work) / est.iteration_time_s, rel=1e-12)
    assert est.mfu == pytest.approx(sum(work) / est.iteration_time_s / (2 * peak_stage), rel=1e-12)
    bf16 = simulate(replace(p, precision="bf16"), ctx)       # peak at the plan's precision
    assert bf16.peak_flops_per_s == pytest.approx(2 * (cat.get("A100-40").peak_flops
                                                      + 2 * cat.get("V100-16").peak_flops), rel=1e-12)
