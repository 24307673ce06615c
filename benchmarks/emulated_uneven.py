"""Heterogeneity on a homogeneous machine: 1 fast + 3 emulated slow ranks; the planner's uneven plan vs the
even split, measured and predicted.

    python benchmarks/emulated_uneven.py [--out runs/emulated] [--slowdown 4] [--iters 6]

1. ``sailor-profile`` profiles the closed loop's model (micro-batch 1 and 2, TP 1) on this machine: type T.
   The emulated type ``T-slowS`` gets the same profile with forward/backward times x S (that is what the
   emulation does: it sleeps ``(S - 1) x`` each measured forward/backward) and a catalog entry with the
   FLOP/s divided by S.
2. ``sailor-plan`` plans for ``T@local=1, T-slowS@local=3`` (gbs 8). The comparator is the same plan with
   the layers split evenly over its stages and equal micro-batch counts per pipeline.
3. Both run through the launcher (``python -m launch``) with a node inventory of two "nodes" on this
   machine: ``fast`` (1 rank) and ``slow`` (3 ranks, ``emulate: {slowdown: S}``, i.e. an emulated GPU type);
   the runtime reads ``SAILOR_EMULATE_SLOWDOWN``. Median iteration time after warm-up from the metrics file.
4. Both are simulated (megatron-sailor preset). The summary line compares the measured and predicted gain.

4 ranks share 2 cores here. With S = 4 the slow ranks sleep 3/4 of their compute time, so the CPU demand
stays near 1 + 3/4 cores while the pipeline is full; the simulator does not model core sharing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import closed_loop as cl  # noqa: E402
from planner.ports import free_port  # noqa: E402
from planner.progress import status  # noqa: E402


def emulated_files(files: dict[str, Path], slowdown: float) -> tuple[str, str, dict]:
    """(fast type, slow type, files with both profiles and a catalog of 1 fast + 3 slow GPUs per node)."""
    fast = cl.gpu_type_of(files)
    slow = cl.slow_type_of(fast, slowdown)
    return fast, slow, cl.emulated_type_files(files, slowdown, {fast: 1, slow: 3})


def even_version(plan_path: Path, out: Path) -> Path:
    from planner.plan import Plan
    d = Plan.load(plan_path).to_dict()
    S, L = len(d["stages"]), d["num_layers"]
    first = 0
    for s, st in enumerate(d["stages"]):
        st["first_layer"], st["num_layers"] = first, L // S + (1 if s < L % S else 0)
        first += st["num_layers"]
    d["microbatches_per_pipeline"] = None
    path = out / "plan_even.json"
    path.write_text(json.dumps(d, indent=1))
    Plan.load(path)
    return path


def write_nodes(out: Path, fast: str, slow: str, slowdown: float) -> Path:
    path = out / "nodes.yaml"
    path.write_text(f"""nodes:
  - {{host: localhost, name: fast, gpu_type: {fast}, zone: {cl.ZONE}, gpus_per_node: 1}}
  - {{host: 127.0.0.1, name: slow, gpu_type: {slow}, zone: {cl.ZONE}, gpus_per_node: 3,
     emulate: {{slowdown: {slowdown}, link_delay_s: 0.0}}}}
""")
    return path


def model_args() -> list[str]:
    m = cl.MODEL
    return ["--num-layers", str(m["num_layers"]), "--hidden-size", str(m["hidden_size"]),
            "--num-attention-heads", str(m["num_heads"]), "--ffn-hidden-size", str(m["ffn_hidden_size"]),
            "--seq-length", str(m["seq_length"]), "--max-position-embeddings", str(m["max_position_embeddings"]),
            "--vocab-size", str(m["vocab_size"])]


def launch(plan: Path, nodes: Path, metrics: Path, iters: int) -> None:
    cmd = [sys.executable, "-m", "launch", str(plan), "--nodes-file", str(nodes), "--master-port",
           str(free_port()), "--torchrun", f"{sys.executable} -m torch.distributed.run", "--",
           *model_args(), "--train-iters", str(iters), "--mock-data", "--lr", "1e-3", "--metrics-file", str(metrics),
           "--log-interval", "1", "--distributed-timeout-s", "600"]
    if metrics.exists():
        metrics.unlink()
    subprocess.run(cmd, check=True, env=cl._env(), cwd=ROOT)


def measured(metrics: Path, warmup: int) -> dict:
    ts = sorted(json.loads(line)["iteration_time_s"] for line in metrics.read_text().splitlines()[warmup:])
    return {"median_s": statistics.median(ts), "p10_s": ts[int(0.1 * len(ts))],
            "p90_s": ts[min(len(ts) - 1, int(0.9 * len(ts)))]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "runs" / "emulated"))
    ap.add_argument("--reuse-profile", action="store_true", help="keep an existing profile in --out")
    ap.add_argument("--slowdown", type=float, default=4.0)
    ap.add_argument("--iters", type=int, default=6, help="timed iterations per plan (after 2 warm-up)")
    args = ap.parse_args()
    out = Path(args.out)
    pdir = out / "profile"
    pdir.mkdir(parents=True, exist_ok=True)
    model_path = pdir / "model.json"
    model_path.write_text(json.dumps(cl.MODEL))
    files = {"profile": pdir / "profile.json", "network": pdir / "network.json", "catalog": pdir / "catalog.json"}
    if not (args.reuse_profile and all(p.is_file() for p in files.values())):
        with status("profiling this machine (sailor-profile, 2 ranks)"):
            files = cl.run_profile(pdir, model_path, mbs=[1, 2], tp=[1])   # TP 1 only in this demo
    fast, slow, efiles = emulated_files(files, args.slowdown)
    slow_prof = efiles["slow_profile"]
    with status("planning (sailor-plan)"):
        planned = cl.run_planner(out, model_path, efiles, f"{fast}@{cl.ZONE}=1,{slow}@{cl.ZONE}=3", name="uneven")
    even = even_version(planned, out)
    nodes = write_nodes(out, fast, slow, args.slowdown)
    ctx = cl.sim_context(model_path, efiles, [slow_prof], gpus_per_node={fast: 1, slow: 3})
    rows = []
    for name, plan in (("planner", planned), ("even split", even)):
        metrics = out / f"metrics_{plan.stem}.jsonl"
        launch(plan, nodes, metrics, args.iters + 2)
        rows.append((name, cl.describe(plan), cl.predict(plan, ctx), measured(metrics, 2)))
    cl.print_table(rows)
    (out / "table.json").write_text(json.dumps([{"plan": n, "layout": d, "predicted_s": p, **m}
                                                for n, d, p, m in rows], indent=1))
    (_, _, p_plan, m_plan), (_, _, p_even, m_even) = rows
    gain_m = m_even["median_s"] / m_plan["median_s"]
    gain_p = p_even / p_plan
    print(f"cluster: 1 x {fast} + 3 x {slow} (emulated slowdown {args.slowdown:g}), gbs {cl.GBS}")
    print(f"uneven plan vs even split: measured {gain_m:.2f}x faster, predicted {gain_p:.2f}x faster")
    return 0 if gain_m > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
