"""``sailor-profile --rounds R`` on the network profile: the median over rounds of each round's medians
(injected per-round series, no torch), the measurement order with the collectives replaced by recorders (one
round is the order the profiler always used; R rounds repeat it R times), and (slow) a real 2-rank gloo run
writing the network file and its per-round side output."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_sailor.profiler import netprofile as npf

REPO = Path(__file__).resolve().parents[2]
SIZES = [1024, 65536, 262144]
QUIET_P2P = {1: [2e-5, 6e-5, 2e-4], 2: [3e-5, 7e-5, 3e-4]}     # one-way seconds per size, per peer
QUIET_AR = [1e-4, 3e-4, 9e-4]


def _quiet_round(jitter: float) -> tuple[dict[int, list[float]], list[float]]:
    return ({p: [t * jitter for t in s] for p, s in QUIET_P2P.items()}, [t * jitter for t in QUIET_AR])


def test_a_burst_in_one_round_of_one_size_does_not_move_its_value() -> None:
    rounds = [_quiet_round(j) for j in (1.0, 1.02, 0.99)]
    rounds[1][0][1][2] *= 8.0          # round 1: peer 1, largest size, 8x slower
    rounds[2][1][0] *= 5.0             # round 2: all-reduce, smallest size, 5x slower
    p2p, ar = npf.aggregate_network_rounds([r[0] for r in rounds], [r[1] for r in rounds])
    assert p2p[1][2] == pytest.approx(QUIET_P2P[1][2] * 1.0)        # median of (1.0, 8 * 1.02, 0.99)
    assert ar[0] == pytest.approx(QUIET_AR[0] * 1.02)               # median of (1.0, 1.02, 5 * 0.99)
    for peer, series in QUIET_P2P.items():                          # every value is the median of its rounds
        for i in range(len(SIZES)):
            assert p2p[peer][i] == statistics.median(r[0][peer][i] for r in rounds)
    for i in range(len(SIZES)):
        assert ar[i] == statistics.median(r[1][i] for r in rounds)
    # the fit over the medians is the quiet fit: the burst does not bend latency or bandwidth
    quiet = npf.fit_latency_bandwidth(SIZES, QUIET_P2P[1])
    fit = npf.fit_latency_bandwidth(SIZES, p2p[1])
    assert fit.bw_bytes_per_s == pytest.approx(quiet.bw_bytes_per_s, rel=0.05)
    # whereas a single block hit by the same burst does bend it
    burst = npf.fit_latency_bandwidth(SIZES, rounds[1][0][1])
    assert burst.bw_bytes_per_s < 0.9 * quiet.bw_bytes_per_s


def test_one_round_is_the_single_measurement() -> None:
    p2p_round, ar_round = _quiet_round(1.3)
    p2p, ar = npf.aggregate_network_rounds([p2p_round], [ar_round])
    assert p2p == p2p_round and ar == ar_round


def test_rounds_must_agree_on_peers_and_sizes() -> None:
    with pytest.raises(ValueError):
        npf.aggregate_network_rounds([{1: [1.0, 2.0]}, {1: [1.0]}], [[1.0, 2.0], [1.0, 2.0]])
    with pytest.raises(ValueError):
        npf.aggregate_network_rounds([{1: [1.0]}, {2: [1.0]}], [[1.0], [1.0]])


class _Recorder:
    """Stands in for torch.distributed on rank ``rank`` of ``world`` and for the timed blocks: records the
    order of ping-pong blocks, all-reduce blocks and barriers; a block's repeats all read the number of calls
    so far, so every block (and every round) gets a different value."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world, self.calls, self.round = rank, world, [], 0

    def ping_pong(self, peer: int, nbytes: int, warmup: int, repeats: int, device: object) -> list[float]:
        self.calls.append(("p2p", peer, nbytes, warmup, repeats))
        return [float(len(self.calls))] * repeats if self.rank == 0 else []

    def allreduce(self, nbytes: int, warmup: int, repeats: int, device: object) -> list[float]:
        self.calls.append(("allreduce", nbytes, warmup, repeats))
        return [float(len(self.calls))] * repeats

    def sharded(self, nbytes: int, warmup: int, repeats: int, device: object) -> tuple[float, float]:
        self.calls.append(("sharded", nbytes, warmup, repeats))
        return 3.0, 1.0


def _profile_with_recorder(monkeypatch: pytest.MonkeyPatch, rank: int, world: int, rounds: int) -> tuple:
    import torch.distributed as dist
    rec = _Recorder(rank, world)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: rank)
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: rec.calls.append(("barrier",)))

    def gather(out: list, obj: object, *a: object, **k: object) -> None:
        rec.calls.append(("all_gather_object",))
        out[:] = ["host"] * world
    monkeypatch.setattr(dist, "all_gather_object", gather)
    monkeypatch.setattr(npf, "_ping_pong", rec.ping_pong)
    monkeypatch.setattr(npf, "_allreduce", rec.allreduce)
    monkeypatch.setattr(npf, "_sharded_vs_allreduce", rec.sharded)
    return npf.profile_network(SIZES, warmup=1, repeats=2, rounds=rounds), rec.calls


def _single_round_order(rank: int, world: int) -> list[tuple]:
    """The order the profiler has always used (one block per (peer, size), then one per all-reduce size)."""
    order: list[tuple] = []
    for peer in range(1, world):
        for n in SIZES:
            if rank in (0, peer):
                order.append(("p2p", peer, n, 1, 2))
            order.append(("barrier",))
    return order + [("allreduce", n, 1, 2) for n in SIZES]


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_round_robin_order_is_the_single_round_order_repeated(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    world = 3
    # after the rounds, every rank measures the distributed optimizer's collectives once, at the largest size
    sharded = [("sharded", max(SIZES), 1, 2)]
    _, one = _profile_with_recorder(monkeypatch, rank, world, rounds=1)
    assert one == [("all_gather_object",)] + _single_round_order(rank, world) + sharded
    net, three = _profile_with_recorder(monkeypatch, rank, world, rounds=3)
    assert three == [("all_gather_object",)] + _single_round_order(rank, world) * 3 + sharded
    if rank == 0:
        assert (net.sharded_s, net.sharded_allreduce_s) == (3.0, 1.0)
        assert npf.sharded_collective_scale(net.sharded_s, net.sharded_allreduce_s) == 3.0
    # collectives (barriers, all-reduces, the gather) in the same order on every rank: no deadlock
    if rank == 0:
        assert len(net.p2p_rounds) == 3 and len(net.allreduce_rounds) == 3
        p2p, ar = npf.aggregate_network_rounds(net.p2p_rounds, net.allreduce_rounds)
        assert net.p2p_s == p2p and net.allreduce_s == ar
        assert net.allreduce_rounds[0] != net.allreduce_rounds[1]      # each round measured anew


def test_sharded_collective_scale_is_never_below_one() -> None:
    assert npf.sharded_collective_scale(0.5, 1.0) == 1.0 and npf.sharded_collective_scale(2.5, 1.0) == 2.5
    assert npf.sharded_collective_scale(1.0, 0.0) == 1.0


def test_constants_document_carries_the_measured_scale_with_a_note() -> None:
    from megatron_sailor.profiler.constants import constants_document
    from planner.schema.base import validate
    from planner.schema.files import RuntimeConstantsFile
    doc = constants_document(10 ** 8, 1.0, [(0.5, 1.0), (1.0, 1.0)], 2, "sailor-profile ...", 3.91234)
    assert doc["sharded_collective_scale"] == 3.9123 and "sharded_collective_scale" in doc["notes"]
    assert validate(RuntimeConstantsFile, doc, source="x").sharded_collective_scale == 3.9123
    assert "sharded_collective_scale" not in constants_document(10 ** 8, 1.0, [(1.0, 1.0)], 2, "c")


def test_collective_order_is_identical_on_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    collectives = []
    for rank in range(3):
        _, calls = _profile_with_recorder(monkeypatch, rank, 3, rounds=2)
        collectives.append([c for c in calls if c[0] != "p2p"])
    assert collectives[0] == collectives[1] == collectives[2]


def test_rounds_below_one_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="rounds"):
        _profile_with_recorder(monkeypatch, 0, 2, rounds=0)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_rank_network_profile_in_three_rounds(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("WORLD_SIZE", None)
    net = tmp_path / "n.json"
    cmd = [sys.executable, "-m", "megatron_sailor.profiler.cli", "--network-only", "--nproc", "2", "--rounds", "3",
           "--network-out", str(net), "--sizes", *map(str, SIZES), "--warmup", "1", "--repeats", "2"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    raw = json.loads(Path(str(net) + ".measurements.json").read_text())
    assert raw["sizes"] == SIZES and raw["rounds"]["rounds"] == 3
    per_p2p, per_ar = raw["rounds"]["p2p_one_way_s"], raw["rounds"]["allreduce_s"]
    assert len(per_p2p) == 3 and len(per_ar) == 3
    assert all(len(r["1"]) == len(SIZES) and all(t > 0 for t in r["1"]) for r in per_p2p)
    for i in range(len(SIZES)):
        assert raw["p2p_one_way_s"]["1"][i] == statistics.median(r["1"][i] for r in per_p2p)
        assert raw["allreduce_s"][i] == statistics.median(r[i] for r in per_ar)
    sh = raw["sharded_collectives"]      # the distributed optimizer's calls, measured beside the all-reduce
    assert sh["bytes"] == max(SIZES) and sh["reduce_scatter_plus_all_gather_s"] > 0 and sh["all_reduce_s"] > 0
    link = json.loads(net.read_text())["class_links"]["inter_node"]
    assert link["bw_bytes_per_s"] > 0 and link["latency_s"] >= 0
    # the written link is the fit of the medians (single host: the link implied by the all-reduce fit)
    expect = npf.ring_allreduce_link(npf.fit_latency_bandwidth(SIZES, raw["allreduce_s"]), 2)
    assert link["bw_bytes_per_s"] == pytest.approx(expect.bw_bytes_per_s, rel=1e-9)
    assert link["latency_s"] == pytest.approx(expect.latency_s, rel=1e-9, abs=1e-15)
