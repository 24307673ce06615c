"""Placing plan slots on nodes (launch/assign.py)."""
from __future__ import annotations

import random

import pytest

from planner.errors import InputError
from planner.plan import Plan, Replica, Stage
from launch.assign import assign
from launch.inventory import Inventory, Node
from planner.layout import plan_slots


def _plan(rows: list[list[tuple[str, int, str]]]) -> Plan:
    """One stage per row; each entry (gpu_type, tp, zone) is one replica; 1 layer per stage."""
    stages = tuple(Stage(first_layer=s, num_layers=1,
                         replicas=tuple(Replica(gpu_type=g, tp=tp, zone=z) for g, tp, z in row))
                   for s, row in enumerate(rows))
    return Plan(num_layers=len(rows), stages=stages, micro_batch_size=1, global_batch_size=len(rows[0]))


def _inv(*nodes: tuple[str, str, str, int]) -> Inventory:
    return Inventory(nodes=tuple(Node(host=h, gpu_type=g, zone=z, gpus_per_node=n) for h, g, z, n in nodes))


def _check_invariants(plan: Plan, inv: Inventory) -> None:
    result = assign(plan, inv)
    placed = [s for na in result.nodes for s in na.slots]
    assert sorted(s.rank for s in placed) == list(range(plan.world_size))
    replica_node: dict[tuple[int, int], str] = {}
    for i, na in enumerate(result.nodes):
        assert na.node_rank == i and 0 < na.nproc <= na.node.gpus_per_node
        assert list(na.plan_ranks) == sorted(na.plan_ranks)
        for slot in na.slots:
            assert (slot.gpu_type, slot.zone) == na.node.pool
            assert replica_node.setdefault((slot.stage, slot.replica), na.node.name) == na.node.name
    assert [min(na.plan_ranks) for na in result.nodes] == sorted(min(na.plan_ranks) for na in result.nodes)


def test_types_zones_and_tp_inside_a_node() -> None:
    plan = _plan([[("A100", 2, "z-a"), ("V100", 1, "z-b")], [("A100", 1, "z-a"), ("V100", 1, "z-b")]])
    inv = _inv(("v1", "V100", "z-b", 1), ("a1", "A100", "z-a", 4), ("v2", "V100", "z-b", 1),
               ("idle", "A100", "z-c", 8))
    result = assign(plan, inv)
    assert [(na.node.name, na.plan_ranks) for na in result.nodes] == [("a1", (0, 1, 3)), ("v1", (2,)),
                                                                      ("v2", (4,))]
    assert result.placement()[3] == ("a1", 2)
    assert not result.is_identity
    _check_invariants(plan, inv)


def test_contiguous_ranks_when_nodes_allow_it() -> None:
    plan = _plan([[("A100", 1, "z")] * 2, [("A100", 1, "z")] * 2])
    result = assign(plan, _inv(("a", "A100", "z", 2), ("b", "A100", "z", 2)))
    assert [na.plan_ranks for na in result.nodes] == [(0, 1), (2, 3)]
    assert result.is_identity


def test_falls_back_to_first_fit_decreasing() -> None:
    # first-fit in plan order puts tp=2 on the 4-GPU node, then tp=4 fits nowhere; by decreasing TP it fits.
    plan = _plan([[("A", 2, "z"), ("A", 4, "z")]])
    inv = _inv(("big", "A", "z", 4), ("small", "A", "z", 2))
    result = assign(plan, inv)
    assert [(na.node.name, na.plan_ranks) for na in result.nodes] == [("small", (0, 1)), ("big", (2, 3, 4, 5))]
    _check_invariants(plan, inv)


@pytest.mark.parametrize("inv, message", [
    (_inv(("a", "A100", "z-a", 2)), "needs 3 A100 GPU(s) in zone z-a but the inventory has only 2 (a)"),
    (_inv(("a", "A100", "z-b", 8)), "has no A100 node in zone z-a"),
    (_inv(("a", "V100", "z-a", 8)), "has no A100 node in zone z-a"),
    (_inv(("a", "A100", "z-a", 1), ("b", "A100", "z-a", 1), ("c", "A100", "z-a", 1)),
     "stages[0].replicas[0] has tp=2 but the largest A100 node in zone z-a has 1 GPU(s)"),
])
def test_inventory_that_cannot_host_the_plan(inv: Inventory, message: str) -> None:
    plan = _plan([[("A100", 2, "z-a")], [("A100", 1, "z-a")]])
    with pytest.raises(InputError) as err:
        assign(plan, inv)
    assert message in str(err.value)


def test_unpackable_pool_is_reported() -> None:
    plan = _plan([[("A", 2, "z"), ("A", 2, "z"), ("A", 2, "z")]])
    with pytest.raises(InputError, match=r"cannot pack A replicas with tp \[2, 2, 2\] in zone z into nodes "
                                         r"of \[3, 3\] GPUs"):
        assign(plan, _inv(("a", "A", "z", 3), ("b", "A", "z", 3)))


def test_random_plans_respect_every_rule() -> None:
    rng = random.Random(0)
    pools = [("A100", "z-a"), ("V100", "z-b"), ("A100", "z-c")]
    for _ in range(200):
        d, num_stages = rng.randint(1, 3), rng.randint(1, 3)
        rows = [[(*rng.choice(pools), rng.choice([1, 2, 4])) for _ in range(d)] for _ in range(num_stages)]
        plan = _plan([[(g, tp, z) for g, z, tp in row] for row in rows])
        need: dict[tuple[str, str], int] = {}
        for slot in plan_slots(plan):
            need[(slot.gpu_type, slot.zone)] = need.get((slot.gpu_type, slot.zone), 0) + 1
        # enough 4-GPU nodes per pool (plus one spare), listed in a shuffled order
        nodes = [(f"{g}-{z}-{i}", g, z, 4) for (g, z), n in need.items() for i in range(-(-n // 4) + 1)]
        rng.shuffle(nodes)
        _check_invariants(plan, _inv(*nodes))
