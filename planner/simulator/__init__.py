"""The simulator: one cost model for the planner's search and for every report."""
from planner.simulator.core import Estimate, StageEstimate, simulate
from planner.simulator.settings import OURS, PRESETS, SAILOR_DEEPSPEED, RuntimeSettings, SimContext

__all__ = ["Estimate", "StageEstimate", "simulate", "RuntimeSettings", "SimContext", "PRESETS", "OURS",
           "SAILOR_DEEPSPEED"]
