"""benchmarks/closed_loop.py end to end on a tiny model: the planner's plan and a 2-stage pipeline across the
emulated slow link run in the benchmark's own torchrun worker (re-profiling between rounds), and each gets a
measured time and an up-front prediction with the simulator's core-sharing term. No figure goal: the
figures live in the benchmark's output."""
import json
import math
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import closed_loop as cl  # noqa: E402

TINY = {"name": "tiny-closed-loop", "num_layers": 2, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256,
        "seq_length": 32, "vocab_size": 512, "max_position_embeddings": 32}
GPU = "cpu-test"


def _files(tmp_path):
    entries = [{"mbs": mbs, "tp": tp, "embedding_s": [1e-4, 1e-4], "layers_s": [[1e-3, 2e-3]] * 2,
                "head_s": [1e-3, 1e-3], "update_s_per_param": 1e-9} for mbs in (1, 2) for tp in (1, 2)]
    files = {"profile": tmp_path / "profile.json", "network": tmp_path / "network.json",
             "catalog": tmp_path / "catalog.json", "constants": tmp_path / "runtime_constants.json"}
    files["profile"].write_text(json.dumps({"format": "megatron-sailor-profile/1", "gpu_type": GPU,
                                            "model": TINY["name"], "entries": entries}))
    files["network"].write_text(json.dumps({"format": "megatron-sailor-network/1", "class_links": {
        "inter_node": {"bw_bytes_per_s": 1e9, "latency_s": 1e-4}}}))
    files["catalog"].write_text(json.dumps({GPU: {
        "memory_bytes": 2 ** 33, "peak_flops": 1e11, "mem_bw_bytes_per_s": 1e10, "usd_per_hour": 0.1,
        "peak_fp32_flops": 1e11, "intra_node_bw_bytes_per_s": 1e9, "gpus_per_node": 2}}))
    files["constants"].write_text(json.dumps({
        "format": "megatron-sailor-runtime-constants/1", "machine": "test", "measured_by": "test",
        "measured_at": "now", "per_microbatch_overhead_s": 0.0, "memory_overhead_bytes": 1e8,
        "activation_reserve_factor": 1.0,
        "core_share": {"cores": 2, "ranks_per_core_slowdown": [[0.5, 1.0], [1.0, 1.0], [1.5, 1.6]]}}))
    return files


@pytest.mark.slow
def test_worker_measures_and_simulator_predicts(tmp_path, monkeypatch):
    monkeypatch.setattr(cl, "MODEL", TINY)
    model_path = tmp_path / "model.json"
    model_path.write_text(json.dumps(TINY))
    files = _files(tmp_path)
    paths = {"planner": cl.run_planner(tmp_path, model_path, files, f"{GPU}@{cl.ZONE}=2"),
             "slow-link": tmp_path / "plan_slow-link.json"}
    paths["slow-link"].write_text(json.dumps(cl.plan_dict([(1, [(GPU, 1)]), (1, [(GPU, 1)])], 1,
                                                          zones=["local-a", "local-b"])))
    slow = cl.slow_type_of(GPU)
    paths["slow-type"] = tmp_path / "plan_slow-type.json"
    paths["slow-type"].write_text(json.dumps(cl.plan_dict([(1, [(GPU, 1)]), (1, [(slow, 1)])], 1)))
    files = cl.emulated_type_files(files, cl.SLOW_TYPE_SLOWDOWN, {GPU: 3, slow: 3})
    from planner.plan import Plan
    reprofile = {"mbs": sorted({Plan.load(p).micro_batch_size for p in paths.values()}), "tp": [1, 2],
                 "gpu_type": GPU, "out": str(tmp_path / "profile_rounds.json")}
    got = cl.run_plans(tmp_path, model_path, list(paths.values()), iters=2, warmup=1, nproc=2,
                       reprofile=reprofile, emulation={paths["slow-link"]: cl.SLOW_LINK},
                       slowdown_by_type={slow: cl.SLOW_TYPE_SLOWDOWN})
    assert [r["plan"] for r in got] == [str(p) for p in paths.values()]
    for r in got:
        assert len(r["times_s"]) == 2 and all(t > 0 and math.isfinite(t) for t in r["times_s"])
        assert r["p10_s"] <= r["median_s"] <= r["p90_s"]
    # the emulated slow link delays each of the 2 x 8 boundary crossings by at least its latency
    assert got[1]["median_s"] >= 16 * cl.SLOW_LINK["cross_zone_latency_s"]
    # the emulated slow type slows exactly the rank its stage puts on that type
    assert [r["rank_slowdown"] for r in got] == [[1.0, 1.0], [1.0, 1.0], [1.0, cl.SLOW_TYPE_SLOWDOWN]]
    cl.summarise_rounds(tmp_path / "profile_rounds.json", tmp_path / "profile_interleaved.json", "median")
    predicted = cl.predict_all(model_path, files, GPU, paths)
    assert set(predicted) == set(paths) and all(t > 0 and math.isfinite(t) for t in predicted.values())
    again = cl.predict_all(model_path, dict(files, profile=tmp_path / "profile_interleaved.json"), GPU, paths)
    assert all(t > 0 and math.isfinite(t) for t in again.values())
