"""Fast, single-process checks of the runtime's pure parts: rank layout, fine shards, peers, data order,
plan-independent initialisation, cross-zone byte model, and the patch guards."""
from __future__ import annotations

import pytest
import torch

from megatron_sailor.runtime.data import MockTokens, microbatch, pipeline_microbatch_ids
from megatron_sailor.runtime.grad_sync import ring_cross_zone_bytes
from megatron_sailor.runtime.init_weights import full_tensor, global_name, shard_of
from megatron_sailor.runtime.topology import build_layout, main as topology_main
from planner.plan import Plan, Replica, Stage


def _plan() -> Plan:
    a, b = Replica("A100", 2, "us-a"), Replica("V100", 1, "us-b")
    return Plan(num_layers=4, micro_batch_size=2, global_batch_size=8, microbatches_per_pipeline=(3, 1),
                stages=(Stage(0, 1, (a, b)), Stage(1, 3, (Replica("A100", 1, "us-a"), b))))


def test_rank_order_is_stage_major_then_replica_then_tp() -> None:
    layout = build_layout(_plan())
    roles = [(r.stage, r.replica, r.tp_rank) for r in layout.ranks]
    assert roles == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert layout.replica_ranks(0, 0) == (0, 1) and layout.stage_ranks(1) == (3, 4)


def test_fine_shards_pair_tp1_rank_with_both_tp2_ranks() -> None:
    layout = build_layout(_plan())
    assert layout.num_fine_shards(0) == 2 and layout.num_fine_shards(1) == 1
    assert layout.fine_shards_of(0) == (0,) and layout.fine_shards_of(1) == (1,)
    assert layout.fine_shards_of(2) == (0, 1)
    assert layout.fine_shard_group(0, 0) == (0, 2) and layout.fine_shard_group(0, 1) == (1, 2)


def test_p2p_peers_fan_out_from_tp_rank_zero() -> None:
    layout = build_layout(_plan())
    assert layout.forward_targets(0) == (3,) and layout.forward_targets(1) == ()
    assert layout.forward_source(3) == 0 and layout.backward_targets(3) == (0, 1)
    assert layout.backward_source(1) == 3 and layout.forward_targets(2) == (4,)


def test_topology_cli_prints_every_rank(tmp_path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "p.json"
    _plan().save(path)
    assert topology_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "world size 5" in out and len([ln for ln in out.splitlines() if "us-" in ln]) == 5


def test_topology_cli_bad_plan_is_one_line(tmp_path, capsys) -> None:  # noqa: ANN001
    assert topology_main([str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not found" in err[0]


def test_microbatches_follow_the_fixed_rule() -> None:
    assert list(pipeline_microbatch_ids((3, 1), 0)) == [0, 1, 2]
    assert list(pipeline_microbatch_ids((3, 1), 1)) == [3]
    src = MockTokens(seed=3, seq_length=8, vocab_size=16)
    whole = microbatch(src, 2, 8, 8, 0)
    part = microbatch(src, 2, 8, 2, 3)
    assert torch.equal(part.tokens, whole.tokens[6:8]) and torch.equal(part.labels, whole.labels[6:8])
    assert torch.equal(whole.tokens[:, 1:], whole.labels[:, :-1])


def test_init_is_plan_independent_and_shards_concatenate() -> None:
    full = full_tensor("layers.2.mlp.linear_fc1.weight", (8, 4), seed=11)
    assert torch.equal(full, full_tensor("layers.2.mlp.linear_fc1.weight", (8, 4), seed=11))
    assert not torch.equal(full, full_tensor("layers.3.mlp.linear_fc1.weight", (8, 4), seed=11))
    param = torch.nn.Parameter(torch.empty(4, 4))
    param.tensor_model_parallel, param.partition_dim = True, 0
    assert torch.equal(torch.cat([shard_of(full, param, 2, r) for r in range(2)]), full)
    assert global_name("decoder.layers.1.mlp.linear_fc1.weight", 2) == "layers.3.mlp.linear_fc1.weight"
    assert global_name("output_layer.weight", 2) == "output_layer.weight"


def test_cross_zone_bytes_model() -> None:
    zones = ["a", "a", "b", "b"]
    assert ring_cross_zone_bytes(zones, 1000, "flat") == 2 * 2 * 3 / 4 * 1000
    assert ring_cross_zone_bytes(zones, 1000, "hierarchical") == 2 * 1000
    assert ring_cross_zone_bytes(["a", "a"], 1000, "flat") == 0


def test_patches_check_upstream_symbols() -> None:
    from patches import PINNED_MEGATRON_CORE, PatchError
    from patches.megatron_cpu import _replace, installed_version
    assert installed_version() == PINNED_MEGATRON_CORE
    with pytest.raises(PatchError, match="not found"):
        _replace("megatron.core.utils", "GlobalMemoryBuffer.no_such_method", None)


def test_emulation_delays_and_env() -> None:
    from megatron_sailor.runtime.emulation import Emulation, emulation_from
    emu = Emulation(link_delay_s=0.001, cross_zone_latency_s=0.01, cross_zone_gbps=8.0)
    assert emu.message_delay_s(10**9, cross_zone=False) == pytest.approx(0.001)
    assert emu.message_delay_s(10**9, cross_zone=True) == pytest.approx(0.001 + 0.01 + 1.0)
    assert emulation_from({}) is None
    got = emulation_from({"SAILOR_EMULATE_SLOWDOWN": "2.0", "SAILOR_EMULATE_LINK_DELAY_S": "0.005"})
    assert got == Emulation(slowdown=2.0, link_delay_s=0.005)
    from planner.errors import InputError
    with pytest.raises(InputError, match="SAILOR_EMULATE_SLOWDOWN"):
        emulation_from({"SAILOR_EMULATE_SLOWDOWN": "fast"})
