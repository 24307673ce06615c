"""``sailor-profile --rounds R``: the round-robin order and the median over rounds, with injected timings
(no torch, no clock), the flag's validation, and (slow) one real run writing the per-round side output."""
from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from megatron_sailor.profiler import rounds as rr

REPO = Path(__file__).resolve().parents[2]
BASE = {(1, 1): 10.0, (1, 2): 18.0, (2, 1): 6.0, (2, 2): 11.0}      # quiet layer time (ms) per (tp, mbs)


def _fake_measure(calls: list, slow_calls: set[int], factor: float = 1.6):
    """A measurement whose k-th call (in time order) runs ``factor`` x slower when k is in ``slow_calls``:
    a burst of load over a window of time, whatever configuration is being measured then."""
    def measure(r: int, tp: int, mbs: int) -> dict[str, float]:
        k = len(calls)
        calls.append((r, tp, mbs))
        scale = factor if k in slow_calls else 1.0
        return {"layer_fwd_s": BASE[(tp, mbs)] * scale, "layer_bwd_s": 2 * BASE[(tp, mbs)] * scale}
    return measure


def test_schedule_is_round_robin_tp_major() -> None:
    assert rr.schedule((1, 2), (1, 2), 2) == [(0, 1, 1), (0, 1, 2), (0, 2, 1), (0, 2, 2),
                                              (1, 1, 1), (1, 1, 2), (1, 2, 1), (1, 2, 2)]
    assert rr.schedule((1, 2), (4,), 1) == [(0, 1, 4), (0, 2, 4)]
    with pytest.raises(ValueError):
        rr.schedule((1,), (1,), 0)


def test_last_use_frees_probes_per_tp_with_one_round_and_at_the_end_with_more() -> None:
    assert rr.last_use(rr.schedule((1, 2), (1, 2), 1)) == {1: (0, 1, 2), 2: (0, 2, 2)}
    assert rr.last_use(rr.schedule((1, 2), (1, 2), 3)) == {1: (2, 1, 2), 2: (2, 2, 2)}


def test_a_burst_in_one_round_of_one_configuration_does_not_move_its_median() -> None:
    calls: list = []
    entries = rr.schedule((1, 2), (1, 2), 3)
    burst = entries.index((1, 2, 1))                       # round 1 of (tp 2, mbs 1): the run (d) case
    values = rr.collect_rounds(entries, _fake_measure(calls, {burst}))
    assert calls == entries                                # measured in the scheduled order, one call each
    assert values[(2, 1)]["layer_fwd_s"] == pytest.approx([6.0, 9.6, 6.0])
    med = rr.aggregate(values)
    assert med == {cfg: {"layer_fwd_s": BASE[cfg], "layer_bwd_s": 2 * BASE[cfg]} for cfg in BASE}
    found = rr.disagreements(values, ("layer_fwd_s", "layer_bwd_s"))
    assert sorted(found) == [((2, 1), "layer_bwd_s", pytest.approx(0.6)), ((2, 1), "layer_fwd_s", pytest.approx(0.6))]


def test_a_burst_as_long_as_a_round_hits_each_configuration_once() -> None:
    """A burst spanning four consecutive measurements (a whole round's worth) slows each configuration in at
    most one round (round-robin), so no median moves; measured in one block per configuration (one round
    of 3x the repeats, the old order), the same window would fall on a single configuration's repeats."""
    entries = rr.schedule((1, 2), (1, 2), 3)
    for start in range(len(entries) - 3):
        values = rr.collect_rounds(entries, _fake_measure([], set(range(start, start + 4))))
        assert {c: v["layer_fwd_s"] for c, v in rr.aggregate(values).items()} == BASE


def test_one_round_is_the_single_measurement() -> None:
    entries = rr.schedule((1, 2), (1, 2), 1)
    values = rr.collect_rounds(entries, _fake_measure([], {entries.index((0, 2, 1))}))
    assert rr.aggregate(values)[(2, 1)]["layer_fwd_s"] == pytest.approx(9.6)       # nothing to outvote it
    assert rr.disagreements(values, ("layer_fwd_s",)) == []


def test_two_bursts_out_of_three_rounds_do_move_the_median() -> None:
    """The claim is one burst per configuration: the median of 3 follows a majority of slow rounds."""
    entries = rr.schedule((1,), (1,), 3)
    values = rr.collect_rounds(entries, _fake_measure([], {0, 2}))
    assert rr.aggregate(values)[(1, 1)]["layer_fwd_s"] == pytest.approx(16.0)


def test_spread_and_document() -> None:
    assert rr.spread([1.0, 1.2, 1.1]) == pytest.approx(0.2 / 1.1)
    assert rr.spread([5.0]) == 0.0 and rr.spread([0.0, 0.0]) == 0.0
    values = {(1, 2): {"layer_fwd_s": [1.0, 2.0, 1.0]}}
    doc = json.loads(json.dumps(rr.rounds_document(values, 3, "median")))
    assert doc["rounds"] == 3 and doc["per_round_statistic"] == "median"
    assert doc["configurations"] == [{"tp": 1, "mbs": 2, "values": {"layer_fwd_s": [1.0, 2.0, 1.0]},
                                      "spread": {"layer_fwd_s": 1.0}}]


def test_disagreeing_rounds_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("torch")
    from megatron_sailor.profiler.probe import _warn_disagreements
    with caplog.at_level(logging.WARNING, logger="megatron_sailor.profiler.probe"):
        _warn_disagreements({(2, 1): {"layer_fwd_s": [0.0138, 0.0210, 0.0140], "layer_bwd_s": [0.025] * 3},
                             (1, 1): {"layer_fwd_s": [0.0138, 0.0150, 0.0140]}})
    assert len(caplog.records) == 1
    msg = caplog.records[0].getMessage()
    assert "tp 2 mbs 1" in msg and "layer_fwd_s" in msg and "13.80/21.00/14.00 ms" in msg


def test_profile_config_rejects_rounds_below_one() -> None:
    pytest.importorskip("torch")
    from megatron_sailor.profiler.probe import ProfileConfig
    from planner.errors import InputError
    from planner.model import get_model
    ProfileConfig((1,), (1,), rounds=3).check(get_model("tiny"), 1)
    with pytest.raises(InputError, match=r"--rounds must be >= 1, got 0"):
        ProfileConfig((1,), (1,), rounds=0).check(get_model("tiny"), 1)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_cli_rejects_bad_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                value: str) -> None:
    from megatron_sailor.profiler import cli as profile_cli
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(profile_cli, "_relaunch", lambda *a: pytest.fail("launched despite bad input"))
    assert profile_cli.main(["--model", "tiny", "--rounds", value, "-o", "p.json"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --rounds must be >= 1, got {value}\n"
    assert not (tmp_path / "p.json").exists()
    assert profile_cli.main(["--network-only", "--network-out", "n.json", "--rounds", value]) == 2
    assert capsys.readouterr().err == f"error: --rounds must be >= 1, got {value}\n"
    assert not (tmp_path / "n.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_profile_rounds_end_to_end(tmp_path: Path) -> None:
    """One rank, 3 rounds: the profile's times are the medians of the per-round values in the side output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    prof = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "megatron_sailor.profiler.cli", "--model", "tiny", "--mbs", "1", "2", "--tp", "1",
           "--nproc", "1", "--warmup", "0", "--repeats", "1", "--rounds", "3", "--gpu-type", "cpu-test",
           "-o", str(prof)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(prof.read_text())
    side = json.loads(Path(str(prof) + ".rounds.json").read_text())
    assert doc["settings"]["rounds"] == 3 and side["rounds"] == 3
    by_cfg = {(c["tp"], c["mbs"]): c["values"] for c in side["configurations"]}
    assert sorted(by_cfg) == [(1, 1), (1, 2)]
    for e in doc["entries"]:
        v = by_cfg[(e["tp"], e["mbs"])]
        assert all(len(xs) == 3 for xs in v.values())
        fwd_s, bwd_s = e["layers_s"][0]
        assert fwd_s == pytest.approx(statistics.median(v["layer_fwd_s"]), rel=1e-9)
        assert bwd_s == pytest.approx(statistics.median(v["layer_bwd_s"]), rel=1e-9)
        assert e["head_s"][0] == pytest.approx(statistics.median(v["head_fwd_s"]), rel=1e-9)
    assert "update_s_per_param" in by_cfg[(1, 1)] and "update_s_per_param" not in by_cfg[(1, 2)]
    upd = statistics.median(by_cfg[(1, 1)]["update_s_per_param"])
    assert all(e["update_s_per_param"] == pytest.approx(upd, rel=1e-9) for e in doc["entries"])


def test_closed_loop_prints_the_up_front_profile_rounds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import closed_loop as cl
    prof = tmp_path / "profile.json"
    prof.write_text("{}")
    values = {(2, 1): {"layer_fwd_s": [0.0138, 0.0210, 0.0140], "layer_bwd_s": [0.0246, 0.0289, 0.0250]}}
    side = Path(str(prof) + ".rounds.json")
    side.write_text(json.dumps(rr.rounds_document(values, 3, "median")))
    cl.print_profile_rounds(prof)
    out = capsys.readouterr().out
    assert "3 rounds" in out and "tp 2 mbs 1:  13.80/ 24.60   21.00/ 28.90   14.00/ 25.00" in out
    assert "spread 51%/17%" in out          # (21.00 - 13.80) / 14.00, (28.90 - 24.60) / 25.00
    os.utime(side, (1, 1))                               # a side file older than the profile: not this one's
    cl.print_profile_rounds(prof)
    assert capsys.readouterr().out == ""


def test_core_sharing_counts_are_measured_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    """--runtime-constants-out's core-sharing table: the process counts in turn, one repeat each per round.
    Another process busy during three consecutive multi-process runs (it slows only runs that oversubscribe
    the cores, not the one-process baselines in between) slows one repeat of each count, which the median
    outvotes; measured count after count, the same window would have covered every repeat of 3 processes
    (a loaded closed-loop run's table read x3.11 at 1.5 ranks per core, x2.06 at 2)."""
    from megatron_sailor.profiler import constants as pc
    calls: list[int] = []

    def fake_run(n: int, matmuls: int) -> list[float]:
        calls.append(n)
        multi = sum(1 for c in calls if c > 1)                      # this is the multi-th multi-process run
        slow = 2.0 if n > 1 and 4 <= multi <= 6 else 1.0
        return [max(1.0, n / 2) * slow] * n

    monkeypatch.setattr(pc, "_concurrent_run_s", fake_run)
    table = pc.measure_core_sharing(cores=2, repeats=3)
    assert calls[1:] == [x for n in [2, 3, 4] * 3 for x in (1, n)]     # round-robin, one process alone before each
    assert table == [(0.5, 1.0), (1.0, 1.0), (1.5, 1.5), (2.0, 2.0)]
