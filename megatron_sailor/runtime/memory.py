"""Memory truth: the bytes one rank holds, counted from the tensors themselves.

Model states: parameters, gradients (the fp32 main gradients of a 16-bit model), fp32 main weights,
optimizer states (every tensor in the optimizer's state). Activations: the bytes a forward saves for
backward, counted with ``torch.autograd.graph.saved_tensors_hooks`` (each storage once, parameters
excluded); the schedule adds a micro-batch's bytes at its forward and removes them at its backward, and
the peak over the iteration is what the rank held at most. With recomputation the checkpointed forward saves
only its inputs; the transient re-forward inside backward is not counted (one layer group at a time).
"""
from __future__ import annotations

from typing import Any

import torch


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class SavedActivationCounter:
    """Counts the bytes saved for backward inside :meth:`counting` (parameters excluded)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live_bytes = 0
        self.peak_bytes = 0

    def counting(self, sink: list[int]):  # noqa: ANN201 - a context manager
        seen: set[int] = set()

        def pack(t: torch.Tensor) -> torch.Tensor:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self.param_storages and ptr not in seen:
                seen.add(ptr)
                sink[0] += t.untyped_storage().nbytes()
            return t

        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

    def add(self, nbytes: int) -> None:
        self.live_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def remove(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    def reset(self) -> None:
        self.live_bytes = self.peak_bytes = 0


def model_state_bytes(model: torch.nn.Module, master: torch.nn.Module, optimizer: torch.optim.Optimizer
                      ) -> dict[str, int]:
    """Parameters, gradients, fp32 main weights (16-bit models) and optimizer states of one rank."""
    params = list(model.parameters())
    mains = list(master.parameters()) if master is not model else []
    grads = [p.grad for p in (mains or params) if p.grad is not None]
    states = [t for st in optimizer.state.values() for t in st.values()
              if isinstance(t, torch.Tensor) and t.dim() > 0]
    return {"params_bytes": _nbytes(params), "grads_bytes": _nbytes(grads), "main_weights_bytes": _nbytes(mains),
            "optimizer_bytes": _nbytes(states)}
