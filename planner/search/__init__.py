"""The planner's search (pure functions over data, the simulator's cost model passed in via SimContext)."""
from planner.search.build import build_plan
from planner.search.engine import plan_search
from planner.search.space import Candidate, Objective, PoolUse, SearchResult, SearchSpace

__all__ = ["plan_search", "build_plan", "Objective", "SearchSpace", "Candidate", "PoolUse", "SearchResult"]
