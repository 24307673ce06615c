"""Emulation layer (demos and tests only): slower GPUs and slow or distant links on one machine.

Nothing in the runtime imports this module; the training job (``megatron_sailor.train.loop``) builds an
:class:`Emulation` from ``SAILOR_EMULATE_SLOWDOWN`` / ``SAILOR_EMULATE_LINK_DELAY_S`` (exported by ``python -m launch`` for
nodes declared with ``emulate:``, see docs/LAUNCH.md) and the ``--emulate-cross-zone-*`` flags, and
passes it in. The runtime calls two hooks: ``compute(elapsed_s)`` after each forward/backward (sleeps
``(slowdown - 1) x elapsed_s``) and ``message(nbytes, cross_zone)`` before each send or collective (sleeps
``link_delay_s``, plus ``latency + bytes / bandwidth`` when the message crosses zones).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Mapping

from planner.errors import InputError


@dataclass(frozen=True)
class Emulation:
    slowdown: float = 1.0
    link_delay_s: float = 0.0
    cross_zone_latency_s: float = 0.0
    cross_zone_gbps: float = 0.0            # 0 = no bandwidth limit

    def __post_init__(self) -> None:
        if self.slowdown < 1.0:
            raise InputError(f"emulated slowdown must be >= 1, got {self.slowdown}")
        for name in ("link_delay_s", "cross_zone_latency_s", "cross_zone_gbps"):
            if getattr(self, name) < 0:
                raise InputError(f"emulation '{name}' must be >= 0, got {getattr(self, name)}")

    @property
    def active(self) -> bool:
        return (self.slowdown > 1.0 or self.link_delay_s > 0 or self.cross_zone_latency_s > 0
                or self.cross_zone_gbps > 0)

    def message_delay_s(self, nbytes: int, cross_zone: bool) -> float:
        delay = self.link_delay_s
        if cross_zone:
            delay += self.cross_zone_latency_s
            if self.cross_zone_gbps > 0:
                delay += nbytes * 8 / (self.cross_zone_gbps * 1e9)
        return delay

    def message(self, nbytes: int, cross_zone: bool) -> None:
        delay = self.message_delay_s(nbytes, cross_zone)
        if delay > 0:
            time.sleep(delay)

    def compute(self, elapsed_s: float) -> None:
        if self.slowdown > 1.0:
            time.sleep((self.slowdown - 1.0) * elapsed_s)


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise InputError(f"environment variable {name} must be a number, got {raw!r}") from None


def emulation_from(environ: Mapping[str, str] | None = None, cross_zone_latency_s: float = 0.0,
                   cross_zone_gbps: float = 0.0) -> Emulation | None:
    """The emulation requested by the environment and flags, or None when nothing is emulated."""
    env = os.environ if environ is None else environ
    emu = Emulation(slowdown=_env_float(env, "SAILOR_EMULATE_SLOWDOWN", 1.0),
                    link_delay_s=_env_float(env, "SAILOR_EMULATE_LINK_DELAY_S", 0.0),
                    cross_zone_latency_s=cross_zone_latency_s, cross_zone_gbps=cross_zone_gbps)
    return emu if emu.active else None
