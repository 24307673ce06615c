"""Reconfiguration time of sailor-elastic on this machine: tiny GPT on CPU ranks, availability 4 -> 2 -> 4 ...

    python benchmarks/reconfigure.py [--cycles 1] [--iters-per-phase 10] [--work-dir runs/reconfigure] [--resume]

Each run uses a fresh folder ``WORK/run_NNN`` (the next free number), so a second run never resumes the
first one's final checkpoint; ``--resume`` reuses the newest ``run_NNN`` instead (it then finishes at once
if that run had reached its last iteration).

Runs ``sailor-elastic --planner cpu-demo`` on an iteration-unit trace (4 ranks, then 2, then 4, ...; the job
pauses at each change point, so the change time is exact) and prints, per reconfiguration, the steps the
controller's report measures (wall clock): plan, checkpoint (save in the old job), stop (stop request ->
old job's torchrun exited), start (new torchrun launched -> process group ready: interpreter + imports +
rendezvous), model build, load (verify + read + reshard), first iteration (load -> end of the first new
iteration), total (change observed -> end of the first new iteration). Ends with one summary line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("plan_s", "checkpoint_s", "stop_s", "start_s", "model_build_s", "load_s", "first_iteration_s", "total_s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=1, help="4 -> 2 -> 4 cycles (2 reconfigurations each)")
    p.add_argument("--iters-per-phase", type=int, default=10)
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
    n_phases = 2 * args.cycles + 1
    trace = [{"Time": k * args.iters_per_phase, "GPUs": 4 if k % 2 == 0 else 2} for k in range(n_phases)]
    (work / "trace.json").write_text(json.dumps(trace))
    cmd = [sys.executable, "-m", "launch.elastic.cli", "--trace", str(work / "trace.json"),
           "--time-unit", "iter", "--planner", "cpu-demo", "--train-iters", str(n_phases * args.iters_per_phase),
           "--work-dir", str(work / "elastic"), "--", "--mock-data", "--lr", "1e-3", "--save-interval", "5"]
    start = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-2000:], sep="\n")
        return 1
    report = json.loads((work / "elastic" / "report.json").read_text())
    rows = [r for r in report["reconfigurations"] if r["reason"] == "availability"]
    print(f"{'change':>8} " + " ".join(f"{s[:-2]:>15}" for s in STEPS))
    for r in rows:
        print(f"{r['gpus'][0]:>3} -> {r['gpus'][1]:<2} " + " ".join(f"{r.get(s, float('nan')):>15.2f}" for s in STEPS))
    load = os.getloadavg()[0]
    totals = [r["total_s"] for r in rows if "total_s" in r]
    starts = [r["start_s"] for r in rows if "start_s" in r]
    if not totals:
        print(f"no reconfiguration measured ({report['iterations_done']} iterations done; a resumed finished "
              f"run ends at once)")
        return 0
    print(f"(wall {wall:.1f} s for {report['iterations_done']} iterations; 1-min load average {load:.1f} on "
          f"{os.cpu_count()} cores)")
    print(f"reconfiguration change -> first new iteration: median {statistics.median(totals):.2f} s, max "
          f"{max(totals):.2f} s over {len(totals)} reconfigurations; process start-up median "
          f"{statistics.median(starts):.2f} s")
    return 0


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
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TORCH_COMPILE_DISABLE="1"))
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
