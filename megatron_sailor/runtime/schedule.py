"""1F1B (one-forward-one-backward) over the micro-batches of this rank's pipeline.

Warm-up: ``min(S - s - 1, m)`` forwards; steady state: one forward then one backward; cool-down: the
remaining backwards. Each pipeline runs its own micro-batch count ``m`` (the plan may give pipelines
different counts). The loss of a micro-batch is its per-token loss sum divided by the number of tokens of
the whole global batch, so gradients summed over micro-batches and replicas are the global mean's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from megatron_sailor.runtime.cross_entropy import vocab_parallel_cross_entropy
from megatron_sailor.runtime.data import MicroBatch
from megatron_sailor.runtime.memory import SavedActivationCounter, SavedRecord
from megatron_sailor.runtime.p2p import StageP2P


@dataclass(frozen=True)
class StageRole:
    stage: int
    num_stages: int

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1


def causal_mask(seq_length: int) -> torch.Tensor:
    """Megatron's boolean attention mask (True = masked) for causal attention, shape [1, 1, s, s]."""
    return torch.triu(torch.ones(seq_length, seq_length, dtype=torch.bool), diagonal=1)[None, None]


class StageStep:
    """Forward / backward of one micro-batch on this rank's stage model."""

    def __init__(self, model: torch.nn.Module, role: StageRole, seq_length: int, micro_batch_size: int,
                 global_tokens: int, emulation: Any | None = None,
                 device: torch.device = torch.device("cpu"), dropout_ctx: Any | None = None,
                 tp_group: Any | None = None) -> None:
        self.model = model
        self.tp_group = tp_group         # the replica's TP group (vocab-parallel cross entropy)
        self.dropout_ctx = dropout_ctx   # megatron_sailor.runtime.dropout.DropoutContext, keyed per micro-batch
        self.saved = SavedActivationCounter(model)
        self.saved_of: dict[int, SavedRecord] = {}
        self.last_saved_bytes = 0
        self.last_saved: SavedRecord | None = None
        self.device = device
        self.emulation = emulation   # see megatron_sailor.runtime.emulation (demos only)
        self.role = role
        self.mask = causal_mask(seq_length).to(device)
        self.positions = torch.arange(seq_length, dtype=torch.int64, device=device).unsqueeze(0).expand(
            micro_batch_size, -1)
        self.loss_scale = 1.0 / global_tokens
        self.grad_scale = 1.0            # fp16 dynamic loss scale (multiplies the loss before backward)

    def forward(self, input_tensor: torch.Tensor | None, batch: MicroBatch) -> tuple[torch.Tensor, float]:
        """Returns (output or scaled loss, this micro-batch's share of the global-mean loss)."""
        start_s = time.perf_counter()
        if self.dropout_ctx is not None:
            self.dropout_ctx.set(batch.iteration, batch.first_sample, batch.tokens.shape[0])
        if input_tensor is not None:
            input_tensor.requires_grad_(True)
            self.model.set_input_tensor(input_tensor)
        tokens = batch.tokens.to(self.device) if self.role.is_first else None
        saved = [0]
        with self.saved.counting(saved) as record:
            out = self.model(tokens, self.positions, self.mask)   # last stage: logits [b, s, vocab / tp]
            share = 0.0
            if self.role.is_last:
                labels = batch.labels.to(self.device)
                out = vocab_parallel_cross_entropy(out, labels, self.tp_group).sum() * self.loss_scale
                share = float(out.detach())
                if self.grad_scale != 1.0:
                    out = out * self.grad_scale
        self.last_saved_bytes, self.last_saved = saved[0], record
        if self.emulation is not None:
            self.emulation.compute(time.perf_counter() - start_s)
        return out, share

    def backward(self, input_tensor: torch.Tensor | None, output: torch.Tensor,
                 output_grad: torch.Tensor | None, batch: MicroBatch | None = None) -> torch.Tensor | None:
        """``batch``: the micro-batch being back-propagated (recomputed forwards redraw its dropout masks)."""
        start_s = time.perf_counter()
        if self.dropout_ctx is not None and batch is not None:
            self.dropout_ctx.set(batch.iteration, batch.first_sample, batch.tokens.shape[0])
        torch.autograd.backward(output, grad_tensors=output_grad)
        if batch is not None:
            self.saved.release(self.saved_of.pop(id(batch), None))
        if self.emulation is not None:
            self.emulation.compute(time.perf_counter() - start_s)
        return None if input_tensor is None else input_tensor.grad


def run_1f1b(step: StageStep, p2p: StageP2P, batches: Callable[[int], MicroBatch],
             num_microbatches: int) -> float:
    """Run one iteration's forwards and backwards; returns this rank's summed loss share (last stage)."""
    role, m = step.role, num_microbatches
    step.saved.reset()
    warmup = min(role.num_stages - role.stage - 1, m)
    inputs: list[torch.Tensor | None] = []
    outputs: list[torch.Tensor] = []
    in_flight: list[MicroBatch] = []
    loss_sum = 0.0
    fwd_index = 0

    def do_forward() -> None:
        nonlocal fwd_index, loss_sum
        inp = p2p.recv_forward()
        batch = batches(fwd_index)
        out, loss = step.forward(inp, batch)
        step.saved_of[id(batch)] = step.last_saved
        in_flight.append(batch)
        fwd_index += 1
        loss_sum += loss
        p2p.send_forward(out)
        inputs.append(inp)
        outputs.append(out)

    def do_backward() -> None:
        grad = p2p.recv_backward()
        inp, out = inputs.pop(0), outputs.pop(0)
        p2p.send_backward(step.backward(inp, out, grad, in_flight.pop(0)))

    for _ in range(warmup):
        do_forward()
    for _ in range(m - warmup):
        do_forward()
        do_backward()
    for _ in range(warmup):
        do_backward()
    p2p.wait_sends()
    return loss_sum
