"""Goodput of sailor-elastic on a real Sailor availability trace, replayed in compressed time on local CPU ranks.

    python benchmarks/goodput.py [--trace ../shared/data/sailor/sailor/Controller/trace_based/a100_trace.json]
                                 [--duration-s 480] [--steady-iters 8] [--work-dir runs/goodput] [--png FILE]

1. Steady state: every plan the replay can use (cpu-demo plans for each GPU count of the trace: 2, 3, 4
   ranks of the tiny GPT) trains ``--steady-iters`` iterations alone; its throughput is the global batch over
   the median iteration time (first two iterations dropped).
2. Replay: ``sailor-elastic --trace T --time-scale D/T_end --warm-standby --planner cpu-demo`` runs for
   ``D = --duration-s`` wall seconds (then SIGINT); the switch rule's horizon is scaled like the trace.
3. Goodput = useful samples / D. Elastic: samples of the highest iteration reached by the end of the window
   (an iteration redone after a failure counts once). Static: the plan on the trace's minimum availability
   for the whole window at its steady-state throughput. Oracle: at every moment the fastest steady-state plan
   that fits the availability, switches free. Static and oracle are charged the same initial start-up as the
   replay (controller start -> first iteration of its first job), so only reconfigurations differ.

Prints a table and one summary line; writes a PNG (availability, running plan, throughput over time).
Times are wall clock on this machine; its load average is sampled during the replay and printed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from reconfigure import run_folder  # noqa: E402
from planner.progress import progress_bar, progress_iter  # noqa: E402

DEFAULT_TRACE = REPO.parent / "shared" / "data" / "sailor" / "sailor" / "Controller" / "trace_based" / "a100_trace.json"
GBS = 8
ENV = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TORCH_COMPILE_DISABLE="1")


def read_events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def steady_throughput(work: Path, n: int, iters: int) -> float:
    """Samples/s of the n-rank demo plan trained alone (median iteration time, first two dropped)."""
    from launch.elastic.jobs import free_port
    from launch.elastic.plans import demo_plan_dict
    plan = work / f"steady_{n}.json"
    plan.write_text(json.dumps(demo_plan_dict(n, 4, GBS, "tiny")))
    ev = work / f"steady_{n}.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", "examples/gpt/pretrain_gpt.py", "--sailor-plan", str(plan),
           "--train-iters", str(iters), "--mock-data", "--lr", "1e-3", "--elastic-events", str(ev)]
    proc = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("error:")]
        raise RuntimeError(f"steady run on {n} ranks failed: {errors[-1] if errors else proc.stderr[-1500:]}")
    t = [e["t_unix_s"] for e in read_events(ev) if e["event"] == "step"]
    return GBS / statistics.median([b - a for a, b in zip(t[1:], t[2:])])


def replay(work: Path, trace: Path, duration_s: float, scale: float) -> tuple[float, list[float]]:
    """Run the controller for ``duration_s``; returns its start time and the sampled load averages."""
    cmd = [sys.executable, "-m", "launch.elastic.cli", "--trace", str(trace), "--time-scale", f"{scale:.6g}",
           "--planner", "cpu-demo", "--warm-standby", "--train-iters", "1000000", "--work-dir", str(work / "elastic"),
           "--horizon-s", f"{3600 * scale:.6g}", "--max-failures", "5", "--", "--mock-data", "--lr", "1e-3"]
    loads: list[float] = []
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=open(work / "controller.log", "w"),
                            stderr=subprocess.STDOUT)
    with progress_bar(f"replaying the trace for {duration_s:.0f} s (log: {work / 'controller.log'})",
                      duration_s) as update:
        while time.time() - start < duration_s and proc.poll() is None:
            loads.append(os.getloadavg()[0])
            time.sleep(min(2.0, max(0.0, duration_s - (time.time() - start))))
            update(time.time() - start)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
    return start, loads


def segments(points: list[tuple[float, int]], end_s: float) -> list[tuple[float, float, int]]:
    """(start, end, GPUs) of a step function on [0, end_s]."""
    out = []
    for i, (t, n) in enumerate(points):
        t_next = points[i + 1][0] if i + 1 < len(points) else end_s
        if t < end_s:
            out.append((t, min(t_next, end_s), n))
    return out


def samples_in(segs: list[tuple[float, float, int]], t0: float, rate: dict[int, float]) -> float:
    """Samples of the best plan fitting each segment's availability, counted from t0 on."""
    total = 0.0
    for a, b, n in segs:
        fit = [rate[k] for k in rate if k <= n]
        if fit and b > t0:
            total += max(fit) * (b - max(a, t0))
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--duration-s", type=float, default=480.0, help="wall seconds the whole trace is replayed in")
    p.add_argument("--steady-iters", type=int, default=8)
    p.add_argument("--work-dir", default=str(REPO / "runs" / "goodput"))
    p.add_argument("--png", default=None, help="figure path (default WORK/run_NNN/goodput.png)")
    args = p.parse_args()
    from launch.elastic.sources import load_json_trace
    points = [(t, sum(av.values())) for t, av in load_json_trace(args.trace, "cpu@local")]
    work = run_folder(Path(args.work_dir), resume=False)
    end = points[-1][0] + (points[-1][0] - points[-2][0] if len(points) > 1 else 1.0)
    scale = args.duration_s / end
    counts = sorted({n for _, n in points if n > 0})
    print(f"trace {args.trace}: {len(points)} points, {end:.0f} s, GPUs {counts}; replayed in {args.duration_s:.0f} s "
          f"(time scale {scale:.4g}); work folder {work}")
    rate = {n: steady_throughput(work, n, args.steady_iters)
            for n in progress_iter(counts, "steady-state runs (one per GPU count)")}
    print("steady state: " + ", ".join(f"{n} ranks {r:.1f} samples/s" for n, r in rate.items()))
    start, loads = replay(work, Path(args.trace), args.duration_s, scale)
    steps = []
    for ev_path in sorted((work / "elastic").glob("events_*.jsonl")):
        k = int(ev_path.stem.split("_")[1])
        ranks = json.loads((work / "elastic" / f"plan_{k}.json").read_text())
        n = sum(r["tp"] for s in ranks["stages"] for r in s["replicas"])
        steps += [(e["t_unix_s"] - start, e["iteration"], n) for e in read_events(ev_path) if e["event"] == "step"]
    steps.sort()
    inside = [s for s in steps if s[0] <= args.duration_s]
    if not inside:
        print("no iteration finished inside the window: see", work / "controller.log")
        return 1
    elastic = (max(it for _, it, _ in inside) + 1) * GBS
    startup = inside[0][0]
    segs = segments([(t * scale, n) for t, n in points], args.duration_s)
    static = rate[min(counts)] * (args.duration_s - startup)
    oracle = samples_in(segs, startup, rate)
    rows = [("elastic (sailor-elastic, measured)", elastic), (f"static ({min(counts)} ranks, estimated)", static),
            ("oracle (estimated)", oracle)]
    print(f"\n{'plan':<36} {'samples':>9} {'goodput samples/s':>18} {'vs oracle':>10}")
    for name, s in rows:
        print(f"{name:<36} {s:>9.0f} {s / args.duration_s:>18.2f} {s / oracle:>10.2f}")
    reconfigs = json.loads((work / "elastic" / "report.json").read_text())["reconfigurations"] \
        if (work / "elastic" / "report.json").is_file() else []
    print(f"(first iteration after {startup:.1f} s; {len(reconfigs)} relaunches; 1-min load average "
          f"{min(loads):.1f}-{max(loads):.1f}, median {statistics.median(loads):.1f}, on {os.cpu_count()} cores)")
    png = Path(args.png) if args.png else work / "goodput.png"
    plot(png, segs, steps, args.duration_s, rate)
    print(f"goodput over the {args.duration_s:.0f} s replay: elastic {elastic / args.duration_s:.2f}, static "
          f"{static / args.duration_s:.2f}, oracle {oracle / args.duration_s:.2f} samples/s "
          f"(elastic = {elastic / oracle:.0%} of oracle, {elastic / max(static, 1e-9):.2f}x static); figure {png}")
    return 0


def plot(png: Path, segs: list, steps: list, duration_s: float, rate: dict[int, float]) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no figure (pip install matplotlib)")
        return
    fig, ax = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    for a, b, n in segs:
        ax[0].plot([a, b], [n, n], color="k")
    ax[0].set_ylabel("available GPUs")
    ax[1].step([t for t, _, _ in steps], [n for _, _, n in steps], where="post", color="tab:blue")
    ax[1].set_ylabel("ranks of the running plan")
    ts = [t for t, _, _ in steps]
    thr = [GBS / (b - a) if b > a else 0.0 for a, b in zip(ts, ts[1:])]
    ax[2].plot(ts[1:], thr, ".", ms=3, color="tab:green", label="elastic, per iteration")
    best = [max(rate[k] for k in rate if k <= n) if any(k <= n for k in rate) else 0 for _, _, n in segs]
    for (a, b, _), r in zip(segs, best):
        ax[2].plot([a, b], [r, r], color="tab:red", lw=1)
    ax[2].plot([], [], color="tab:red", label="oracle (steady state)")
    ax[2].set_ylabel("samples / s")
    ax[2].set_xlabel("wall seconds (compressed trace)")
    ax[2].legend(loc="upper right")
    ax[2].set_xlim(0, duration_s)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
