"""The simulator: one cost model for the planner's search and for every report.

The names below load their module on first use, so importing a light submodule (``planner.simulator.settings``,
which the planner's inputs need) does not import the cost model and numpy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from planner.lazy import lazy_exports

_HOME = {"Estimate": "core", "StageEstimate": "core", "simulate": "core",
         "RuntimeSettings": "settings", "SimContext": "settings", "PRESETS": "settings", "OURS": "settings",
         "SAILOR_DEEPSPEED": "settings", "chosen_sync_modes": "sync_modes", "with_chosen_sync_modes": "sync_modes"}

if TYPE_CHECKING:
    from planner.simulator.core import Estimate, StageEstimate, simulate  # noqa: F401
    from planner.simulator.settings import (OURS, PRESETS, SAILOR_DEEPSPEED, RuntimeSettings,  # noqa: F401
                                            SimContext)
    from planner.simulator.sync_modes import chosen_sync_modes, with_chosen_sync_modes  # noqa: F401

__all__ = ["Estimate", "StageEstimate", "simulate", "RuntimeSettings", "SimContext", "PRESETS", "OURS",
           "SAILOR_DEEPSPEED", "chosen_sync_modes", "with_chosen_sync_modes"]


__getattr__, __dir__ = lazy_exports(__name__, __name__, _HOME, globals())
