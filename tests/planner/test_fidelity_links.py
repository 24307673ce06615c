"""Links as Sailor's files define them: a plan's modelled p2p time is bytes over the fitted bandwidth at that
size (within 1%) for every link class; node size per replica; bad network input is refused by name."""
import json
import math

import pytest

from planner.errors import InputError
from planner.network import Endpoint, Link, NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.sailor_data import load_sailor_data
from planner.sailor_plan import load_any_plan, plan_from_sailor
from planner.simulator import OURS, SAILOR_DEEPSPEED, SimContext, simulate

HET = "sailor/providers/multizone_bandwidths_het.json"
INTRA = "sailor/providers/intra_node_bandwidths.json"


@pytest.fixture(scope="module")
def sd(sailor_data_dir):
    return load_sailor_data(sailor_data_dir, "OPT-350")


@pytest.fixture(scope="module")
def raw(sailor_data_dir):
    return json.loads((sailor_data_dir / HET).read_text())


def fitted_bw(entry, nbytes):
    """Sailor's definition, written out independently: GB/s = a u^2 + b u + c, u = log2(bytes / 1e6),
    at most the stored peak (B/s); held at the vertex of a concave fit."""
    (a, b, c), peak = entry
    u = math.log2(nbytes / 1e6)
    if a < 0:
        u = min(u, -b / (2 * a))
    return min(peak, (a * u * u + b * u + c) * 1e9)


def two_stage(a, b, tp_a, tp_b, mbs=1):
    stages = (Stage(0, 12, (Replica(a[0], tp_a, a[1]),)), Stage(12, 12, (Replica(b[0], tp_b, b[1]),)))
    return Plan(num_layers=24, stages=stages, micro_batch_size=mbs, global_batch_size=8 * mbs)


CASES = [  # (class, (gpu, zone, node size) of stage 0, of stage 1, tp0, tp1)
    ("inter-node same type", ("A100-40", "us-central1-a", 4), ("A100-40", "us-central1-a", 4), 4, 4),
    ("inter-node same type, small nodes", ("A100-40", "us-central1-a", 1), ("A100-40", "us-central1-a", 2), 1, 2),
    ("inter-node across types", ("A100-40", "us-central1-a", 4), ("V100-16", "us-central1-a", 4), 2, 2),
    ("inter-node across consumer types", ("RTX-3090", "us-central1-a", 8), ("RTX-2080", "us-central1-a", 8), 8, 8),
    ("cross-zone", ("A100-40", "us-central1-a", 4), ("A100-40", "us-central1-b", 4), 4, 4),
    ("cross-region", ("A100-40", "us-central1-a", 4), ("V100-16", "us-west1-b", 4), 1, 1),
]


@pytest.mark.parametrize("settings", [SAILOR_DEEPSPEED, OURS], ids=["deepspeed", "ours"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_p2p_is_bytes_over_fitted_bandwidth(sd, raw, case, settings):
    _, (ga, za, na), (gb, zb, nb), tp_a, tp_b = case
    plan = two_stage((ga, za), (gb, zb), tp_a, tp_b)
    ctx = SimContext(sd.model, sd.profiles, sd.network, sd.profiles.catalog, settings,
                     replica_node_gpus=((na,), (nb,)))
    nbytes = sd.model.boundary_activation_bytes(1, 4)
    fwd_entry = raw[za][ga][str(na)][zb][gb][str(nb)]
    bwd_entry = raw[zb][gb][str(nb)][za][ga][str(na)] if str(na) in raw[zb][gb][str(nb)].get(za, {}).get(ga, {}) \
        else fwd_entry
    # DeepSpeed partitions the activation over the TP ranks: one activation crosses the node link;
    # ours sends the whole activation from TP rank 0 to each receiving TP rank: tp messages share it.
    k_fwd, k_bwd = (tp_b, tp_a) if settings.p2p_all_tp_ranks else (1, 1)
    expect = 0.5 * (k_fwd * nbytes / fitted_bw(fwd_entry, nbytes) + k_bwd * nbytes / fitted_bw(bwd_entry, nbytes))
    got = simulate(plan, ctx).stages[0].p2p_s
    assert got == pytest.approx(expect, rel=0.01)


def test_consumer_example_of_the_issue(sd, raw):
    """The issue's 8 MB activation between TP-8 RTX nodes: ~0.11 GB/s, not 7 MB/s."""
    plan = two_stage(("RTX-3090", "us-central1-a"), ("RTX-2080", "us-central1-a"), 8, 8)
    ctx = SimContext(sd.model, sd.profiles, sd.network, sd.profiles.catalog, SAILOR_DEEPSPEED,
                     replica_node_gpus=((8,), (8,)))
    nbytes = sd.model.boundary_activation_bytes(1, 4)
    p2p = simulate(plan, ctx).stages[0].p2p_s
    assert 0.10e9 < nbytes / p2p < 0.12e9


def test_intra_node_link_by_node_size(sd, sailor_data_dir):
    intra = json.loads((sailor_data_dir / INTRA).read_text())
    nbytes = 8e6
    for gpu, by_n in intra.items():
        for n, entry in by_n.items():
            link = sd.network.link(Endpoint(gpu, "us-central1-a", int(n)), Endpoint(gpu, "us-central1-a", int(n)),
                                   same_node=True)
            assert link.checked_time_s(nbytes) == pytest.approx(nbytes / fitted_bw(entry, nbytes), rel=0.01)


def test_class_link_is_bytes_over_bandwidth(sd):
    net = NetworkModel(sd.profiles.catalog).with_class_links({"inter_node": Link(3e9, 0.0),
                                                              "cross_zone": Link(1e9, 0.0)})
    nbytes = sd.model.boundary_activation_bytes(1, 4)
    for zb, bw in (("us-central1-a", 3e9), ("us-central1-b", 1e9)):
        plan = two_stage(("A100-40", "us-central1-a"), ("A100-40", zb), 2, 2)
        ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog, SAILOR_DEEPSPEED)
        assert simulate(plan, ctx).stages[0].p2p_s == pytest.approx(nbytes / bw, rel=0.01)


def test_tp_ranks_share_a_node_link_but_not_a_per_gpu_link(sd):
    a, b = Endpoint("A100-40", "us-central1-a", 4), Endpoint("A100-40", "us-central1-a", 4)
    one, four = sd.network.link(a, b), sd.network.link(a, b, concurrent=4)
    assert one.shared and four.checked_time_s(8e6) == pytest.approx(4 * one.checked_time_s(8e6), rel=1e-9)
    cls = NetworkModel(sd.profiles.catalog)
    assert cls.link(a, b, concurrent=4).time_s(8e6) == cls.link(a, b).time_s(8e6)


# ---- node size per replica -------------------------------------------------------------------------------

def test_every_sailor_plan_config_imports_and_simulates(sd, sailor_data_dir):
    paths = sorted(sailor_data_dir.glob("**/plan_config*.json"))
    assert len(paths) >= 15
    for path in paths:
        plan, info = load_any_plan(path)
        assert len(info.replica_node_gpus) == plan.num_stages
        ctx = SimContext(sd.model, sd.profiles, sd.network, sd.profiles.catalog, SAILOR_DEEPSPEED,
                         dict(info.gpus_per_node), info.replica_node_gpus)
        assert simulate(plan, ctx).iteration_time_s > 0


def sailor_plan(reps_per_stage, split=((0, 13), (13, 26))):
    return {"pipeline_list": [{"num_stages": len(reps_per_stage),
                               "layers_per_stage": [list(range(*r)) for r in split],
                               "tmp_per_stage": [[[[[g, n, z]], tp] for g, n, z, tp in reps]
                                                 for reps in reps_per_stage],
                               "dp": [len(r) for r in reps_per_stage]}], "mbs": 1, "gbs": 8}


@pytest.mark.parametrize("reps", [
    [[("A100-40", 1, "us-central1-a", 1)], [("A100-40", 2, "us-central1-a", 2)]],
    [[("A100-40", 1, "us-central1-a", 1), ("A100-40", 4, "us-central1-a", 4)],
     [("A100-40", 2, "us-central1-a", 2), ("A100-40", 2, "us-central1-b", 2)]],
    [[("RTX-3090", 4, "us-central1-a", 4)], [("RTX-2080", 4, "us-central1-a", 2)]],
], ids=["A100-1-then-2", "mixed-sizes-two-zones", "rtx-tp4-then-tp2"])
def test_mixed_node_sizes_per_type_import_and_simulate(sd, raw, tmp_path, reps):
    path = tmp_path / "plan_config_mixed.json"
    path.write_text(json.dumps(sailor_plan(reps)))
    plan, info = load_any_plan(path)
    assert info.replica_node_gpus == tuple(tuple(r[1] for r in st) for st in reps)
    ctx = SimContext(sd.model, sd.profiles, sd.network, sd.profiles.catalog, SAILOR_DEEPSPEED,
                     dict(info.gpus_per_node), info.replica_node_gpus)
    est = simulate(plan, ctx)
    (ga, na, za, _), (gb, nb, zb, _) = reps[0][0], reps[1][0]
    nbytes = sd.model.boundary_activation_bytes(1, 4)
    fwd = raw[za][ga][str(na)][zb][gb][str(nb)]
    # the slowest pipeline's transfer is reported; pipeline 0's is at most that
    assert est.stages[0].p2p_s >= nbytes / fitted_bw(fwd, nbytes) * 0.5


def test_runtime_plan_loader_accepts_mixed_node_sizes(tmp_path):
    from megatron_sailor.train import arguments  # the runtime's loader is planner.sailor_plan.load_any_plan
    path = tmp_path / "plan_config.json"
    path.write_text(json.dumps(sailor_plan([[("A100-40", 1, "us-central1-a", 1)],
                                            [("A100-40", 2, "us-central1-a", 2)]])))
    plan, _ = arguments.load_any_plan(path)
    assert [r.tp for _, _, r in plan.replicas()] == [1, 2]


def test_node_smaller_than_tp_is_refused():
    with pytest.raises(InputError, match=r"tmp_per_stage\[0\]\[0\] gpus_per_node must be an integer >= its TP 2"):
        plan_from_sailor(sailor_plan([[("A100-40", 1, "z-a", 2)], [("A100-40", 2, "z-a", 2)]]))


# ---- bad network input -----------------------------------------------------------------------------------

def test_missing_entry_names_zone_type_and_node_size(sd):
    net = NetworkModel(sd.profiles.catalog, pair_links={k: v for k, v in sd.network.pair_links.items()
                                                        if not (k[1] == "V100-16" and k[2] == 2 or
                                                                k[4] == "V100-16" and k[5] == 2)}, name="cut")
    plan = two_stage(("A100-40", "us-central1-a"), ("V100-16", "us-central1-b"), 2, 2)
    ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog, SAILOR_DEEPSPEED,
                     replica_node_gpus=((2,), (2,)))
    with pytest.raises(InputError, match=r"network 'cut' has no link between \(zone us-central1-a, A100-40, 2 "
                                         r"GPUs/node\) and \(zone us-central1-b, V100-16, 2 GPUs/node\)"):
        simulate(plan, ctx)


def test_fit_negative_in_the_used_range_is_refused(sd):
    bad = Link(2e9, 0.0, (0.0, -1.0, 1.0), shared=True, label="z-a/A100-40/4 -> z-a/A100-40/4")  # < 0 at 8 MB
    net = NetworkModel(sd.profiles.catalog, pair_links={("z-a", "A100-40", 4, "z-a", "A100-40", 4): bad})
    plan = two_stage(("A100-40", "z-a"), ("A100-40", "z-a"), 4, 4)
    ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog, SAILOR_DEEPSPEED)
    with pytest.raises(InputError, match=r"network fit z-a/A100-40/4 -> z-a/A100-40/4: bandwidth -?[0-9.]+ GB/s at a "
                                         r"8388608-byte message"):
        simulate(plan, ctx)


@pytest.mark.parametrize("entry", [[[float("nan"), 0.1, 1.0], 2e9], [[0.0, 0.1, 1.0], float("inf")],
                                   [[0.0, 0.1], 2e9], "fast"])
def test_non_finite_or_malformed_fit_is_refused(entry, tmp_path):
    from planner.sailor_data import _pair_links
    data = {"z-a": {"A100-40": {"4": {"z-a": {"A100-40": {"4": entry}}}}}}
    with pytest.raises(InputError, match=r"z-a\.A100-40\.4\.z-a\.A100-40\.4 must"):
        _pair_links(data, str(tmp_path / "net.json"))


def test_cli_names_the_missing_pair_in_one_line(sailor_data_dir, tmp_path, capsys):
    """A Sailor folder whose network file lacks the pair the plan needs: one error line, exit 2."""
    from planner.cli_sim import main
    from planner.errors import run_cli
    root = tmp_path / "sailor-copy"
    (root / "sailor" / "providers").mkdir(parents=True)
    (root / "sailor" / "Planner").symlink_to(sailor_data_dir / "sailor" / "Planner")
    het = json.loads((sailor_data_dir / HET).read_text())
    del het["us-central1-a"]["RTX-3090"]["8"]["us-central1-a"]["RTX-2080"]
    del het["us-central1-a"]["RTX-2080"]["8"]["us-central1-a"]["RTX-3090"]
    (root / HET).write_text(json.dumps(het))
    plan = tmp_path / "plan_config.json"
    plan.write_text(json.dumps(sailor_plan([[("RTX-3090", 8, "us-central1-a", 8)],
                                            [("RTX-2080", 8, "us-central1-a", 8)]])))
    rc = run_cli(main, [str(plan), "--sailor-data", str(root), "--model", "OPT-350"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0] == (f"error: {root / HET}: network 'sailor' has no link between (zone us-central1-a, RTX-3090, "
                      f"8 GPUs/node) and (zone us-central1-a, RTX-2080, 8 GPUs/node)")


# ---- what the stored numbers mean (docs/SIMULATOR.md, "Network fits") -----------------------------------

def test_node_size_keys_are_node_sizes_not_concurrency(raw):
    """A100 nodes of 1, 2, 4 GPUs: peaks 2.4 / 3.7 / 6.0 GB/s (under GCP's 24 / 32 / 50 Gbit/s VM caps); a
    4-GPU node sending to a 1-GPU node gets the 1-GPU figure."""
    peak = {n: raw["us-central1-a"]["A100-40"][n]["us-central1-a"]["A100-40"][n][1] for n in ("1", "2", "4")}
    assert [round(peak[n] / 1e9, 1) for n in ("1", "2", "4")] == [2.4, 3.7, 6.0]
    assert all(peak[n] * 8 < cap for n, cap in (("1", 24e9), ("2", 32e9), ("4", 50e9)))
    assert raw["us-central1-a"]["A100-40"]["4"]["us-central1-a"]["A100-40"]["1"][1] == peak["1"]


def test_peak_is_a_measured_maximum_not_the_fit_maximum(sd):
    links = list(sd.network.pair_links.values())
    sizes = [2.0 ** (i / 4) for i in range(int(4 * math.log2(128e3)), int(4 * math.log2(4e9)) + 1)]
    best = [max(l.fit_value_gb_per_s(x) * 1e9 for x in sizes) / l.max_bw_bytes_per_s for l in links]
    never = sum(b < 1 for b in best) / len(best)
    assert 0.4 < never < 0.6 and 1.2 < max(best) < 1.3


def test_every_fit_is_valid_from_640_kb(sd):
    from planner.network import _valid_from
    links = list(sd.network.pair_links.values()) + list(sd.network.intra_links.values())
    starts = [2.0 ** (_valid_from(l.fit_gb_per_s, l.max_bw_bytes_per_s, None) / 4) for l in links]
    assert max(starts) <= 640e3 and min(starts) >= 1
    for l in links:
        times = [l.checked_time_s(x) for x in (640e3, 1e6, 8e6, 64e6, 512e6, 4e9)]
        assert all(t1 <= t2 for t1, t2 in zip(times, times[1:]))
