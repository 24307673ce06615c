"""Node inventory parsing and validation (launch/inventory.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import InputError
from launch.inventory import NodeEmulation, inventory_from_data, load_inventory

YAML = """
nodes:
  - host: a1.example
    gpu_type: A100-40
    zone: us-central1-a
    gpus_per_node: 4
    cpus_per_node: 32
  - host: v1.example
    name: slow-v1
    gpu_type: V100
    zone: us-west1-b
    gpus_per_node: 2
    emulate: {slowdown: 2.5, link_delay_s: 0.01}
"""


def _node(**over: object) -> dict:
    base = {"host": "h1", "gpu_type": "A100-40", "zone": "z-a", "gpus_per_node": 2}
    base.update(over)
    return base


def test_yaml_and_json_load_the_same(tmp_path: Path) -> None:
    import yaml
    (tmp_path / "n.yaml").write_text(YAML)
    (tmp_path / "n.json").write_text(json.dumps(yaml.safe_load(YAML)))
    inv = load_inventory(tmp_path / "n.yaml")
    assert inv == load_inventory(tmp_path / "n.json")
    a, v = inv.nodes
    assert (a.name, a.gpus_per_node, a.cpus_per_node, a.emulate) == ("a1.example", 4, 32, None)
    assert v.name == "slow-v1" and v.pool == ("V100", "us-west1-b")
    assert v.emulate == NodeEmulation(slowdown=2.5, link_delay_s=0.01)
    assert v.emulate.env() == {"SAILOR_EMULATE_SLOWDOWN": "2.5", "SAILOR_EMULATE_LINK_DELAY_S": "0.01"}


def test_bare_list_accepted() -> None:
    assert len(inventory_from_data([_node(), _node(host="h2")]).nodes) == 2


@pytest.mark.parametrize("nodes, message", [
    ([_node(), _node()], "duplicate host 'h1'"),
    ([_node(name="x"), _node(host="h2", name="x")], "duplicate node name 'x'"),
    ([_node(gpus=2)], "unknown key(s) ['gpus']"),
    ([{"host": "h1", "gpu_type": "A100-40", "zone": "z"}], "missing required key(s) ['gpus_per_node']"),
    ([_node(gpus_per_node=0)], "field 'gpus_per_node' must be >= 1, got 0"),
    ([_node(gpus_per_node=True)], "gpus_per_node"),
    ([_node(host="")], "field 'host'"),
    ([_node(emulate={"slowdown": 0.5})], "emulate.slowdown' must be >= 1.0, got 0.5"),
    ([_node(emulate={"link_delay_s": -1})], "emulate.link_delay_s' must be >= 0.0"),
    ([_node(emulate={"speed": 2})], "unknown key(s) ['speed']"),
    ([_node(emulate=3)], "field 'emulate' must be an object"),
    ([], "must list nodes"),
])
def test_bad_inventories_name_the_problem(nodes: list, message: str) -> None:
    with pytest.raises(InputError) as err:
        inventory_from_data({"nodes": nodes})
    assert message in str(err.value)


def test_loopback_hosts_may_repeat_with_distinct_names() -> None:
    inv = inventory_from_data([_node(host="localhost", name="n0"), _node(host="localhost", name="n1"),
                               _node(host="127.0.0.1", name="n2"), _node(host="127.0.0.1", name="n3")])
    assert [n.name for n in inv.nodes] == ["n0", "n1", "n2", "n3"]


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [ {host: h1, gpu_type: A, zone: z, gpus_per_node: 2, extra: 1} ]")
    with pytest.raises(InputError, match=r"bad.yaml: nodes\[0\] has unknown key"):
        load_inventory(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("nodes: [ {host: h1\n")
    with pytest.raises(InputError, match="broken.yaml: cannot parse YAML"):
        load_inventory(broken)
    with pytest.raises(InputError, match="missing.yaml: file not found"):
        load_inventory(tmp_path / "missing.yaml")
