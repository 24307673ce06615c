"""Fast checks of the plan-independent dropout rule, the fp32 vocab-parallel cross entropy and the tied
embedding group (the multi-rank numerics are in test_runtime_plans.py)."""
from __future__ import annotations

import torch

from megatron_sailor.runtime.cross_entropy import vocab_parallel_cross_entropy
from megatron_sailor.runtime.dropout import (SITE_ATTENTION_OUT, DropoutConfig, DropoutContext, HeadDropout,
                                             SampleDropout, head_keep, keep_mask)
from megatron_sailor.runtime.groups import embedding_fine_shards, embedding_group, embedding_shards_of
from megatron_sailor.runtime.topology import build_layout
from planner.plan import Plan


def test_mask_of_a_sample_does_not_depend_on_the_micro_batch() -> None:
    cfg, ctx = DropoutConfig(hidden=0.3, seed=5), DropoutContext()
    drop = SampleDropout(cfg, ctx, layer=2, site=SITE_ATTENTION_OUT)
    x = torch.ones(8, 6, 16)                      # [s, b, h]: samples 10..15
    ctx.set(iteration=3, first_sample=10, samples=6)
    whole = drop(x)
    ctx.set(iteration=3, first_sample=12, samples=2)
    part = drop(x[:, 2:4])                        # samples 12, 13 in a micro-batch of their own
    assert torch.equal(whole[:, 2:4], part)
    kept = (whole != 0).float().mean()
    assert 0.6 < kept < 0.8 and torch.allclose(whole[whole != 0], torch.full_like(whole[whole != 0], 1 / 0.7))
    ctx.set(iteration=4, first_sample=12, samples=2)
    assert not torch.equal(drop(x[:, 2:4]), part)             # another iteration, other masks
    drop.eval()
    assert torch.equal(drop(x), x)


def test_attention_heads_of_a_tp_rank_are_a_slice_of_the_full_mask() -> None:
    cfg, ctx = DropoutConfig(attention=0.5, seed=1), DropoutContext()
    ctx.set(iteration=0, first_sample=4, samples=2)
    full = head_keep(cfg, 0, range(4, 6), 1, range(4), 8, 8, torch.device("cpu"))
    probs = torch.ones(2, 2, 8, 8)
    second_rank = HeadDropout(cfg, ctx, layer=1, first_head=2)(probs)   # TP 2, rank 1: heads 2, 3
    assert torch.equal(second_rank != 0, full[:, 2:4])


def test_keep_mask_is_a_pure_function_of_its_key() -> None:
    a = keep_mask(1, 2, 3, 4, 1, (5, 5), 0.5)
    assert torch.equal(a, keep_mask(1, 2, 3, 4, 1, (5, 5), 0.5))
    assert not torch.equal(a, keep_mask(1, 2, 3, 4, 1, (5, 5), 0.5, head=1))


def test_cross_entropy_matches_torch_in_fp32() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen, dtype=torch.float32, requires_grad=True)
    target = torch.randint(0, 11, (3, 5), generator=gen)
    ours = vocab_parallel_cross_entropy(logits, target, None)
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), reduction="none")
    assert torch.allclose(ours, ref.view(3, 5), atol=1e-6)
    g1, = torch.autograd.grad(ours.sum(), logits)
    g2, = torch.autograd.grad(ref.sum(), logits)
    assert g1.dtype == torch.float32 and torch.allclose(g1, g2, atol=1e-7)   # no bf16 rounding


def test_embedding_group_spans_first_and_last_stage_across_tp() -> None:
    plan = Plan.from_dict({"schema_version": 1, "num_layers": 4, "micro_batch_size": 1, "global_batch_size": 2,
                           "tie_embeddings": True, "stages": [
                               {"first_layer": 0, "num_layers": 2, "replicas": [
                                   {"gpu_type": "A", "tp": 2, "zone": "a"}, {"gpu_type": "B", "tp": 1, "zone": "b"}]},
                               {"first_layer": 2, "num_layers": 2, "replicas": [
                                   {"gpu_type": "A", "tp": 1, "zone": "a"}, {"gpu_type": "B", "tp": 1, "zone": "b"}]}]})
    layout = build_layout(plan)              # ranks: 0,1 = stage 0 TP 2; 2 = stage 0 TP 1; 3, 4 = stage 1
    assert embedding_fine_shards(layout) == 2
    assert embedding_shards_of(layout, 1) == (1,) and embedding_shards_of(layout, 2) == (0, 1)
    assert embedding_group(layout, 0) == (0, 2, 3, 4) and embedding_group(layout, 1) == (1, 2, 3, 4)


def test_dynamic_loss_scaler_follows_megatrons_rule() -> None:
    from megatron_sailor.runtime.mixed_precision import DynamicLossScaler, LossScaleConfig
    s = DynamicLossScaler(LossScaleConfig(initial=1024.0, minimum=256.0, window=3, hysteresis=2))
    s.update(True)
    assert s.scale == 1024.0                      # hysteresis: the first overflow keeps the scale
    s.update(True)
    assert s.scale == 512.0
    s.update(True)
    s.update(True)
    assert s.scale == 256.0                       # never below --min-loss-scale
    for _ in range(3):
        s.update(False)
    assert s.scale == 512.0                       # grown after a window of clean steps
    static = DynamicLossScaler(LossScaleConfig(static=8.0))
    static.update(True)
    assert static.scale == 8.0
    assert LossScaleConfig(initial=1.0, minimum=2.0).problems()
