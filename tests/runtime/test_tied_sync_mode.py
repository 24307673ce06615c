"""The tied-embedding groups' sync mode (runtime/groups.py): stage 0's resolved mode, by planner.layout's rule."""
from __future__ import annotations

import pytest

from megatron_sailor.runtime.groups import SYNC_FLAT, SYNC_HIERARCHICAL, stage_sync_modes, tied_sync_mode
from planner.layout import tied_embedding_sync_mode


@pytest.mark.parametrize("plan_modes, flag, want", [
    (("flat", None), SYNC_HIERARCHICAL, SYNC_FLAT),              # the plan's stage 0 beats the flag
    (("hierarchical", "flat"), SYNC_FLAT, SYNC_HIERARCHICAL),
    ((None, "flat", "flat"), SYNC_HIERARCHICAL, SYNC_HIERARCHICAL),   # stage 0 null: the flag decides
    ((None, "hierarchical"), SYNC_FLAT, SYNC_FLAT),
])
def test_tied_groups_use_stage_zeros_resolved_mode(plan_modes, flag, want) -> None:
    modes = stage_sync_modes(plan_modes, flag)
    assert tied_sync_mode(modes) == want
    assert tied_embedding_sync_mode(modes) == want               # the simulator's rule gives the same


def test_rule_of_an_unresolved_one_replica_stage_is_none() -> None:
    assert tied_embedding_sync_mode((None, "flat")) is None
    assert tied_embedding_sync_mode(()) is None
