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
