"""benchmarks/closed_loop.py and emulated_uneven.py: their pure parts (plans, even split, emulated files,
error summary). The benchmarks themselves are run by hand (they time things)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import closed_loop as cl  # noqa: E402
import emulated_uneven as eu  # noqa: E402
from megatron_sailor.profiler.io import merge_catalog_entry, write_profile  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.profiles import LayerCosts  # noqa: E402


def test_fixed_plans_are_valid() -> None:
    p = Plan.from_dict(cl.plan_dict([(5, [("g", 1)]), (3, [("g", 1)])], 1))
    assert [s.num_layers for s in p.stages] == [5, 3] and p.world_size == 2 and p.global_batch_size == cl.GBS
    p = Plan.from_dict(cl.plan_dict([(8, [("g", 1), ("h", 1)])], 1, counts=[6, 2]))
    assert p.microbatch_counts == (6, 2)


def test_even_version_splits_layers_and_batches_evenly(tmp_path: Path) -> None:
    src = tmp_path / "plan.json"
    src.write_text(json.dumps(cl.plan_dict([(5, [("g", 1)]), (2, [("h", 1)]), (1, [("h", 1)])], 1)))
    even = Plan.load(eu.even_version(src, tmp_path))
    assert [s.num_layers for s in even.stages] == [3, 3, 2]
    src.write_text(json.dumps(cl.plan_dict([(8, [("g", 1), ("h", 1)])], 1, counts=[7, 1])))
    assert Plan.load(eu.even_version(src, tmp_path)).microbatch_counts == (4, 4)


def test_emulated_files_scale_the_profile(tmp_path: Path) -> None:
    costs = LayerCosts(gpu_type="cpu-x", mbs=1, tp=1, embedding_fwd_s=1e-4, embedding_bwd_s=1e-4,
                       layer_fwd_s=(1e-3,) * 8, layer_bwd_s=(2e-3,) * 8, head_fwd_s=1e-3, head_bwd_s=1e-3,
                       update_s_per_param=1e-9)
    files = {"profile": tmp_path / "p.json", "catalog": tmp_path / "c.json", "network": tmp_path / "n.json"}
    write_profile(files["profile"], cl.MODEL["name"], "cpu-x", [costs])
    merge_catalog_entry(files["catalog"], "cpu-x", {"memory_bytes": 2 ** 30, "peak_flops": 1e11,
                                                    "peak_fp32_flops": 1e11, "mem_bw_bytes_per_s": 1e10,
                                                    "usd_per_hour": 0.1, "gpus_per_node": 2})
    out = tmp_path / "emu"
    out.mkdir()
    fast, slow, efiles = eu.emulated_files(files, 4.0)
    assert (fast, slow) == ("cpu-x", "cpu-x-slow4")
    doc = json.loads(efiles["slow_profile"].read_text())
    assert doc["gpu_type"] == slow and doc["entries"][0]["layers_s"][0] == pytest.approx([4e-3, 8e-3])
    assert efiles["profiles"] == [files["profile"], efiles["slow_profile"]]
    cat = json.loads(efiles["catalog"].read_text())
    assert cat[fast]["gpus_per_node"] == 1 and cat[slow]["gpus_per_node"] == 3
    assert cat[slow]["peak_flops"] == pytest.approx(cat[fast]["peak_flops"] / 4)
    # the closed loop's node sizes go to another file: neither overwrites the other
    other = cl.emulated_type_files(files, 4.0, {fast: 3, slow: 3})["catalog"]
    assert other != efiles["catalog"] and json.loads(efiles["catalog"].read_text())[fast]["gpus_per_node"] == 1
    nodes = eu.write_nodes(out, fast, slow, 4.0).read_text()
    assert "emulate: {slowdown: 4.0" in nodes and "gpus_per_node: 3" in nodes


def test_slow_type_plans_put_later_stages_on_the_emulated_type() -> None:
    plans = cl.fixed_plans("g")
    slow = cl.slow_type_of("g")
    for name, stages, world in (("slow-type-2", 2, 2), ("slow-type-4", 4, 4)):
        d, w = plans[name]
        p = Plan.from_dict(d)
        assert w == world == p.world_size and p.num_stages == stages
        assert [s.replicas[0].gpu_type for s in p.stages] == ["g"] + [slow] * (stages - 1)
        assert sum(s.num_layers for s in p.stages) == cl.MODEL["num_layers"]


def test_worker_emulation_per_rank_gpu_type(monkeypatch: pytest.MonkeyPatch) -> None:
    job = {"emulation": {"a.json": cl.SLOW_LINK}, "slowdown_by_type": {"g-slow2": 2.0}}
    both = cl.rank_emulation(job, "a.json", "g-slow2")
    assert both.slowdown == 2.0 and both.cross_zone_gbps == cl.SLOW_LINK["cross_zone_gbps"]
    assert cl.rank_emulation(job, "a.json", "g").slowdown == 1.0
    assert cl.rank_emulation(job, "b.json", "g-slow2").slowdown == 2.0
    for var in ("SAILOR_EMULATE_SLOWDOWN", "SAILOR_EMULATE_LINK_DELAY_S"):
        monkeypatch.delenv(var, raising=False)
    assert cl.rank_emulation(job, "b.json", "g") is None        # nothing emulated here, nor in the environment
    monkeypatch.setenv("SAILOR_EMULATE_SLOWDOWN", "3")           # then the launcher's environment decides
    assert cl.rank_emulation(job, "b.json", "g").slowdown == 3.0
    assert cl.rank_emulation({"emulation": {}}, "b.json", "g") == cl.rank_emulation({}, "b.json", "g")


def test_print_table_summary(capsys: pytest.CaptureFixture) -> None:
    rows = [("a", "x", 1.1, {"median_s": 1.0, "p10_s": 0.9, "p90_s": 1.2}),
            ("b", "y", 1.6, {"median_s": 2.0, "p10_s": 1.9, "p90_s": 2.1})]
    mean, worst = cl.print_table(rows)
    assert mean == pytest.approx(15.0) and worst == pytest.approx(20.0)
    assert "+10.0%" in capsys.readouterr().out
