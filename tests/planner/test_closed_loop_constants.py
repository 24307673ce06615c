"""benchmarks/closed_loop.py predicts from the constants measured with its up-front profile: the core-sharing
term from that file's table scales compute of plans with more ranks than cores."""
import json
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import closed_loop as cl  # noqa: E402

GPU = "cpu-test"


def _files(tmp_path, table):
    L = cl.MODEL["num_layers"]
    entries = [{"mbs": 1, "tp": tp, "embedding_s": [1e-3, 1e-3], "layers_s": [[0.01, 0.02]] * L,
                "head_s": [0.01, 0.01], "update_s_per_param": 1e-9} for tp in (1, 2)]
    files = {"profile": tmp_path / "profile.json", "network": tmp_path / "network.json",
             "catalog": tmp_path / "catalog.json", "constants": tmp_path / "runtime_constants.json"}
    files["profile"].write_text(json.dumps({"format": "megatron-sailor-profile/1", "gpu_type": GPU,
                                            "model": cl.MODEL["name"], "entries": entries}))
    files["network"].write_text(json.dumps({"format": "megatron-sailor-network/1", "class_links": {
        "inter_node": {"bw_bytes_per_s": 1e9}, "cross_zone": {"bw_bytes_per_s": 1e8}}}))
    files["catalog"].write_text(json.dumps({GPU: {"memory_bytes": 2 ** 33, "peak_flops": 1e11,
                                                  "mem_bw_bytes_per_s": 1e10, "usd_per_hour": 0.1, "peak_fp32_flops": 1e11,
                                                  "intra_node_bw_bytes_per_s": 1e9,
                                                  "gpus_per_node": 3}}))
    files["constants"].write_text(json.dumps({
        "format": "megatron-sailor-runtime-constants/1", "machine": "test", "measured_by": "test",
        "measured_at": "now", "per_microbatch_overhead_s": 0.0, "memory_overhead_bytes": 1e8,
        "activation_reserve_factor": 1.0, "core_share": {"cores": 2, "ranks_per_core_slowdown": table}}))
    model = tmp_path / "model.json"
    model.write_text(json.dumps(cl.MODEL))
    return model, files


def test_contexts_use_the_measured_core_sharing_table(tmp_path):
    model, files = _files(tmp_path, [[0.5, 1.0], [1.0, 1.2], [1.5, 2.1]])
    two = cl.contexts(model, files, GPU, 2)
    three = cl.contexts(model, files, GPU, 3)
    assert two.settings.compute_scale == 1.0
    assert three.settings.compute_scale == pytest.approx(2.1 / 1.2)
    assert three.settings.constants_file == str(files["constants"])
    assert three.settings.memory_overhead_bytes == 1e8 and three.settings.hidden_dropout == 0.0
    plans = {n: d for n, (d, w) in cl.fixed_plans(GPU).items() if w == 3}
    for name, d in plans.items():
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        t2 = cl.predict(p, cl.contexts(model, files, GPU, 2))
        t3 = cl.predict(p, three)
        assert t3 > t2           # the same plan predicted with 3 ranks sharing 2 cores is slower
