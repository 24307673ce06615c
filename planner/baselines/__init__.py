"""Comparators scored by the same simulator as the planner: restrictions of the planner's search space."""
from planner.baselines.spaces import GRID_SPACE, SAILOR_SHAPE_SPACE, baseline_space

__all__ = ["GRID_SPACE", "SAILOR_SHAPE_SPACE", "baseline_space"]
