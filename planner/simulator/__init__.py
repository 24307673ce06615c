"""The simulator: one cost model for the planner's search and for every report."""
from planner.simulator.core import Estimate, StageEstimate, simulate
from planner.simulator.settings import OURS, PRESETS, SAILOR_DEEPSPEED, RuntimeSettings, SimContext
from planner.simulator.sync_modes import chosen_sync_modes, with_chosen_sync_modes

__all__ = ["Estimate", "StageEstimate", "simulate", "RuntimeSettings", "SimContext", "PRESETS", "OURS",
           "SAILOR_DEEPSPEED", "chosen_sync_modes", "with_chosen_sync_modes"]
