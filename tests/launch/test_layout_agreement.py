"""Launcher and runtime agree on every rank: for 200 random heterogeneous plans, the placement of
``launch.assign`` + the per-node ``SAILOR_RANK_MAP`` of ``launch.torchrun_cmds`` and the process groups the
runtime builds (``megatron_sailor.runtime.groups.create_groups`` on ``planner.layout``) give every worker the
same stage, replica, TP rank, GPU type and zone. ``new_group`` is replaced by a recorder: the test checks
which ranks the runtime puts together, not torch's group objects."""
from __future__ import annotations

import random

import pytest

from launch.assign import assign
from launch.inventory import Inventory, Node
from launch.torchrun_cmds import LaunchConfig, build_commands
from megatron_sailor.runtime import groups as groups_mod
from planner.layout import build_layout
from planner.plan import Plan, Replica, Stage
from planner.rank_env import rank_and_world_from_env

POOLS = [("A100-40", "us-central1-a"), ("V100-16", "us-central1-a"), ("A100-40", "us-west1-b"),
         ("GH200", "europe-west4-a")]


def _random_case(rng: random.Random) -> tuple[Plan, Inventory]:
    d, num_stages = rng.randint(1, 3), rng.randint(1, 4)
    stages = tuple(Stage(first_layer=s, num_layers=1,
                         replicas=tuple(Replica(gpu_type=g, tp=rng.choice([1, 2, 4]), zone=z)
                                        for g, z in (rng.choice(POOLS) for _ in range(d))))
                   for s in range(num_stages))
    plan = Plan(num_layers=num_stages, stages=stages, micro_batch_size=1, global_batch_size=d)
    need: dict[tuple[str, str], int] = {}
    for _, _, rep in plan.replicas():
        need[(rep.gpu_type, rep.zone)] = need.get((rep.gpu_type, rep.zone), 0) + rep.tp
    nodes = []
    for (g, z), n in need.items():
        size = rng.choice([4, 8])
        nodes += [Node(host=f"{g}-{z}-{i}", gpu_type=g, zone=z, gpus_per_node=size) for i in range(-(-n // size) + 1)]
    rng.shuffle(nodes)
    return plan, Inventory(nodes=tuple(nodes))


def _workers(plan: Plan, inv: Inventory):  # noqa: ANN202 - yields (node, local rank, launcher slot, env)
    assignment = assign(plan, inv)
    commands = build_commands(assignment, LaunchConfig(plan_path="plan.json"))
    first_torchrun_rank = 0
    for na, cmd in zip(assignment.nodes, commands):
        assert cmd.node_name == na.node.name
        for local, slot in enumerate(na.slots):
            env = {**dict(cmd.env), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(na.nproc),
                   "RANK": str(first_torchrun_rank + local), "WORLD_SIZE": str(plan.world_size),
                   "TORCHELASTIC_USE_AGENT_STORE": "True"}
            yield na.node, local, slot, env
        first_torchrun_rank += na.nproc


def test_launcher_placement_and_runtime_groups_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups_mod, "_new", lambda ranks, timeout: tuple(ranks))
    rng = random.Random(10)
    checked = 0
    for _ in range(200):
        plan, inv = _random_case(rng)
        layout = build_layout(plan)
        node_of: dict[int, str] = {}
        seen: set[int] = set()
        workers = list(_workers(plan, inv))
        for node, _, _, env in workers:
            node_of[rank_and_world_from_env(env)[0]] = node.name
        for node, local, slot, env in workers:
            rank, world = rank_and_world_from_env(env)          # what the runtime decodes
            assert world == plan.world_size and rank not in seen
            seen.add(rank)
            groups = groups_mod.create_groups(layout, rank, "hierarchical")
            me = layout.info(rank)
            launcher = (slot.stage, slot.replica, slot.tp_rank, node.gpu_type, node.zone)
            runtime = (me.stage, me.replica, groups.tp.index(rank), me.gpu_type, me.zone)
            assert runtime == launcher, (plan.to_dict(), node.name, local)
            assert len(groups.tp) == slot.tp and {node_of[r] for r in groups.tp} == {node.name}
            checked += 1
        assert seen == set(range(plan.world_size))
    assert checked > 1000
