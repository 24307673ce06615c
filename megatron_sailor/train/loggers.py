"""TensorBoard and Weights & Biases logging of the training job (global rank 0 writes; losses are global).

Contract: :class:`TrainLoggers` writes Megatron-LM's scalar names: ``lm loss``, ``learning-rate``,
``grad-norm``, ``batch-size``, ``iteration-time`` (x = iteration, 1-based as Megatron prints it), their
``... vs samples`` variants (x = consumed samples), and ``lm loss validation`` / ``lm loss validation ppl``.
TensorBoard (``--tensorboard-dir``) needs the ``tensorboard`` package (extra ``tensorboard``); W&B
(``--wandb-project``, ``--wandb-exp-name``, ``--wandb-save-dir``) needs ``wandb`` (extra ``wandb``) and runs
offline unless ``WANDB_MODE`` says otherwise or an API key is configured (``WANDB_API_KEY`` or an
``api.wandb.ai`` entry in ~/.netrc); offline runs are synced later with ``wandb sync DIR``.
:func:`check_logger_packages` turns a missing package into one :class:`InputError` line before start-up.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError


@dataclass(frozen=True)
class LoggerConfig:
    tensorboard_dir: str | None = None
    wandb_project: str | None = None
    wandb_exp_name: str | None = None
    wandb_save_dir: str | None = None


def check_logger_packages(cfg: LoggerConfig) -> None:
    if cfg.tensorboard_dir and importlib.util.find_spec("tensorboard") is None:
        raise InputError("--tensorboard-dir needs the tensorboard package: pip install -e \".[tensorboard]\"")
    if cfg.wandb_project:
        if importlib.util.find_spec("wandb") is None:
            raise InputError("--wandb-project needs the wandb package: pip install -e \".[wandb]\"")
        if not cfg.wandb_exp_name:
            raise InputError("--wandb-project needs --wandb-exp-name (as in Megatron-LM)")


def wandb_mode() -> str:
    """``WANDB_MODE`` if set, else online with a configured API key, else offline."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    netrc = Path.home() / ".netrc"
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(encoding="utf-8", errors="replace"))
    return "online" if has_key else "offline"


class TrainLoggers:
    """The writers of one run; every method is a no-op on ranks other than 0 and without a writer."""

    def __init__(self, cfg: LoggerConfig, rank: int, run_config: dict[str, Any], save_dir: str | None) -> None:
        self.tb: Any = None
        self.wandb: Any = None
        self.paths: list[str] = []
        if rank != 0:
            return
        if cfg.tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(log_dir=cfg.tensorboard_dir)
            self.paths.append(f"TensorBoard events in {cfg.tensorboard_dir}")
        if cfg.wandb_project:
            import wandb
            save = cfg.wandb_save_dir or str(Path(save_dir or ".") / "wandb")
            Path(save).mkdir(parents=True, exist_ok=True)
            mode = wandb_mode()
            self.wandb = wandb.init(project=cfg.wandb_project, name=cfg.wandb_exp_name, dir=save, mode=mode,
                                    config=run_config)
            self.paths.append(f"W&B run ({mode}) in {save}")

    def _scalars(self, values: dict[str, float], iteration: int, samples: int) -> None:
        if self.tb is not None:
            for key, value in values.items():
                self.tb.add_scalar(key, value, iteration)
                self.tb.add_scalar(f"{key} vs samples", value, samples)
        if self.wandb is not None:
            self.wandb.log({**values, "samples": samples}, step=iteration)

    def train(self, iteration: int, samples: int, loss: float, lr: float, grad_norm: float,
              iteration_time_s: float, batch_size: int) -> None:
        self._scalars({"lm loss": loss, "learning-rate": lr, "grad-norm": grad_norm,
                       "iteration-time": iteration_time_s, "batch-size": float(batch_size)}, iteration, samples)

    def validation(self, iteration: int, samples: int, loss: float, ppl: float) -> None:
        self._scalars({"lm loss validation": loss, "lm loss validation ppl": ppl}, iteration, samples)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.flush()
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
