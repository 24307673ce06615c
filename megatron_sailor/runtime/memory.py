"""Memory truth: the bytes one rank holds, counted from the tensors themselves.

Model states: parameters, gradients (the fp32 main gradients of a 16-bit model), fp32 main weights,
optimizer states (every tensor in the optimizer's state). Activations: the bytes a forward saves for
backward that are alive, counted with ``torch.autograd.graph.saved_tensors_hooks``: each storage once per
micro-batch, parameters excluded. A saved storage counts from the moment it is packed until it is freed
(a ``weakref.finalize`` on the storage) or its micro-batch's backward ends (:meth:`release`), whichever
comes first, so a tensor saved and freed inside the forward (a transient inside a checkpointed forward)
counts only while it lives. ``peak_bytes`` is the peak of these live bytes over the iteration (updated at
every pack). With recomputation the checkpointed forward keeps only its inputs; the transient re-forward
inside backward is not counted (one layer group at a time). With ``torch.utils.checkpoint``'s non-reentrant
mode the tensors saved inside the block go to its own (innermost) hook, so only its inputs are seen.
"""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class SavedRecord:
    """The live saved storages of one micro-batch's forward: storage pointer -> (bytes, finalizer)."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, weakref.finalize]] = {}

    @property
    def live_bytes(self) -> int:
        return sum(n for n, _ in self.live.values())


class SavedActivationCounter:
    """Counts the live bytes saved for backward inside :meth:`counting` (parameters excluded)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live_bytes = 0
        self.peak_bytes = 0
        self._records: list[SavedRecord] = []

    @contextlib.contextmanager
    def counting(self, sink: list[int]) -> Iterator[SavedRecord]:
        """Count what is saved inside as one micro-batch's record (live until :meth:`release`); on exit
        ``sink[0]`` holds the record's bytes still alive at the end of the forward."""
        record = SavedRecord()
        self._records.append(record)

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in self.param_storages and ptr not in record.live:
                nbytes = storage.nbytes()
                fin = weakref.finalize(storage, self._freed, record, ptr)
                fin.atexit = False
                record.live[ptr] = (nbytes, fin)
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            # a detached alias, not ``t``: a saved output holding itself (output -> grad_fn -> saved output)
            # would be a cycle the garbage collector cannot see, so a transient output would never be freed
            return t.detach()

        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                yield record
        finally:
            sink[0] = record.live_bytes

    def _freed(self, record: SavedRecord, ptr: int) -> None:
        entry = record.live.pop(ptr, None)
        if entry is not None:
            self.live_bytes -= entry[0]

    def release(self, record: SavedRecord | None) -> None:
        """The micro-batch's backward is done: nothing of ``record`` is saved for backward any more."""
        if record is None or record not in self._records:
            return
        self._records.remove(record)
        for nbytes, fin in record.live.values():
            fin.detach()
            self.live_bytes -= nbytes
        record.live.clear()

    def reset(self) -> None:
        for record in list(self._records):
            self.release(record)
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
