"""Activations and gradients between consecutive stages whose TP degrees (and GPU types) differ.

Without sequence parallelism a stage's output is replicated on all its TP ranks, and the gradient of a
stage's input is identical on all its TP ranks (megatron all-reduces it inside the column-parallel
layers). So TP-rank 0 of the sender sends to every TP rank of the receiver, forwards and backwards
alike. Sends are asynchronous (kept until :meth:`StageP2P.wait_sends`), receives block: any causally valid
schedule (1F1B is) then cannot deadlock, whatever the order of sends.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from planner.layout import RankLayout


@dataclass
class StageP2P:
    """Point-to-point endpoints of one rank (mutable: it holds in-flight sends)."""

    group: Any
    rank: int
    forward_source: int | None
    forward_targets: tuple[int, ...]
    backward_source: int | None
    backward_targets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    timeout: timedelta = timedelta(seconds=120)
    device: torch.device = torch.device("cpu")
    zones: dict[int, str] = field(default_factory=dict)      # rank -> zone, for the emulation hook
    emulation: Any | None = None                              # see megatron_sailor.runtime.emulation (demos only)
    _pending: list[tuple[Any, torch.Tensor]] = field(default_factory=list)
    sent_bytes: int = 0

    @classmethod
    def for_rank(cls, layout: RankLayout, rank: int, group: Any, shape: tuple[int, ...],
                 dtype: torch.dtype = torch.float32, emulation: Any | None = None,
                 timeout: timedelta = timedelta(seconds=120),
                 device: torch.device = torch.device("cpu")) -> "StageP2P":
        return cls(group=group, rank=rank, forward_source=layout.forward_source(rank),
                   forward_targets=layout.forward_targets(rank),
                   backward_source=layout.backward_source(rank),
                   backward_targets=layout.backward_targets(rank), shape=shape, dtype=dtype,
                   zones={r.rank: r.zone for r in layout.ranks}, emulation=emulation,
                   timeout=timeout, device=device)

    def _recv(self, src: int | None) -> torch.Tensor | None:
        if src is None:
            return None
        buf = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        dist.irecv(buf, src=src, group=self.group).wait(timeout=self.timeout)  # never hang forever
        return buf

    def _send(self, tensor: torch.Tensor | None, targets: tuple[int, ...]) -> None:
        if not targets:
            return
        data = tensor.detach().contiguous()
        nbytes = data.numel() * data.element_size()
        for dst in targets:
            if self.emulation is not None:
                self.emulation.message(nbytes, self.zones[dst] != self.zones[self.rank])
            self._pending.append((dist.isend(data, dst=dst, group=self.group), data))
            self.sent_bytes += nbytes

    def recv_forward(self) -> torch.Tensor | None:
        return self._recv(self.forward_source)

    def send_forward(self, output: torch.Tensor) -> None:
        self._send(output, self.forward_targets)

    def recv_backward(self) -> torch.Tensor | None:
        return self._recv(self.backward_source)

    def send_backward(self, input_grad: torch.Tensor | None) -> None:
        self._send(input_grad, self.backward_targets)

    def wait_sends(self) -> None:
        for work, _ in self._pending:
            work.wait()
        self._pending.clear()
