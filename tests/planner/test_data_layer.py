"""Network clamping, model sizes, profile files, cluster parsing, and the Sailor importer on shared data."""
import glob
import json

import pytest

from planner.cluster import load_cluster, load_trace_csv, parse_gpus
from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.network import Link
from planner.profiles import ProfileStore, parse_profile_file, write_profile_file
from planner.sailor_data import load_sailor_data
from planner.sailor_plan import load_any_plan

SAILOR_FIT = (-0.0024414231124647644, 0.1408627339370467, 1.116822757126346)


def test_fitted_link_is_clamped_positive_and_monotone_in_its_valid_range():
    link = Link(2.42e9, 1e-6, SAILOR_FIT)
    sizes = [2 ** k for k in range(0, 40)]
    assert all(link.time_s(b) > 0 for b in sizes)          # total (the search's mirror relies on it)
    valid = [b for b in sizes if b >= 2 ** 18]               # this fit is valid from ~64-256 KB on
    times = [link.checked_time_s(b) for b in valid]
    assert all(a <= b for a, b in zip(times, times[1:]))
    raw_small = (SAILOR_FIT[0] * 100 + SAILOR_FIT[1] * -10 + SAILOR_FIT[2])  # u = -10: fit is negative
    assert raw_small < 0 and link.bandwidth_bytes_per_s(1e6 / 1024) > 0
    assert link.bandwidth_bytes_per_s(1e12) <= 2.42e9
    with pytest.raises(InputError, match="bandwidth -[0-9.]+ GB/s at a 977-byte message"):
        link.checked_time_s(1e6 / 1024)                      # the simulator refuses it instead of clamping


def test_model_params_match_hand_formula_and_sailor_counts():
    m = get_model("opt-350m")
    assert sum(m.layer_params()) == 12 * 1024 ** 2 + 13 * 1024
    assert sum(m.embedding_params(4)) == 15073280   # vocab padded to 128*TP, as Megatron does
    m.check_tp(4)
    with pytest.raises(InputError, match="TP degree 3 does not divide"):
        m.check_tp(3)


def test_profile_file_roundtrip_and_errors(tmp_path):
    tiny = get_model("tiny")
    store = ProfileStore(tiny, GPUCatalog())
    c = store.get("A100-40", 2, 1)
    f = tmp_path / "p.json"
    write_profile_file(f, "tiny", "A100-40", [c])
    back = parse_profile_file(f, tiny)[0]
    assert back.layer_fwd_s == c.layer_fwd_s and back.update_s_per_param == c.update_s_per_param
    data = json.loads(f.read_text())
    data["entries"][0]["mbs"] = 0
    f.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"p.json: entries\[0\]: field 'mbs' must be >= 1, got 0"):
        parse_profile_file(f, tiny)


def test_cluster_parsing(tmp_path):
    cat = GPUCatalog()
    cl = parse_gpus("A100-40@us-central1-a=8,V100-16@us-west1-b=4", cat)
    assert cl.total_gpus == 12 and cl.count("V100-16", "us-west1-b") == 4
    assert cl.gpus_per_node("A100-40") == 4
    with pytest.raises(InputError, match="unknown GPU type 'B200'"):
        parse_gpus("B200@z=8", cat)
    with pytest.raises(InputError, match="cannot parse 'A100-40@z'"):
        parse_gpus("A100-40@z", cat)
    y = tmp_path / "c.yaml"
    y.write_text("pools:\n  - {gpu_type: A100-40, zone: z-a, count: 8, gpus_per_node: 8}\n")
    assert load_cluster(y, cat).gpus_per_node("A100-40") == 8
    y.write_text("pools:\n  - {gpu_type: A100-40, zone: z-a, count: -1}\n")
    with pytest.raises(InputError, match=r"c.yaml: pools\[0\]: field 'count' must be >= 0, got -1"):
        load_cluster(y, cat)


def test_sailor_import_matches_llm_info(sailor_data_dir):
    sd = load_sailor_data(sailor_data_dir, "OPT-350")
    info = json.loads((sailor_data_dir / "sailor/Planner/llm_info.json").read_text())["OPT-350"]
    c = sd.profiles.get("GH-96", 8, 4)
    assert c.layer_params == info["4"]["1"]["params_floats"] == sum(sd.model.layer_params(4))
    assert c.embedding_params == sum(sd.model.embedding_params(4))
    assert c.layer_act_bytes == 8 * info["4"]["1"]["act_mem_bytes"]
    assert sd.global_batch_size == 1024 and sd.gpus_per_node["GH-96"] == 4
    assert sd.network.egress_usd_per_byte("us-central1-a", "us-west1-b") == pytest.approx(0.02e-9)
    assert ("A100-40", 1, 1) in [(g, m, t) for g in ["A100-40"] for m, t in sd.profiles.options(g)]


def test_sailor_plans_import(sailor_data_dir):
    paths = sorted(glob.glob(str(sailor_data_dir / "sailor/Planner/simulations/validation/clariden/OPT-350/*/*.json")))
    assert len(paths) == 15
    for p in paths:
        plan, info = load_any_plan(p)
        assert plan.num_layers == 24 and info.measured_iteration_s > 0
        assert plan.world_size == sum(r.tp for _, _, r in plan.replicas())


def test_sailor_trace_csv(sailor_data_dir):
    rows = load_trace_csv(sailor_data_dir / "sailor/Planner/simulations/configs/gpu_trace_heterogeneous_imbalanced.csv",
                          GPUCatalog())
    assert rows[0].count("A100-40", "us-central1-a") == 32 and rows[0].count("V100-16", "us-central1-a") == 96


def test_every_sailor_model_imports(sailor_data_dir):
    info = json.loads((sailor_data_dir / "sailor/Planner/llm_info.json").read_text())
    for name in ("OPT-350", "GPT-Neo-2.7", "OPT-30", "LLAMA-3-8"):
        sd = load_sailor_data(sailor_data_dir, name)
        assert sd.model.num_layers == len(info[name]["1"]) - 2
        assert sd.profiles.measured_gpu_types()
    opt30 = load_sailor_data(sailor_data_dir, "OPT-30").model
    assert sum(opt30.layer_params()) == info["OPT-30"]["1"]["1"]["params_floats"]


def test_builtin_opt_ties_but_sailors_opt_350_runs_did_not(sailor_data_dir):
    """OPT ties its embeddings (the built-in does); Sailor's llm_info.json gives OPT-350's LM-head layer a
    [padded vocab, hidden] matrix of its own, so the model of the 15 GH200 runs stays untied; GPT-Neo-2.7's
    head layer holds only the final norm (tied)."""
    assert get_model("opt-350m").tied_embeddings and get_model("gpt-neo-2.7b").tied_embeddings
    info = json.loads((sailor_data_dir / "sailor/Planner/llm_info.json").read_text())
    opt = load_sailor_data(sailor_data_dir, "OPT-350").model
    assert info["OPT-350"]["1"]["25"]["params_floats"] == opt.padded_vocab_for_tp(1) * 1024 + 2 * 1024
    assert not opt.tied_embeddings
    assert load_sailor_data(sailor_data_dir, "GPT-Neo-2.7").model.tied_embeddings
    assert info["GPT-Neo-2.7"]["1"]["33"]["params_floats"] == 2 * 2560


def test_sailor_import_without_head_parameters_is_one_input_error(sailor_data_dir, tmp_path):
    import shutil
    root = tmp_path / "sd"
    shutil.copytree(sailor_data_dir / "sailor" / "Planner" / "simulations" / "configs",
                    root / "sailor" / "Planner" / "simulations" / "configs")
    info = json.loads((sailor_data_dir / "sailor/Planner/llm_info.json").read_text())
    del info["OPT-350"]["1"]["25"]["params_floats"]
    (root / "sailor" / "Planner" / "llm_info.json").write_text(json.dumps({"OPT-350": info["OPT-350"]}))
    with pytest.raises(InputError, match="malformed Sailor data .KeyError.*params_floats"):
        load_sailor_data(root, "OPT-350")
