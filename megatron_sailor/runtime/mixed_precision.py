"""Mixed precision as Megatron does it: 16-bit model, fp32 main weights, fp32 gradient accumulation.

The stage model holds bf16 / fp16 parameters and computes in 16 bits. :class:`MainParams` keeps one fp32
copy of every trainable parameter (taken from the 16-bit value, as Megatron's optimizer does) with an fp32
gradient: a post-accumulate hook adds each 16-bit gradient to it (so micro-batches accumulate in fp32) and
frees the 16-bit one. Gradient sync, the global norm, clipping and AdamW all work on the fp32 copies (the
:class:`MainParams` module has the same parameter order and sharding attributes as the model); after the
step the fp32 weights are copied back into the 16-bit model.

fp16 adds dynamic loss scaling (:class:`DynamicLossScaler`, Megatron's rule): the loss is multiplied by
the scale before backward, the fp32 gradients divided by it after the sync; an inf/nan anywhere makes the
global norm (one world all-reduce) non-finite on every rank, so every rank skips the step together; the
scale then shrinks after ``hysteresis`` such steps and grows after ``window`` clean ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_ATTRS = ("tensor_model_parallel", "partition_dim", "partition_stride", "sailor_tied", "sailor_tied_copy")


@dataclass(frozen=True)
class LossScaleConfig:
    """Megatron's ``--loss-scale`` (static; None = dynamic), ``--initial-loss-scale``, ``--min-loss-scale``,
    ``--loss-scale-window``, ``--hysteresis``."""

    static: float | None = None
    initial: float = 2.0 ** 32
    minimum: float = 1.0
    window: int = 1000
    hysteresis: int = 2

    def problems(self) -> list[str]:
        out = []
        if self.static is not None and not self.static > 0:
            out.append(f"--loss-scale must be > 0, got {self.static}")
        if not 0 < self.minimum <= self.initial:
            out.append(f"--min-loss-scale {self.minimum} must be > 0 and <= --initial-loss-scale {self.initial}")
        if self.window < 1 or self.hysteresis < 1:
            out.append(f"--loss-scale-window {self.window} and --hysteresis {self.hysteresis} must be >= 1")
        return out


class DynamicLossScaler:
    """Megatron's dynamic scaler: shrink x0.5 after ``hysteresis`` overflows, grow x2 after ``window``
    clean steps (a static scale never changes)."""

    def __init__(self, cfg: LossScaleConfig) -> None:
        self.cfg = cfg
        self.scale = float(cfg.static if cfg.static is not None else cfg.initial)
        self._clean = 0
        self._hysteresis_left = cfg.hysteresis

    STATE_KEYS = ("loss_scale", "loss_scale_clean_steps", "loss_scale_hysteresis_left")

    def state(self) -> dict[str, float]:
        """Scalars that resume the scaler exactly (checkpoint meta ``extra``)."""
        return {"loss_scale": float(self.scale), "loss_scale_clean_steps": float(self._clean),
                "loss_scale_hysteresis_left": float(self._hysteresis_left)}

    def load_state(self, state: dict[str, float]) -> None:
        """Restore :meth:`state` (a static scale keeps its flag value); ValueError when malformed."""
        vals = [state.get(k) for k in self.STATE_KEYS]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals) \
                or vals[0] <= 0 or vals[1] < 0 or vals[1] != int(vals[1]) or vals[2] != int(vals[2]):
            raise ValueError(f"loss-scaler state {vals} is not (scale > 0, clean steps >= 0, hysteresis)")
        if self.cfg.static is None:
            self.scale = float(vals[0])
        self._clean, self._hysteresis_left = int(vals[1]), int(vals[2])

    def update(self, found_inf: bool) -> None:
        if self.cfg.static is not None:
            return
        if found_inf:
            self._clean = 0
            self._hysteresis_left -= 1
            if self._hysteresis_left <= 0:
                self.scale = max(self.scale * 0.5, self.cfg.minimum)
            return
        self._clean += 1
        if self._clean == self.cfg.window:
            self._clean = 0
            self._hysteresis_left = self.cfg.hysteresis
            self.scale *= 2.0


class MainParams(torch.nn.Module):
    """fp32 main weights and gradients of a 16-bit model (see the module docstring)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        self.main = torch.nn.ParameterList()
        for p in self.model_params:
            m = torch.nn.Parameter(p.detach().float().clone())
            for a in _ATTRS:
                if hasattr(p, a):
                    setattr(m, a, getattr(p, a))
            m.grad = torch.zeros_like(m)
            self.main.append(m)
            p.register_post_accumulate_grad_hook(self._accumulate_into(m))

    @staticmethod
    def _accumulate_into(main: torch.nn.Parameter):  # noqa: ANN205 - hook factory
        def hook(param: torch.Tensor) -> None:
            main.grad.add_(param.grad)          # fp32 += 16-bit: exact upcast, no temporary
            param.grad = None
        return hook

    @torch.no_grad()
    def unscale_(self, scale: float) -> None:
        if scale != 1.0:
            for m in self.main:
                m.grad.mul_(1.0 / scale)

    @torch.no_grad()
    def copy_to_model(self) -> None:
        for p, m in zip(self.model_params, self.main):
            p.copy_(m)


class Fp32Grads:
    """fp32 gradient accumulators of a 16-bit model without fp32 main weights (the distributed optimizer
    keeps main weights only for the slice each rank owns): ``grad_of[id(p)]`` receives every micro-batch's
    16-bit gradient of ``p`` (post-accumulate hook, the 16-bit one freed), as :class:`MainParams` does."""

    def __init__(self, model: torch.nn.Module, views: dict[int, torch.Tensor] | None = None) -> None:
        """``views``: zeroed fp32 tensors to accumulate into, by ``id(param)`` (views of a contiguous
        gradient buffer); the other parameters get their own."""
        self.grad_of: dict[int, torch.Tensor] = {}
        for p in model.parameters():
            if p.requires_grad:
                g = views[id(p)] if views and id(p) in views else \
                    torch.zeros(p.shape, dtype=torch.float32, device=p.device)
                self.grad_of[id(p)] = g
                p.register_post_accumulate_grad_hook(self._accumulate_into(g))

    @staticmethod
    def _accumulate_into(grad: torch.Tensor):  # noqa: ANN205 - hook factory
        def hook(param: torch.Tensor) -> None:
            grad.add_(param.grad)
            param.grad = None
        return hook

    def tensors(self) -> list[torch.Tensor]:
        return list(self.grad_of.values())


def is_finite(norm: float) -> bool:
    return math.isfinite(norm)
