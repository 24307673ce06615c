"""Fast, single-process checks of the distributed optimizer's bookkeeping: segment ownership covers every
buffer element exactly once, pack / unpack invert each other, the global norm counts every element once,
hierarchical segment order keeps each zone's segments contiguous, and the cross-zone byte model."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from megatron_sailor.runtime.dist_optimizer import DistributedOptimizer, _Unit
from megatron_sailor.runtime.grad_sync import ShardPlan
from megatron_sailor.runtime.groups import SYNC_FLAT, SYNC_HIERARCHICAL, ShardSyncGroups
from megatron_sailor.runtime.shard_comm import ShardComm
from planner.layout import build_layout
from planner.plan import Plan, Replica, Stage


@dataclass
class _Comm:
    n: int
    index: int

    def chunk_numel(self, numel: int) -> int:
        return max(1, -(-numel // self.n))


@dataclass
class _Sync:
    sharded: list
    replicated: list


def _params() -> tuple[list, list]:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(6, 4))           # column-parallel weight, partition dim 0
    w.tensor_model_parallel, w.partition_dim = True, 0
    v = torch.nn.Parameter(torch.randn(3, 8))           # row-parallel weight, partition dim 1
    v.tensor_model_parallel, v.partition_dim = True, 1
    return [w, v], [torch.nn.Parameter(torch.randn(5))]


def _units(n: int, piece: int, pieces: int, shard: int) -> list[_Unit]:
    sharded, replicated = _params()
    sg = ShardSyncGroups(shard, tuple(range(n)), None, None, None, None)
    plan = ShardPlan(sg, piece=piece, pieces=pieces, write_replicated=piece == 0)
    return [_Unit(_Sync(sharded, replicated), plan, _Comm(n, i), stage_sync=True) for i in range(n)]


def test_segments_cover_the_buffer_once_and_pack_unpack_invert() -> None:
    for n in (1, 2, 3, 5):
        units = _units(n, piece=1, pieces=2, shard=1)
        numel = units[0].numel
        assert numel == 3 * 4 + 3 * 4 + 5          # half of each sharded weight + the replicated one
        owned = sorted(i * u.chunk + r.seg_lo + k for i, u in enumerate(units) for r in u.ranges
                       for k in range(r.seg_hi - r.seg_lo))
        assert owned == list(range(numel)), n
        u = units[0]
        buf = u.pack(lambda p: p.data, torch.float32)
        assert buf.numel() == u.chunk * n and float(buf[numel:].abs().sum()) == 0.0
        target = {id(p): torch.zeros_like(p) for p in u.entries}
        u.unpack(buf, lambda p: target[id(p)])
        w, v = u.entries[0], u.entries[1]
        assert torch.equal(target[id(w)][3:], w.data[3:]) and float(target[id(w)][:3].abs().sum()) == 0.0
        assert torch.equal(target[id(v)][:, 4:], v.data[:, 4:])
        assert float(target[id(u.entries[2])].abs().sum()) == 0.0   # replicated written from piece 0 only


def test_global_norm_counts_each_element_once() -> None:
    """Stage with replicas TP 2 and TP 1: fine shards 0 and 1; the replicated part counts in shard 0 only."""
    sharded, replicated = _params()
    full_sq = sum(float(p.data.double().pow(2).sum()) for p in sharded + replicated)
    total = 0.0
    for f in (0, 1):
        for u in _units(3, piece=f, pieces=2, shard=f):
            u.grad_seg = u.segment_of(u.pack(lambda p: p.data, torch.float32))
            fake = DistributedOptimizer.__new__(DistributedOptimizer)
            fake.units = [u]
            total += fake.local_sq_norm()
    assert abs(total - full_sq) <= 1e-9 * full_sq


def _two_zone_layout():  # noqa: ANN202
    reps = (Replica("A", 1, "us-a"), Replica("B", 1, "us-b"), Replica("A", 1, "us-a"))
    return build_layout(Plan(num_layers=2, micro_batch_size=1, global_batch_size=3, stages=(Stage(0, 2, reps),)))


def test_hierarchical_order_is_zone_by_zone_and_cross_zone_bytes() -> None:
    layout = _two_zone_layout()                   # ranks 0 (us-a), 1 (us-b), 2 (us-a)
    hier = ShardComm(ShardSyncGroups(0, (0, 1, 2), None, None, 0, None), SYNC_HIERARCHICAL, layout, 1)
    assert hier.hierarchical and hier.order == (0, 2, 1) and hier.index == 2
    flat = ShardComm(ShardSyncGroups(0, (0, 1, 2), object(), None, None, None), SYNC_FLAT, layout, 1)
    assert not flat.hierarchical and flat.order == (0, 1, 2)
    # 3000 elements, fp32 gradients + bf16 parameters: hierarchical (z-1) * B * (4 + 2) bytes
    assert hier.cross_zone_bytes(3000, 4, 2) == 1 * 3000 * 6
    # flat ring 0 -> 1 -> 2 -> 0: two edges cross zones, each carries (n-1)/n * B of each collective
    assert flat.cross_zone_bytes(3000, 4, 2) == int(2 * 2 / 3 * 3000 * 6)
    one_zone = ShardComm(ShardSyncGroups(0, (0, 2), object(), None, None, None), SYNC_FLAT, layout, 0)
    assert one_zone.cross_zone_bytes(3000, 4, 2) == 0


def test_flatten_makes_parameters_and_gradients_views_of_padded_buffers() -> None:
    """A unit holding whole parameters (one piece) owns them: the parameters keep their values but live in one
    padded buffer, their gradient views (zeros) in another; a write to the buffer is a write to the model."""
    units = _units(3, piece=0, pieces=1, shard=0)
    u = units[0]
    before = [p.detach().clone() for p in u.entries]
    grads = u.flatten()
    assert u.flat and u.param_buf.numel() == u.grad_buf.numel() == u.chunk * 3 >= u.numel
    assert all(torch.equal(p.data, b) for p, b in zip(u.entries, before))
    assert torch.equal(u.param_buf[:u.numel], torch.cat([b.reshape(-1) for b in before]))
    assert float(u.param_buf[u.numel:].abs().sum()) == 0.0
    u.param_buf.add_(1.0)
    assert all(torch.equal(p.data, b + 1.0) for p, b in zip(u.entries, before))
    u.grad_buf.fill_(2.0)
    assert all(float(grads[id(p)].min()) == 2.0 and grads[id(p)].shape == p.shape for p in u.entries)
    assert not _units(3, piece=1, pieces=2, shard=1)[0].flat    # several pieces: packed instead


def test_all_gather_refuses_a_wrong_out_buffer() -> None:
    layout = _two_zone_layout()
    comm = ShardComm(ShardSyncGroups(0, (0, 1, 2), object(), None, None, None), SYNC_FLAT, layout, 0)
    seg = torch.zeros(4)
    for bad in (torch.zeros(11), torch.zeros(12, dtype=torch.bfloat16)):
        try:
            comm.all_gather(seg, out=bad)
        except ValueError as e:
            assert "out has" in str(e)
        else:
            raise AssertionError("accepted a wrong out buffer")
