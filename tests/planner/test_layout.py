"""Plan rank order (planner/layout.py) and the SAILOR_RANK_MAP codec (planner/rank_env.py)."""
from __future__ import annotations

import pytest

from planner.plan import Plan, Replica, Stage
from planner.layout import global_rank, plan_slots, replica_first_rank
from planner.rank_env import format_rank_map, parse_rank_map, plan_rank_from_env, rank_and_world_from_env


def _plan(tps: list[list[int]]) -> Plan:
    """One stage per row, one replica per entry (its TP); 1 layer per stage."""
    stages = tuple(Stage(first_layer=s, num_layers=1,
                         replicas=tuple(Replica(gpu_type="A100-40", tp=tp, zone="z-a") for tp in row))
                   for s, row in enumerate(tps))
    return Plan(num_layers=len(tps), stages=stages, micro_batch_size=1, global_batch_size=len(tps[0]))


def test_slots_are_stage_major_then_replica_then_tp() -> None:
    plan = _plan([[2, 1], [1, 4]])
    got = [(s.stage, s.replica, s.tp_rank) for s in plan_slots(plan)]
    assert got == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 1, 2), (1, 1, 3)]
    assert [s.rank for s in plan_slots(plan)] == list(range(plan.world_size))


def test_global_rank_formula_matches_slots() -> None:
    plan = _plan([[2, 1, 4], [1, 4, 2], [8, 1, 1]])
    for slot in plan_slots(plan):
        assert global_rank(plan, slot.stage, slot.replica, slot.tp_rank) == slot.rank
    assert replica_first_rank(plan, 1, 2) == 7 + 1 + 4
    assert global_rank(plan, 2, 0, 7) == 7 + 7 + 7


@pytest.mark.parametrize("args", [(2, 0, 0), (0, 2, 0), (0, 0, 2), (-1, 0, 0)])
def test_global_rank_rejects_out_of_range(args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        global_rank(_plan([[2, 1], [1, 1]]), *args)


def test_rank_map_round_trip_and_errors() -> None:
    assert parse_rank_map(format_rank_map((5, 0, 3))) == (5, 0, 3)
    for bad in ("1,x", "1,1", "-1", ""):
        with pytest.raises(ValueError):
            parse_rank_map(bad)


def test_plan_rank_from_env() -> None:
    env = {"SAILOR_RANK_MAP": "4,1,7", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3", "WORLD_SIZE": "8"}
    assert plan_rank_from_env(env) == 7
    assert plan_rank_from_env({"LOCAL_RANK": "0"}) is None
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE"):
        plan_rank_from_env({**env, "LOCAL_WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="WORLD_SIZE is 7"):
        plan_rank_from_env({**env, "WORLD_SIZE": "7"})


def test_rank_and_world_from_env() -> None:
    env = {"SAILOR_RANK_MAP": "3,0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "RANK": "2", "WORLD_SIZE": "4",
           "SAILOR_WORLD_SIZE": "4", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    assert rank_and_world_from_env(env) == (3, 4)
    assert rank_and_world_from_env({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(ValueError, match="agent store"):
        rank_and_world_from_env({**env, "TORCHELASTIC_USE_AGENT_STORE": "False"})
    assert rank_and_world_from_env({**env, "TORCHELASTIC_USE_AGENT_STORE": "False", "RANK": "3"}) == (3, 4)
    with pytest.raises(ValueError, match="SAILOR_WORLD_SIZE=5"):
        rank_and_world_from_env({**env, "SAILOR_WORLD_SIZE": "5"})
