"""The saved-for-backward counter (runtime.memory) counts storages only while they are alive."""
from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
from torch.utils.checkpoint import checkpoint  # noqa: E402

from megatron_sailor.runtime.memory import SavedActivationCounter  # noqa: E402

F32 = 4


def _lin(n: int = 8) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(n, n, bias=False)


def test_plain_layers_count_every_saved_storage_until_release() -> None:
    lin = _lin()
    x = torch.randn(4, 8)
    counter, sink = SavedActivationCounter(lin), [0]
    with counter.counting(sink) as record:
        y = torch.tanh(lin(x))                 # saves x (for dW) and tanh's output; the weight is excluded
        z = lin(x)                             # x again: one storage, counted once
    assert sink[0] == 2 * 4 * 8 * F32
    assert counter.live_bytes == counter.peak_bytes == sink[0]
    (y.sum() + z.sum()).backward()
    counter.release(record)
    assert counter.live_bytes == 0 and counter.peak_bytes == sink[0]
    counter.release(record)                    # releasing twice changes nothing
    assert counter.live_bytes == 0


def test_micro_batches_add_up_and_release_their_own_bytes() -> None:
    lin = _lin()
    counter, sinks, records, outs = SavedActivationCounter(lin), [[0], [0]], [], []
    for sink, rows in zip(sinks, (4, 6)):
        with counter.counting(sink) as record:
            outs.append(lin(torch.randn(rows, 8)))
        records.append(record)
    assert sinks == [[4 * 8 * F32], [6 * 8 * F32]]
    assert counter.peak_bytes == counter.live_bytes == 10 * 8 * F32
    outs[0].sum().backward()
    counter.release(records[0])
    assert counter.live_bytes == 6 * 8 * F32
    counter.reset()
    assert counter.live_bytes == counter.peak_bytes == 0


def test_a_tensor_saved_then_freed_before_backward_stops_counting() -> None:
    lin = _lin()
    x = torch.randn(4, 8)
    counter, sink = SavedActivationCounter(lin), [0]
    with counter.counting(sink):
        a = torch.randn(1000, requires_grad=True)
        t = a.exp()                            # exp saves its output: 4000 bytes
        assert counter.live_bytes == 1000 * F32
        del t                                  # the graph holding it dies: the storage is freed
        gc.collect()
        assert counter.live_bytes == 0
        y = lin(x)                             # saves x
    assert sink[0] == counter.live_bytes == 4 * 8 * F32
    assert counter.peak_bytes == 1000 * F32    # the transient counted while it lived
    y.sum().backward()


def _block(lin1: torch.nn.Linear, lin2: torch.nn.Linear, transient_elems: int):
    def block(h: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():              # a tensor saved inside the checkpointed forward, freed at once
            torch.randn(transient_elems, requires_grad=True).exp()
        return lin2(torch.tanh(lin1(h)))
    return block


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_block_counts_its_inputs_plus_transients_while_alive(reentrant: bool) -> None:
    lin1, lin2 = _lin(), _lin()
    model = torch.nn.Sequential(lin1, lin2)
    x = torch.randn(4, 8, requires_grad=True)
    counter, sink = SavedActivationCounter(model), [0]
    with counter.counting(sink) as record:
        y = checkpoint(_block(lin1, lin2, 500), x, use_reentrant=reentrant)
    inputs = 4 * 8 * F32
    assert sink[0] == counter.live_bytes == inputs          # the block keeps only its input
    # reentrant: the block runs under no_grad, the hook sees the transient while it lives and the input is
    # saved after the block returns (the transient is gone by then); non-reentrant: the input is saved first
    # and torch's own (innermost) hook takes everything saved inside the block
    assert counter.peak_bytes == (500 * F32 if reentrant else inputs)
    y.sum().backward()                                       # the re-forward runs outside counting()
    assert x.grad is not None and x.grad.abs().sum() > 0
    counter.release(record)
    assert counter.live_bytes == 0


def test_checkpointed_layers_in_sequence_peak_at_earlier_inputs_plus_one_transient() -> None:
    lins = [_lin() for _ in range(3)]
    counter, sink = SavedActivationCounter(torch.nn.ModuleList(lins)), [0]
    h = torch.randn(4, 8, requires_grad=True)
    with counter.counting(sink):
        for lin in lins:                      # each transient dies before the next layer's is made
            h = checkpoint(_block(lin, lin, 500), h, use_reentrant=True)
    assert sink[0] == 3 * 4 * 8 * F32         # three layer inputs
    assert counter.peak_bytes == 2 * 4 * 8 * F32 + 500 * F32   # the last transient, two inputs saved before
    h.sum().backward()
