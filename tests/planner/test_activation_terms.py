"""megatron-core 0.16.1's saved tensors, term by term, for the tiny model (s 32, h 64, 4 heads, ffn 256, vocab
128, micro-batch 2). Each expected value is written as the tensors megatron-core and the runtime save (listed
with saved_tensors_hooks on a 1-rank run of the runtime; benchmarks/memory_model.py compares whole ranks)."""
import pytest

from planner.model import get_model
from planner.simulator.activations import megatron_core_terms

M = get_model("tiny")
S, H, A, FF, V, B = 32, 64, 4, 256, 128, 2
SB = S * B


def layer(e, tp=1, hidden_drop=False, attn_drop=False):
    norms = 4 * SB * H * e + 4 * SB * e                    # 2 norms: input + output, mean + rstd
    sharded = SB * (3 * H + H + FF + FF) * e / tp          # QKV out, context, FC1 out, GELU out
    scores = B * A * S * S / tp
    probs = scores * 4                                      # fp32 softmax output
    if e != 4 or attn_drop:
        probs += scores * e                                 # the probabilities the second matmul keeps
    if attn_drop:
        probs += scores * e                                 # dropout mask
    bda = 2 * SB * H * e if hidden_drop else 0
    return norms + sharded + probs + bda


@pytest.mark.parametrize("e, hd, ad", [(4, False, False), (2, False, False), (4, True, True), (2, True, True),
                                       (2, True, False), (4, False, True)])
def test_layer_terms(e, hd, ad):
    t = megatron_core_terms(M, B, 1, e, hd, ad)
    assert t.layer == layer(e, 1, hd, ad)
    assert t.mask == S * S and t.group_input == SB * H * e


def test_the_counted_totals_of_the_probe_runs():
    # per-layer differences the runtime's counter gave between 1- and 2-layer single-stage runs
    assert megatron_core_terms(M, B, 1, 4).layer == 295_936
    assert megatron_core_terms(M, B, 1, 2).layer == 180_736
    assert megatron_core_terms(M, B, 1, 4, True, True).layer == 394_240
    assert megatron_core_terms(M, B, 1, 2, True, True).layer == 213_504


def test_embedding_and_head():
    t = megatron_core_terms(M, B, 1, 4)
    assert t.embedding == 8 * SB + 8 * S                     # int64 token ids, position ids (one row, expanded)
    assert megatron_core_terms(M, B, 1, 2, True).embedding == 8 * SB + 8 * S + SB * H * 2   # + dropout mask
    # final norm in/out + mean/rstd, fp32 logits, the label mask (bool) and the int64 targets
    assert t.head == 2 * SB * H * 4 + 2 * SB * 4 + 4 * SB * V + SB + 8 * SB
    assert megatron_core_terms(M, B, 2, 2).head == 2 * SB * H * 2 + 2 * SB * 2 + 4 * SB * V / 2 + SB + 8 * SB


def test_tp_shards_only_the_partitioned_tensors():
    one, two = megatron_core_terms(M, B, 1, 2), megatron_core_terms(M, B, 2, 2)
    assert two.layer == layer(2, 2) and two.layer > one.layer / 2
    assert two.scores == one.scores / 2


def test_tp_sharded_embedding_keeps_its_out_of_range_mask():
    # megatron-core's vocab-parallel embedding (TP > 1) zeroes the rows of tokens outside its vocab shard and
    # keeps that boolean mask [b, s] for backward
    assert megatron_core_terms(M, B, 2, 2).embedding == megatron_core_terms(M, B, 1, 2).embedding + SB


def test_selective_recompute_keeps_the_int32_mask_type_per_layer():
    t = megatron_core_terms(M, B, 1, 2)
    assert t.selective_keep == 4                            # torch.tensor([attn_mask_type.value], dtype=int)


# --- the short-lived peak inside a recomputed forward (activations.recompute_peak_excess_bytes) ---------------
FULL1, FULL2, BLOCK1 = ("full", "uniform", 1), ("full", "uniform", 2), ("full", "block", 1)


def _terms(e, hidden_drop=True, bias=True):
    from planner.model import with_overrides
    return megatron_core_terms(M if bias else with_overrides(M, bias=False), B, 1, e, hidden_drop, hidden_drop)


@pytest.mark.parametrize("e", [4, 2])
def test_recomputed_layers_keep_their_two_dropout_masks_only_with_dropout_and_biases(e):
    assert _terms(e).recompute_live == 2 * SB * H * e      # self_attn_bda + mlp_bda masks, [s, b, h], model dtype
    assert _terms(e, hidden_drop=False).recompute_live == 0
    assert _terms(e, bias=False).recompute_live == 0        # no bias: the dropped tensor needs no grad under no_grad


def _excess(layers, recompute, e, after=0.0):
    from planner.simulator.activations import recompute_peak_excess_bytes
    t = _terms(e)
    return float(recompute_peak_excess_bytes(layers, recompute, t.recompute_live, t.group_input, t.mask, t.layer,
                                             after))


@pytest.mark.parametrize("e", [4, 2])
def test_excess_of_one_layer_groups_written_out(e):
    masks, group_input, causal = 2 * SB * H * e, SB * H * e, S * S
    # 1 layer: peak = (what came before) + 2 masks; kept = (before) + its input + the causal mask
    assert _excess(1, FULL1, e) == masks - group_input - causal
    # L > 1: the last layer's peak has L - 1 inputs and the causal mask before it
    for layers in (2, 3, 5):
        assert _excess(layers, FULL1, e) == masks - group_input
    # the last stage keeps its head after the layers: that outweighs the transient here
    assert _excess(3, FULL1, e, after=megatron_core_terms(M, B, 1, e, True, True).head) == 0


def test_excess_of_wider_groups_and_block_written_out():
    e = 4
    masks, group_input, causal = 2 * SB * H * e, SB * H * e, S * S
    assert _excess(2, FULL2, e) == 2 * masks - group_input - causal          # one group of 2 layers: 4 masks
    assert _excess(4, FULL2, e) == 2 * masks - group_input                   # 2 groups: the second peaks
    # block: the stored layers after the checkpointed one keep more than the transient
    assert _excess(2, BLOCK1, e) == 0
    assert _excess(1, BLOCK1, e) == _excess(1, FULL1, e)                     # all layers checkpointed
    assert _excess(0, FULL1, e) == 0
    assert _excess(3, (None, None, None), e) == 0 and _excess(3, ("selective", None, None), e) == 0


def test_excess_is_vectorised_over_layer_counts_and_heads():
    import numpy as np
    from planner.simulator.activations import recompute_peak_excess_bytes
    t = _terms(2)
    counts = np.array([[1, 2, 3], [0, 4, 1]])
    after = np.array([0.0, 0.0, 5000.0])
    for rc in (FULL1, FULL2, BLOCK1):
        got = recompute_peak_excess_bytes(counts, rc, t.recompute_live, t.group_input, t.mask, t.layer, after)
        want = [[_excess(int(c), rc, 2, a) for c, a in zip(row, after)] for row in counts]
        assert got.tolist() == want


def test_counted_peaks_of_the_probe_runs():
    # peak_saved_activation_bytes the runtime's counter gave on stage 0 (2 stages, 4 micro-batches, 2 in
    # flight) of the tiny model, dropout 0.1: 2 x kept per micro-batch + the excess
    kept_bf16_1layer = 8 * SB + 8 * S + SB * H * 2 + SB * H * 2 + S * S      # ids, emb mask, input, causal mask
    assert 2 * kept_bf16_1layer + _excess(1, FULL1, 2) == 43_520              # bf16, 1 | 3, full uniform 1
    kept_bf16_2layer = kept_bf16_1layer + SB * H * 2
    assert 2 * kept_bf16_2layer + _excess(2, FULL1, 2) == 60_928              # bf16, 2 | 2, full uniform 1
    kept_fp32_2layer = 8 * SB + 8 * S + SB * H * 4 + SB * H * 4 + S * S
    assert 2 * kept_fp32_2layer + _excess(2, FULL2, 4) == 117_248             # fp32, 2 | 2, full uniform 2
