"""Plan fields that say what the runtime runs: per-stage gradient sync mode and the p2p pattern."""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.plan import Plan, Stage
from planner.simulator import OURS, chosen_sync_modes, simulate, with_chosen_sync_modes
from tests.planner.test_simulator import ctx_with, plan

ROOT = Path(__file__).resolve().parents[2]
ZONES = ["us-a-1", "us-a-1", "us-b-1", "us-b-1"]


def test_old_plans_load_with_null_modes_and_the_default_pattern():
    data = plan(split=(2, 2), d=2, gbs=4).to_dict()
    for st in data["stages"]:
        del st["grad_sync"]
    del data["p2p_pattern"]
    p = Plan.from_json(json.dumps(data))
    assert all(st.grad_sync is None for st in p.stages) and p.p2p_pattern == "tp0-to-all"


def test_roundtrip_keeps_the_fields():
    p = plan(split=(2, 2), d=2, gbs=4)
    p = replace(p, stages=(replace(p.stages[0], grad_sync="flat"), replace(p.stages[1], grad_sync="hierarchical")))
    q = Plan.from_json(p.to_json())
    assert q == p and [s.grad_sync for s in q.stages] == ["flat", "hierarchical"]
    assert json.loads(p.to_json())["p2p_pattern"] == "tp0-to-all"


@pytest.mark.parametrize("change, message", [
    (lambda d: d["stages"][0].update(grad_sync="auto"), "stages\\[0\\]: field 'grad_sync' must be one of .*'auto'"),
    (lambda d: d["stages"][1].update(grad_sync=1), "stages\\[1\\]: field 'grad_sync' .*got 1"),
    (lambda d: d.update(p2p_pattern="all-to-all"), "field 'p2p_pattern' must be 'tp0-to-all', got 'all-to-all'"),
])
def test_bad_values_name_file_field_and_value(change, message):
    data = plan(split=(2, 2), d=2, gbs=4).to_dict()
    change(data)
    with pytest.raises(InputError, match=message) as exc:
        Plan.from_json(json.dumps(data), source="p.json")
    assert str(exc.value).startswith("p.json") and "\n" not in str(exc.value)


def test_constructor_refuses_bad_values():
    with pytest.raises(InputError, match="'grad_sync' must be null, 'flat' or 'hierarchical', got 'ring'"):
        Stage(0, 1, plan().stages[0].replicas, grad_sync="ring")
    with pytest.raises(InputError, match="'p2p_pattern'"):
        plan(p2p_pattern="nope")


def test_sailor_sim_bad_mode_is_one_line_exit_2(tmp_path):
    data = plan(split=(2, 2), d=2, gbs=4).to_dict()
    data["stages"][0]["grad_sync"] = "fast"
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "planner.cli_sim", str(f)], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(f) in lines[0]
    assert "grad_sync" in lines[0] and "'fast'" in lines[0]


def test_a_stage_mode_in_the_plan_is_what_the_simulator_models():
    pl = plan(split=(4,), d=4, gbs=8, zones=ZONES)
    ctx = ctx_with(OURS)                                      # preset rule: auto
    flat = simulate(pl, ctx_with(OURS.with_(grad_sync="flat")))
    hier = simulate(pl, ctx_with(OURS.with_(grad_sync="hierarchical")))
    assert flat.sync_s != hier.sync_s
    for mode, ref in (("flat", flat), ("hierarchical", hier)):
        fixed = replace(pl, stages=(replace(pl.stages[0], grad_sync=mode),))
        est = simulate(fixed, ctx)
        assert est.stages[0].sync_mode == mode and est.sync_s == ref.sync_s
        assert est.cross_zone_bytes_per_iteration == ref.cross_zone_bytes_per_iteration


def test_chosen_modes_are_the_auto_choice_and_writing_them_changes_nothing():
    pl = plan(split=(2, 2), d=4, gbs=8, zones=ZONES)
    ctx = ctx_with(OURS)
    est = simulate(pl, ctx)
    modes = chosen_sync_modes(pl, ctx)
    assert modes == tuple(st.sync_mode for st in est.stages)
    assert set(modes) <= {"flat", "hierarchical"}
    written = with_chosen_sync_modes(pl, ctx)
    assert tuple(st.grad_sync for st in written.stages) == modes
    assert simulate(written, ctx).iteration_time_s == est.iteration_time_s
    single = plan(split=(2, 2), d=1, gbs=4)
    assert chosen_sync_modes(single, ctx) == (None, None)
    assert with_chosen_sync_modes(single, ctx) == single


def test_tp0_to_all_sends_one_copy_per_receiving_tp_rank_through_the_sender_node():
    """megatron-sailor: TP rank 0 of the sender sends the whole activation to each of the receiver's k TP ranks;
    on a shared node-pair link (Sailor's fits) the k messages share it: k x bytes / bw."""
    from planner.network import Link
    from planner.simulator import SAILOR_DEEPSPEED
    from planner.simulator.time import p2p_seconds
    bw = 1e9
    pl = plan(split=(2, 2), d=1, gbs=4, tps=[2])
    for settings, k in ((OURS, 2), (SAILOR_DEEPSPEED, 1)):
        ctx = ctx_with(settings)
        ctx.network = ctx.network.with_class_links({"inter_node": Link(bw, 0.0, shared=True)})
        nbytes = ctx.model.boundary_activation_bytes(1, 4)
        assert p2p_seconds(pl, ctx, 0)[0] == pytest.approx(k * nbytes / bw, rel=1e-12)


def test_cross_zone_p2p_bytes_count_every_copy_sent():
    from tests.planner.test_simulator import costs
    a = plan(tps=[1]).stages[0].replicas[0]
    pl = Plan(num_layers=4, stages=(Stage(0, 2, (a,)), Stage(2, 2, (replace(a, tp=2, zone="z-b"),))),
              micro_batch_size=1, global_batch_size=4)
    ctx = ctx_with(OURS, entries=[costs(), costs(tp=2)])
    est = simulate(pl, ctx)
    nbytes = ctx.model.boundary_activation_bytes(1, 4)
    # forward: 2 copies (receiver TP 2), backward: 1 copy (sender TP 1), 4 micro-batches
    assert est.cross_zone_bytes_per_iteration == pytest.approx(4 * nbytes * (2 + 1))


def test_distributed_optimizer_sync_is_reduce_scatter_plus_all_gather():
    """fp32: the same bytes as an all-reduce; bf16: the all-gather moves 2-byte parameters, so less time."""
    from planner.network import Link
    for precision in ("fp32", "bf16"):
        base = plan(split=(4,), d=4, gbs=8, zones=ZONES, precision=precision)
        dist = replace(base, distributed_optimizer=True)
        ctx = ctx_with(OURS)
        ctx.network = ctx.network.with_class_links({"inter_node": Link(1e9, 0.0), "cross_zone": Link(5e8, 0.0)})
        for mode in ("flat", "hierarchical"):
            pb = replace(base, stages=(replace(base.stages[0], grad_sync=mode),))
            pd = replace(dist, stages=(replace(dist.stages[0], grad_sync=mode),))
            a, b = simulate(pb, ctx), simulate(pd, ctx)
            if precision == "fp32":
                assert b.sync_s == pytest.approx(a.sync_s, rel=1e-12)
                assert b.cross_zone_bytes_per_iteration == pytest.approx(a.cross_zone_bytes_per_iteration)
            else:
                assert b.sync_s < a.sync_s
                assert b.cross_zone_bytes_per_iteration < a.cross_zone_bytes_per_iteration


def test_distributed_optimizer_flat_time_hand_computed():
    from planner.network import Link
    pl = plan(split=(4,), d=4, gbs=8, precision="bf16", distributed_optimizer=True)
    ctx = ctx_with(OURS)
    ctx.network = ctx.network.with_class_links({"inter_node": Link(1e9, 0.0)})
    est = simulate(pl, ctx)
    params = simulate(replace(pl, distributed_optimizer=False), ctx).stages[0]
    from planner.simulator.stage import all_replica_costs
    p = all_replica_costs(pl, ctx)[0][0].params
    expected = 3 * (4.0 * p / 4 / 1e9) + 3 * (2.0 * p / 4 / 1e9)     # (n-1) steps of grad + param chunks
    assert est.stages[0].sync_s == pytest.approx(expected, rel=1e-12)
    assert params.sync_s == pytest.approx(2 * 3 * (4.0 * p / 4 / 1e9), rel=1e-12)


def test_distributed_optimizer_shards_states_and_counts_replicated_params_per_fine_shard():
    from tests.planner.test_simulator import costs
    from planner.simulator.memory import optimizer_params, replica_memory
    from planner.simulator.stage import all_replica_costs
    pl = plan(split=(4,), d=2, gbs=4, tps=[1, 2], precision="bf16", distributed_optimizer=True)
    ctx = ctx_with(OURS, entries=[costs(), costs(tp=2)])
    c1, c2 = all_replica_costs(pl, ctx)[0]
    m = ctx.model
    replicated = m.layer_params(1)[1] * 4 + m.embedding_params(1)[1] + m.head_params(1)[1]
    assert optimizer_params(pl, ctx, c1) == c1.params + replicated        # TP 1 next to TP 2: 2 fine shards
    assert optimizer_params(pl, ctx, c2) == c2.params                      # 1 fine shard per TP-2 rank
    assert replica_memory(pl, ctx, c1).optimizer_bytes == pytest.approx(12.0 / 2 * (c1.params + replicated))
    plain = replace(pl, distributed_optimizer=False)
    assert replica_memory(plain, ctx, c1).optimizer_bytes == pytest.approx(12.0 * c1.params)
