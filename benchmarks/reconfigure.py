"""Reconfiguration time of sailor-elastic on this machine: tiny GPT on CPU ranks, availability 4 -> 2 -> 4 ...

    python benchmarks/reconfigure.py [--mode warm|torchrun|both] [--cycles 2] [--iters-per-phase 6]
                                     [--work-dir runs/reconfigure] [--resume]

Each run uses a fresh folder ``WORK/run_NNN`` (the next free number), so a second run never resumes the
first one's final checkpoint; ``--resume`` reuses the newest ``run_NNN`` instead (it then finishes at once
if that run had reached its last iteration).

Runs ``sailor-elastic --planner cpu-demo`` on an iteration-unit trace (4 ranks, then 2, then 4, ...; the job
pauses at each change point, so the change time is exact), once per mode: ``torchrun`` (a fresh torchrun
and interpreters per job) and ``warm`` (``--warm-standby``: ranks forked from an interpreter that has
imported torch and megatron-core). Per reconfiguration it prints the steps of the controller's report (wall
clock, launch/elastic/timings.py): plan, checkpoint (save in the old job), stop (stop request -> old job
exited), start (new job launched -> process group ready), model build, wait for the old job (new job ready
-> old job's checkpoint committed), load, first iteration (load -> end of the first new iteration), total
(change observed -> end of the first new iteration), downtime. The 1-min load average is sampled every 2 s
during each run. Ends with one summary line: the median total per direction and mode.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from planner.progress import status  # noqa: E402

STEPS = ("plan_s", "checkpoint_s", "stop_s", "start_s", "model_build_s", "wait_for_old_job_s", "load_s",
         "first_iteration_s", "total_s", "downtime_s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=2, help="4 -> 2 -> 4 cycles (2 reconfigurations each)")
    p.add_argument("--iters-per-phase", type=int, default=6)
    p.add_argument("--mode", choices=("warm", "torchrun", "both"), default="both",
                   help="warm: sailor-elastic --warm-standby (forked ranks); torchrun: a fresh torchrun per job")
    p.add_argument("--work-dir", default=str(REPO / "runs" / "reconfigure"),
                   help="parent folder; each run gets a fresh run_NNN below it")
    p.add_argument("--resume", action="store_true", help="reuse the newest run_NNN (resume its checkpoints)")
    p.add_argument("--save-bench", action="store_true",
                   help="instead: synchronous vs --async-save on a 100M-parameter GPT (2 ranks, 1.2 GB checkpoints)")
    args = p.parse_args()
    if args.save_bench:
        return save_bench(Path(args.work_dir))
    work = run_folder(Path(args.work_dir), args.resume)
    print(f"work folder {work}{' (resumed)' if args.resume else ''}")
    modes = ("torchrun", "warm") if args.mode == "both" else (args.mode,)
    summary = []
    for mode in modes:
        rows, info = run_mode(work, mode, args.cycles, args.iters_per_phase)
        if rows is None:
            return 1
        print(f"\n{mode}: " + info)
        print(f"{'change':>8} " + " ".join(f"{s[:-2]:>12}" for s in STEPS))
        for r in rows:
            print(f"{r['gpus'][0]:>3} -> {r['gpus'][1]:<2} " + " ".join(f"{r.get(s, float('nan')):>12.2f}" for s in STEPS))
        for a, b in ((4, 2), (2, 4)):
            totals = [r["total_s"] for r in rows if r["gpus"] == [a, b] and "total_s" in r]
            if totals:
                summary.append(f"{mode} {a}->{b} median {statistics.median(totals):.2f} s (n={len(totals)})")
    if not summary:
        print("no reconfiguration measured (a resumed finished run ends at once)")
        return 0
    print("\nreconfiguration change -> first new iteration: " + "; ".join(summary))
    return 0


def run_mode(work: Path, mode: str, cycles: int, iters: int) -> tuple[list[dict] | None, str]:
    """One sailor-elastic replay of 4 -> 2 -> 4 ... ranks; its availability reconfigurations and a note."""
    sub = work / mode
    sub.mkdir(exist_ok=True)
    n_phases = 2 * cycles + 1
    trace = [{"Time": k * iters, "GPUs": 4 if k % 2 == 0 else 2} for k in range(n_phases)]
    (sub / "trace.json").write_text(json.dumps(trace))
    cmd = [sys.executable, "-m", "launch.elastic.cli", "--trace", str(sub / "trace.json"),
           "--time-unit", "iter", "--planner", "cpu-demo", "--train-iters", str(n_phases * iters),
           "--work-dir", str(sub / "elastic"), *(["--warm-standby"] if mode == "warm" else []),
           "--", "--mock-data", "--lr", "1e-3", "--save-interval", "5"]
    loads: list[float] = []
    done = threading.Event()

    def sample_load() -> None:
        while not done.wait(2.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    start = time.time()
    with status(f"{mode}: sailor-elastic replay of {n_phases} phases ({n_phases * iters} iterations)"):
        proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                              text=True)
    wall = time.time() - start
    done.set()
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
        return None, ""
    report = json.loads((sub / "elastic" / "report.json").read_text())
    rows = [r for r in report["reconfigurations"] if r["reason"] == "availability"]
    loads = loads or [os.getloadavg()[0]]
    info = (f"wall {wall:.1f} s for {report['iterations_done']} iterations; 1-min load average "
            f"{min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}) on {os.cpu_count()} cores")
    return rows, info


def run_folder(parent: Path, resume: bool) -> Path:
    """``parent/run_NNN``: the next free number, or the newest existing one with ``resume``."""
    parent.mkdir(parents=True, exist_ok=True)
    runs = sorted(p for p in parent.glob("run_[0-9][0-9][0-9]") if p.is_dir())
    if resume and runs:
        return runs[-1]
    nxt = int(runs[-1].name[4:]) + 1 if runs else 1
    work = parent / f"run_{nxt:03d}"
    work.mkdir()
    return work


def save_bench(work: Path) -> int:
    """Blocking time of periodic saves and wall time, synchronous vs asynchronous."""
    sys.path.insert(0, str(REPO))
    from launch.elastic.plans import demo_plan_dict
    work.mkdir(parents=True, exist_ok=True)
    plan = work / "big2.json"
    plan.write_text(json.dumps(demo_plan_dict(2, 8, 8, "tiny")))
    model = ["--num-layers", "8", "--hidden-size", "1024", "--num-attention-heads", "16", "--ffn-hidden-size", "4096"]
    print(f"{'mode':<6} {'blocked per periodic save s':>28} {'save + next iteration s':>25} {'wall s':>8}")
    for mode in ("sync", "async"):
        ev = work / f"events_{mode}.jsonl"
        ev.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29641",
               "examples/gpt/pretrain_gpt.py", "--sailor-plan", str(plan), *model, "--train-iters", "7",
               "--mock-data", "--lr", "1e-3", "--save", str(work / f"ckpt_{mode}"), "--save-interval", "2", "--keep-last", "1",
               "--elastic-events", str(ev), *(["--async-save"] if mode == "async" else [])]
        start = time.time()
        with status(f"{mode}: 7 iterations of a 100M-parameter GPT on 2 ranks, saving every 2"):
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
                                           TORCH_COMPILE_DISABLE="1"))
        wall = time.time() - start
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            return 1
        events = [json.loads(line) for line in ev.read_text().splitlines()]
        saves = [e for e in events if e["event"] == "saved" and e["iteration"] < 7]
        steps = {e["iteration"]: e for e in events if e["event"] == "step"}
        after = [steps[s["iteration"]]["t_unix_s"] - steps[s["iteration"] - 1]["t_unix_s"] for s in saves
                 if s["iteration"] in steps]
        print(f"{mode:<6} {statistics.mean(e['blocking_s'] for e in saves):>28.2f} "
              f"{statistics.mean(after):>25.2f} {wall:>8.1f}")
    print("save + next iteration = end of the iteration before a periodic save -> end of the one after it "
          "(the async writer thread shares the rank's CPU core with training on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
