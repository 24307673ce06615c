"""Profiler pure parts: latency+bandwidth fit, output formats the planner reads, CUDA-path helpers (fakes),
device naming, CLI bad input. No timing assertions."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from megatron_sailor.profiler import netprofile as npf
from megatron_sailor.profiler import timing as pt
from megatron_sailor.profiler.io import (emulated_catalog_entry, emulated_costs, merge_catalog_entry,
                                        write_profile)
from planner.inputs import load_network_file
from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.network import NetworkModel
from planner.profiles import LayerCosts, ProfileStore, parse_profile_file


# ---- latency + bandwidth fit ---------------------------------------------------------------------------
def test_fit_recovers_exact_latency_and_bandwidth() -> None:
    sizes = [4 ** k for k in range(5, 12)]
    times = [20e-6 + n / 2e9 for n in sizes]
    fit = npf.fit_latency_bandwidth(sizes, times)
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-6)
    assert fit.bw_bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert fit.time_s(1e6) == pytest.approx(20e-6 + 1e6 / 2e9)


def test_fit_never_negative_latency() -> None:
    sizes = [1e3, 1e5, 1e7]
    times = [1e-7, 9e-5, 1e-2]       # a straight line would cross below zero at 0 bytes
    fit = npf.fit_latency_bandwidth(sizes, times)
    assert fit.latency_s == 0.0 and fit.bw_bytes_per_s > 0


def test_fit_flat_times_bounds_bandwidth_by_largest_message() -> None:
    fit = npf.fit_latency_bandwidth([1e3, 1e6], [1e-3, 1e-3])
    assert fit.latency_s == pytest.approx(1e-3) and fit.bw_bytes_per_s == pytest.approx(1e6 / 1e-3)


@pytest.mark.parametrize("sizes,times", [([1], [1.0]), ([1, 2], [1.0]), ([1, 2], [0.0, 1.0])])
def test_fit_rejects_bad_points(sizes: list, times: list) -> None:
    with pytest.raises(ValueError):
        npf.fit_latency_bandwidth(sizes, times)


def test_planner_intra_link_prefers_the_all_reduce_on_one_host() -> None:
    p2p, ar = npf.LinkFit(3e-5, 6e9), npf.LinkFit(3e-4, 1.5e9)
    assert npf.planner_intra_link(p2p, ar, ["h", "h"]) == npf.ring_allreduce_link(ar, 2)
    assert npf.planner_intra_link(p2p, ar, ["h", "h", "g"]) == p2p
    assert npf.planner_intra_link(p2p, None, ["h", "h"]) == p2p


def test_ring_allreduce_link_and_pairs() -> None:
    link = npf.ring_allreduce_link(npf.LinkFit(6e-5, 1e9), 4)
    assert link.latency_s == pytest.approx(1e-5) and link.bw_bytes_per_s == pytest.approx(1.5e9)
    assert npf.classify_pairs(["a", "a", "b"]) == {1: "intra", 2: "inter"}
    assert npf.median_by_size([[1.0, 4.0], [3.0, 2.0], [2.0, 3.0]]) == [2.0, 3.0]


@pytest.mark.parametrize("hosts", [["h", "h"], ["h", "h", "g"]])
def test_network_document_is_read_by_the_planner(tmp_path: Path, hosts: list[str]) -> None:
    intra, inter = npf.LinkFit(3e-5, 6e9), npf.LinkFit(1e-4, 1e9)
    doc = npf.network_document("net", intra, inter if len(set(hosts)) > 1 else None, hosts, npf.LinkFit(3e-4, 2e9))
    path = tmp_path / "net.json"
    path.write_text(json.dumps(doc))
    net = load_network_file(str(path), NetworkModel(GPUCatalog()))
    # single host: the loopback link implied by the all-reduce stands in for inter-node
    expected = inter if len(set(hosts)) > 1 else npf.ring_allreduce_link(npf.LinkFit(3e-4, 2e9), 2)
    assert net.class_links["inter_node"].bandwidth_bytes_per_s(1e6) == pytest.approx(expected.bw_bytes_per_s)
    assert ("single host" in doc["description"]) == (len(set(hosts)) == 1)


# ---- timers and meters (CUDA path with fakes) ---------------------------------------------------------
class FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None
        self.synced = False

    def record(self) -> None:
        FakeEvent.clock[0] += 0.25
        self.t = FakeEvent.clock[0]

    def synchronize(self) -> None:
        self.synced = True

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert end.synced, "read before the end event completed"
        return (end.t - self.t) * 1e3        # milliseconds, like torch.cuda.Event


class FakeCuda:
    Event = FakeEvent

    def __init__(self) -> None:
        self.allocated = [1000, 5096]
        self.synced = 0

    def is_available(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.synced += 1

    def reset_peak_memory_stats(self) -> None:
        pass

    def memory_allocated(self) -> int:
        return self.allocated.pop(0)

    def max_memory_allocated(self) -> int:
        return 9000


def test_cuda_event_timer_converts_ms_to_seconds() -> None:
    timer = pt.CudaEventTimer(FakeCuda())
    out, seconds = timer.time(lambda: "done")
    assert out == "done" and seconds == pytest.approx(0.25)
    assert pt.make_timer(argparse.Namespace(cuda=FakeCuda())).name == "cuda-events"


def test_wall_timer_and_repeats_use_median() -> None:
    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 3.5, 3.5, 7.5, 7.5, 8.0])
    timer = pt.WallTimer(clock=lambda: next(ticks))
    samples = pt.timed_repeats(lambda: None, timer, warmup=1, repeats=4)
    assert samples == [2.0, 0.5, 4.0, 0.5]
    assert pt.median_s(samples) == 1.25
    with pytest.raises(ValueError):
        pt.median_s([])


def test_allocator_meter_reports_growth_and_peak() -> None:
    cuda = FakeCuda()
    meter = pt.AllocatorMeter(cuda)
    meter.start()
    assert meter.stop() == 4096.0 and meter.peak == 9000 and cuda.synced == 2
    assert pt.activation_bytes_from_allocator(10, 5) == 0.0
    assert pt.activation_bytes_from_allocator(10, 110, output_bytes=40) == 60.0


def test_saved_activation_counter_counts_saved_activations_not_parameters() -> None:
    """The one saved-tensor counter (runtime.memory), which the profiler's probes read through StageStep."""
    torch = pytest.importorskip("torch")
    from megatron_sailor.runtime.memory import SavedActivationCounter
    lin = torch.nn.Linear(8, 8, bias=False)
    x = torch.randn(4, 8)
    counter, sink = SavedActivationCounter(lin), [0]
    with counter.counting(sink):
        y = torch.tanh(lin(x))                # saves x (for dW) and tanh's output (for its backward)
    assert sink[0] == 2 * 4 * 8 * 4
    y.sum().backward()


def test_device_names() -> None:
    assert pt.cpu_gpu_type("processor: 0\nmodel name\t: AMD EPYC 7B13 64-Core\n") == "cpu-amd-epyc-7b13-64-core"
    assert pt.cpu_gpu_type("") == "cpu-unknown"
    assert pt.cuda_gpu_type("NVIDIA A100-SXM4-40GB", 40 * pt.GIB) == "A100-40"
    assert pt.cuda_gpu_type("NVIDIA A100-SXM4-80GB", 80 * pt.GIB) == "A100-80"
    assert pt.cuda_gpu_type("NVIDIA H100 80GB HBM3", 80 * pt.GIB) == "H100-80"
    assert pt.cuda_gpu_type("NVIDIA GH200 480GB", 96 * pt.GIB) == "GH-96"
    assert pt.cuda_gpu_type("Tesla V100-SXM2-16GB", 16 * pt.GIB) == "V100-16"
    assert pt.cuda_gpu_type("NVIDIA L4", 24 * pt.GIB) == "nvidia-l4"


# ---- outputs the planner reads ---------------------------------------------------------------------------
def _costs(gpu: str = "cpu-x", mbs: int = 1, tp: int = 1, layers: int = 4) -> LayerCosts:
    return LayerCosts(gpu_type=gpu, mbs=mbs, tp=tp, embedding_fwd_s=1e-4, embedding_bwd_s=2e-4,
                      layer_fwd_s=(1e-3,) * layers, layer_bwd_s=(2e-3,) * layers, head_fwd_s=5e-4,
                      head_bwd_s=1e-3, update_s_per_param=5e-9, layer_act_bytes=1e5, embedding_act_bytes=1e3,
                      head_act_bytes=2e4)


def test_profile_file_round_trip_through_the_planner(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    write_profile(path, "tiny", "cpu-x", [_costs(mbs=1), _costs(mbs=2), _costs(tp=2)],
                  {"param_bytes": {"1": {"embedding": 1, "layer": 2, "head": 3}}, "timer": "wall-clock"})
    doc = json.loads(path.read_text())
    assert doc["format"] == "megatron-sailor-profile/1" and doc["gpu_type"] == "cpu-x"
    assert set(doc["entries"][0]) == {"mbs", "tp", "embedding_s", "layers_s", "head_s", "update_s_per_param",
                                      "layer_act_bytes", "embedding_act_bytes", "head_act_bytes"}
    store = ProfileStore(get_model("tiny"), GPUCatalog(), allow_estimates=False)
    store.load_file(path)
    assert store.options("cpu-x") == [(1, 1), (1, 2), (2, 1)]
    assert store.get("cpu-x", 2, 1).layer_bwd_s == (2e-3,) * 4
    with pytest.raises(ValueError):
        write_profile(path, "tiny", "cpu-x", [_costs()], {"entries": []})


def test_catalog_entry_created_then_merged(tmp_path: Path) -> None:
    path = tmp_path / "cat.json"
    merge_catalog_entry(path, "cpu-x", {"memory_bytes": 2 ** 30, "peak_flops": 1e11, "peak_fp32_flops": 1e11,
                                        "mem_bw_bytes_per_s": 4e10, "usd_per_hour": 0.1, "gpus_per_node": 2})
    merge_catalog_entry(path, "cpu-x", {"intra_node_bw_bytes_per_s": 6e9, "intra_node_latency_s": 3e-5})
    gpu = GPUCatalog.load(path).get("cpu-x")
    assert gpu.gpus_per_node == 2 and gpu.intra_node_bw_bytes_per_s == 6e9 and gpu.intra_node_latency_s == 3e-5
    slow = emulated_catalog_entry(json.loads(path.read_text())["cpu-x"], 4.0)
    assert slow["peak_fp32_flops"] == pytest.approx(2.5e10) and slow["gpus_per_node"] == 2


def test_emulated_costs_stretch_compute_not_the_optimizer() -> None:
    (slow,) = emulated_costs([_costs()], "cpu-x-slow3", 3.0)
    assert slow.gpu_type == "cpu-x-slow3" and slow.layer_fwd_s == (3e-3,) * 4
    assert slow.head_bwd_s == pytest.approx(3e-3) and slow.update_s_per_param == 5e-9


def test_parse_profile_rejects_foreign_entry_keys(tmp_path: Path) -> None:
    from planner.errors import InputError
    path = tmp_path / "p.json"
    write_profile(path, "tiny", "cpu-x", [_costs()])
    doc = json.loads(path.read_text())
    doc["entries"][0]["param_bytes"] = 1
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError):
        parse_profile_file(path)


# ---- CLI bad input: one error line, exit 2, nothing launched --------------------------------------------
@pytest.mark.parametrize("argv,needle", [
    (["--model", "nosuch", "-o", "p.json"], "unknown model 'nosuch'"),
    (["--model", "tiny", "--tp", "3", "-o", "p.json"], "TP degree 3"),
    (["--model", "tiny", "-o", "missing_dir/p.json"], "does not exist"),
    (["--model", "tiny"], "no output"),
    (["--network-only"], "--network-only needs --network-out"),
    (["--network-only", "--network-out", "n.json", "--nproc", "1"], "at least 2 ranks"),
    (["--model", "tiny", "--mbs", "0", "-o", "p.json"], "--mbs"),
    (["--num-layers", "2", "-o", "p.json"], "model dimensions missing"),
])
def test_cli_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                       argv: list[str], needle: str) -> None:
    from megatron_sailor.profiler import cli as profile_cli
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(profile_cli, "_relaunch", lambda *a: pytest.fail("launched despite bad input"))
    assert profile_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def test_cli_model_from_megatron_args() -> None:
    from megatron_sailor.profiler.cli import build_parser, model_from
    args = build_parser().parse_args(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                      "--seq-length", "32", "--vocab-size", "128", "--name", "m"])
    m = model_from(args)
    assert (m.name, m.ffn_hidden_size, m.max_position_embeddings) == ("m", 256, 32)
    args = build_parser().parse_args(["--model", "tiny", "--num-layers", "6"])
    assert model_from(args).num_layers == 6 and model_from(args).hidden_size == 64


def test_median_of_runs() -> None:
    from dataclasses import replace
    from megatron_sailor.profiler.io import median_of_runs
    runs = [[replace(_costs(), layer_fwd_s=(x,) * 4, head_fwd_s=x, update_s_per_param=x), _costs(mbs=2)]
            for x in (1.0, 5.0, 2.0)]
    merged = {c.mbs: c for c in median_of_runs(runs)}
    assert merged[1].layer_fwd_s == (2.0,) * 4 and merged[1].head_fwd_s == 2.0 and merged[1].update_s_per_param == 2.0
    assert merged[1].mbs == 1 and merged[1].tp == 1 and merged[2].layer_fwd_s == (1e-3,) * 4


def test_profile_config_checks() -> None:
    from megatron_sailor.profiler.probe import ProfileConfig
    from planner.errors import InputError
    tiny = get_model("tiny")
    ProfileConfig((1, 2), (1, 2), stat="min").check(tiny, 2)
    assert ProfileConfig((1,), (1,), stat="min").stat_fn([3.0, 1.0, 2.0]) == 1.0
    assert ProfileConfig((1,), (1,)).stat_fn([3.0, 1.0, 2.0]) == 2.0
    for bad, world in ((ProfileConfig((1,), (1,), stat="mean"), 1), (ProfileConfig((1,), (2,)), 1),
                       (ProfileConfig((1,), (1,), repeats=0), 1), (ProfileConfig((), (1,)), 1)):
        with pytest.raises(InputError):
            bad.check(tiny, world)


def test_zero_latency_fit_writes_a_catalog_the_planner_loads(tmp_path: Path) -> None:
    """A loopback all-reduce fit can have a zero intercept (CI saw 0.0 us); the catalog entry it implies is
    valid (any link's latency may be 0) and a negative latency is still refused."""
    from megatron_sailor.profiler.netprofile import fit_latency_bandwidth, planner_intra_link
    sizes = [1024.0, 65536.0, 262144.0]
    fit = fit_latency_bandwidth(sizes, [n / 1e8 for n in sizes])          # exactly proportional: intercept 0
    assert fit.latency_s == 0.0
    link = planner_intra_link(None, fit, ["vm", "vm"])
    assert link is not None and link.latency_s == 0.0
    path = tmp_path / "cat.json"
    merge_catalog_entry(path, "cpu-x", {"memory_bytes": 2 ** 30, "peak_flops": 1e11, "peak_fp32_flops": 1e11,
                                        "mem_bw_bytes_per_s": 4e10, "usd_per_hour": 0.1, "gpus_per_node": 2,
                                        "intra_node_bw_bytes_per_s": link.bw_bytes_per_s,
                                        "intra_node_latency_s": link.latency_s})
    assert GPUCatalog.load(path).get("cpu-x").intra_node_latency_s == 0.0
    with pytest.raises(InputError, match="intra_node_latency_s"):
        merge_catalog_entry(path, "cpu-x", {"intra_node_latency_s": -1e-6})


@pytest.mark.parametrize("text, says", [("{bad", "not valid JSON"), ("[1]", "must be a JSON object"),
                                        ('{"cpu-x": 3}', 'entry "cpu-x" must be an object'),
                                        (b"\xff\xfe{", "cannot read"), ("[" * 100_000, "nest")])
def test_bad_catalog_out_fails_before_any_measurement(text: str | bytes, says: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """An existing --catalog-out the profiler could not merge into is refused up front (one line, exit 2),
    not after minutes of measurement with the network file already written and a traceback from every rank."""
    from megatron_sailor.profiler.cli import main
    cat, net = tmp_path / "cat.json", tmp_path / "net.json"
    cat.write_bytes(text if isinstance(text, bytes) else text.encode())
    rc = main(["--network-only", "--network-out", str(net), "--catalog-out", str(cat), "--nproc", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and str(cat) in err[0] and says in err[0], err
    assert not net.exists() and cat.read_bytes() == (text if isinstance(text, bytes) else text.encode())
