"""benchmarks/closed_loop.py predicts from the constants measured with its up-front profile: the core-sharing
term (the plan's busy ranks, that file's table) scales compute of plans with more ranks than cores."""
import json
import sys

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
    plain = cl.contexts(model, files, GPU)
    assert plain.settings.compute_scale == 1.0
    assert plain.settings.constants_file == str(files["constants"])
    assert plain.settings.memory_overhead_bytes == 1e8 and plain.settings.hidden_dropout == 0.0
    for name, (d, world) in cl.fixed_plans(GPU).items():
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        ctx = cl.contexts(model, files, GPU, p)
        if name == "slow-type-4":
            # 1 + 3 emulated ranks that sleep half their compute: no more sharing than 4 full ranks would see
            from planner.plan import Plan
            from planner.simulator.core_sharing import core_sharing
            full = core_sharing(Plan.load(p), cl.contexts(model, files, GPU), 2, cl.PROFILED_RANKS,
                                ((0.5, 1.0), (1.0, 1.2), (1.5, 2.1)))
            assert 1.0 <= ctx.settings.compute_scale < full.compute_scale
            continue
        if world == 2 or name == "mixed-tp":
            # 2 ranks on 2 cores, as profiled: no sharing; mixed-tp: this profile's TP 2 is no faster than
            # TP 1, so its two ranks hold one core between them (core_sharing.core_demand)
            assert ctx.settings.compute_scale == 1.0
            continue
        # 3 ranks on 2 cores, busy at once part of the time: slower than profiled, at most the table's x2.1/1.2
        assert 1.0 < ctx.settings.compute_scale < 2.1 / 1.2
        assert cl.predict(p, ctx) > cl.predict(p, plain)
