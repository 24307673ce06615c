"""Simulator accuracy on the 15 real GH200 runs of OPT-350 from the Sailor artifact.

    python benchmarks/validate_simulator.py --sailor-data ../shared/data/sailor [--fit]

Each case runs through ``sailor-sim PLAN --sailor-data DIR --model OPT-350 --network
planner/data/network_clariden_gh200.json --json`` (a subprocess, exactly what a user runs; Sailor plans
select the ``sailor-deepspeed`` runtime preset). Prints measured vs predicted iteration time and peak memory
per case, then ``time MAPE X% | memory MAPE Y% | n=15``.

``--fit`` also runs the calibration procedure that produced the preset's four constants: a grid search of
(profile_offset_s, per_microbatch_overhead_s) minimising the mean absolute % time error, and of
(memory_overhead_bytes, activation_reserve_factor) for memory; it reports leave-one-out errors (each case
predicted with constants fitted on the other 14), which is the honest estimate for unseen runs.
"""
from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.inputs import load_network_file  # noqa: E402
from planner.network import NetworkModel  # noqa: E402
from planner.sailor_data import load_sailor_data  # noqa: E402
from planner.sailor_plan import load_any_plan  # noqa: E402
from planner.api import simulate  # noqa: E402
from planner.simulator import SAILOR_DEEPSPEED, SimContext  # noqa: E402
from planner.simulator.memory import replica_memory  # noqa: E402
from planner.simulator.stage import all_replica_costs  # noqa: E402

NETWORK = ROOT / "planner" / "data" / "network_clariden_gh200.json"
CASES = "sailor/Planner/simulations/validation/clariden/OPT-350/*/*.json"


def run_sim(path: str, data: str) -> dict:
    cmd = [sys.executable, "-m", "planner.cli_sim", path, "--sailor-data", data, "--model", "OPT-350",
           "--network", str(NETWORK), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise SystemExit(f"sailor-sim failed on {path}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def _loo(errors: np.ndarray) -> np.ndarray:
    """errors[grid, case] -> per-case error with the grid point chosen on the other cases."""
    out = []
    for k in range(errors.shape[1]):
        g = np.delete(errors, k, axis=1).mean(axis=1).argmin()
        out.append(errors[g, k])
    return np.array(out)


def fit(data: str, paths: list[str]) -> None:
    sd = load_sailor_data(data, "OPT-350")
    cases = [load_any_plan(p) for p in paths]
    net = load_network_file(str(NETWORK), NetworkModel(sd.profiles.catalog))   # not fitted: the file's line rate
    real_t = np.array([i.measured_iteration_s for _, i in cases])
    real_m = np.array([i.measured_peak_memory_bytes for _, i in cases])
    grid = list(itertools.product(np.arange(0, 4.01e-4, 0.5e-4), np.arange(0, 4.01e-3, 2.5e-4)))
    preds = []
    for off, per_mb in grid:
        st = SAILOR_DEEPSPEED.with_(profile_offset_s=off, per_microbatch_overhead_s=per_mb)
        ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog, st, sd.gpus_per_node)
        preds.append([simulate(p, ctx).iteration_time_s for p, _ in cases])
    err_t = np.abs(np.array(preds) - real_t) / real_t
    best = err_t.mean(axis=1).argmin()
    loo_t = _loo(err_t)
    # memory is affine in (overhead, reserve factor): base + c + f * activations of the peak GPU
    ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog,
                     SAILOR_DEEPSPEED.with_(memory_overhead_bytes=0, activation_reserve_factor=1.0), sd.gpus_per_node)
    base, act = [], []
    for plan, _ in cases:
        mems = [replica_memory(plan, ctx, c) for row in all_replica_costs(plan, ctx) for c in row]
        peak = max(mems, key=lambda m: m.total_bytes)
        base.append(peak.total_bytes - peak.activations_bytes)
        act.append(peak.activations_bytes)
    mgrid = list(itertools.product(np.arange(0, 8e9, 0.1e9), np.arange(0.5, 2.5, 0.02)))
    err_m = np.array([np.abs(np.array(base) + c + f * np.array(act) - real_m) / real_m for c, f in mgrid])
    mbest = err_m.mean(axis=1).argmin()
    loo_m = _loo(err_m)
    print(f"fit (all 15): profile_offset_s={grid[best][0]:.5f} per_microbatch_overhead_s={grid[best][1]:.5f} "
          f"-> time MAPE {100 * err_t[best].mean():.2f}% max {100 * err_t[best].max():.1f}%")
    print(f"fit (all 15): memory_overhead_bytes={mgrid[mbest][0]:.3g} activation_reserve_factor="
          f"{mgrid[mbest][1]:.2f} -> memory MAPE {100 * err_m[mbest].mean():.2f}% max {100 * err_m[mbest].max():.1f}%")
    print(f"leave-one-out: time MAPE {100 * loo_t.mean():.2f}% (max {100 * loo_t.max():.1f}%), "
          f"memory MAPE {100 * loo_m.mean():.2f}% (max {100 * loo_m.max():.1f}%)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", default=str(ROOT.parent / "shared" / "data" / "sailor"))
    ap.add_argument("--fit", action="store_true", help="also run the calibration procedure (leave-one-out)")
    args = ap.parse_args()
    paths = sorted(glob.glob(str(Path(args.sailor_data) / CASES)))
    if not paths:
        print(f"error: no validation runs under {args.sailor_data}", file=sys.stderr)
        return 2
    if args.fit:
        fit(args.sailor_data, paths)
    print(f"{'case':<22}{'S':>3}{'D':>4}{'mbs':>4}{'m':>4}{'real s':>9}{'pred s':>9}{'err':>8}"
          f"{'real GB':>9}{'pred GB':>9}{'err':>8}")
    t_err, m_err = [], []
    for path in paths:
        plan, info = load_any_plan(path)
        est = run_sim(path, args.sailor_data)
        rt, pt = info.measured_iteration_s, est["iteration_time_s"]
        rm, pm = info.measured_peak_memory_bytes, est["peak_memory_bytes"]
        t_err.append(abs(pt - rt) / rt)
        m_err.append(abs(pm - rm) / rm)
        print(f"{Path(path).stem.replace('plan_config_', ''):<22}{plan.num_stages:>3}{plan.dp_degree:>4}"
              f"{plan.micro_batch_size:>4}{plan.microbatch_counts[0]:>4}{rt:>9.3f}{pt:>9.3f}"
              f"{100 * (pt - rt) / rt:>+7.1f}%{rm / 1e9:>9.2f}{pm / 1e9:>9.2f}{100 * (pm - rm) / rm:>+7.1f}%")
    print(f"max error: time {100 * max(t_err):.1f}% | memory {100 * max(m_err):.1f}% | "
          f"median time {100 * statistics.median(t_err):.1f}%")
    print(f"time MAPE {100 * statistics.mean(t_err):.1f}% | memory MAPE {100 * statistics.mean(m_err):.1f}% "
          f"| n={len(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
