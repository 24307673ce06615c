"""The planner's search (pure functions over data, the simulator's cost model passed in via SimContext).

The names below load their module on first use, so importing a light submodule (``planner.search.space``,
which the baselines and the CLIs' flags need) does not import the search engine.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from planner.lazy import lazy_exports

_HOME = {"plan_search": "engine", "build_plan": "build", "Objective": "space", "SearchSpace": "space",
         "Candidate": "space", "PoolUse": "space", "SearchResult": "space"}

if TYPE_CHECKING:
    from planner.search.build import build_plan  # noqa: F401
    from planner.search.engine import plan_search  # noqa: F401
    from planner.search.space import Candidate, Objective, PoolUse, SearchResult, SearchSpace  # noqa: F401

__all__ = ["plan_search", "build_plan", "Objective", "SearchSpace", "Candidate", "PoolUse", "SearchResult"]

__getattr__, __dir__ = lazy_exports(__name__, __name__, _HOME, globals())
