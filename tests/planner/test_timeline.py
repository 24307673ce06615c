"""Event timeline: schedule invariants, agreement with the closed form on uniform plans, CLI outputs."""
import json
import random

import pytest

from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import ProfileStore
from planner.simulator import OURS, SAILOR_DEEPSPEED, SimContext, simulate
from planner.simulator.events import one_f_one_b_order, simulate_events
from tests.planner.test_simulator import ctx_with, plan

EPS = 1e-9


def check_invariants(tl, pl):
    by_dev = {}
    for e in tl.events:
        assert e.end_s >= e.start_s
        by_dev.setdefault(e.device, []).append(e)
    for evs in by_dev.values():   # no two events overlap on one device or link
        evs.sort(key=lambda e: e.start_s)
        for a, b in zip(evs, evs[1:]):
            assert b.start_s >= a.end_s - EPS, (a, b)
    comp = {(e.kind, e.stage, e.replica, e.microbatch): e for e in tl.events if e.kind in ("fwd", "bwd")}
    S = pl.num_stages
    for (kind, s, j, mb), e in comp.items():
        if kind == "bwd":
            assert e.start_s >= comp[("fwd", s, j, mb)].end_s - EPS       # forward before backward
            if s < S - 1:
                assert e.start_s >= comp[("bwd", s + 1, j, mb)].end_s - EPS
        elif s > 0:
            assert e.start_s >= comp[("fwd", s - 1, j, mb)].end_s - EPS
    assert max(e.end_s for e in tl.events) == pytest.approx(tl.makespan_s)
    for j, m in enumerate(pl.microbatch_counts):
        for s in range(S):
            assert sum(1 for k in comp if k[1] == s and k[2] == j) == 2 * m


def test_1f1b_order_has_every_op_once():
    for S, s, m in [(4, 0, 8), (4, 3, 8), (4, 1, 2), (1, 0, 3)]:
        order = one_f_one_b_order(S, s, m)
        assert sorted(order) == sorted([("fwd", i) for i in range(m)] + [("bwd", i) for i in range(m)])


@pytest.mark.parametrize("settings", [OURS, SAILOR_DEEPSPEED.with_(profile_offset_s=0.0)])
@pytest.mark.parametrize("split, d, gbs, bw", [((2, 2), 1, 4, 1e9), ((1, 1, 1, 1), 2, 16, 1e6), ((4,), 2, 8, 1e5),
                                                ((1, 1, 1, 1), 1, 2, 1e9), ((2, 2), 1, 1, 1e6)])
def test_uniform_plans_match_closed_form(settings, split, d, gbs, bw):
    c = ctx_with(settings, bw=bw)
    pl = plan(split=split, d=d, gbs=gbs)
    tl = simulate_events(pl, c)
    check_invariants(tl, pl)
    assert tl.makespan_s == pytest.approx(simulate(pl, c).iteration_time_s, rel=0.01)


def test_random_heterogeneous_plans_keep_invariants():
    m, cat, rng = get_model("opt-350m"), GPUCatalog(), random.Random(1)
    for _ in range(25):
        S, D = rng.randint(1, 5), rng.randint(1, 3)
        bounds = [0] + sorted(rng.sample(range(1, 24), S - 1)) + [24]
        stages = tuple(Stage(bounds[s], bounds[s + 1] - bounds[s], tuple(
            Replica(rng.choice(["A100-40", "V100-16"]), rng.choice([1, 2]), rng.choice(["us-a-1", "us-b-1"]))
            for _ in range(D))) for s in range(S))
        counts = tuple(rng.randint(1, 9) for _ in range(D))
        pl = Plan(num_layers=24, stages=stages, micro_batch_size=1, global_batch_size=sum(counts),
                  microbatches_per_pipeline=counts)
        ctx = SimContext(m, ProfileStore(m, cat), NetworkModel(cat), cat, rng.choice([OURS, SAILOR_DEEPSPEED]))
        check_invariants(simulate_events(pl, ctx), pl)


def test_cli_writes_timeline_json_and_png(tmp_path):
    from tests.planner.test_cli_sim import GOOD, sim, write
    out = sim(write(tmp_path, GOOD), "--timeline", tmp_path / "t.png", "--timeline-json", tmp_path / "t.json")
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["makespan_s"] > 0 and data["events"] and "closed_form_iteration_s" in data
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_without_matplotlib_the_cli_says_how_to_install(tmp_path):
    import os
    import subprocess
    import sys
    from tests.planner.test_cli_sim import GOOD, ROOT, write
    code = ("import sys; sys.modules['matplotlib'] = None; from planner.cli_sim import entry; "
            f"sys.argv = ['sailor-sim', {str(write(tmp_path, GOOD))!r}, '--timeline', {str(tmp_path / 't.png')!r}]; "
            "sys.exit(entry())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 2 and 'pip install -e ".[plot]"' in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "t.png").exists()


# ---- agreement figures that docs/SIMULATOR.md cites (measured; the tolerances are the doc's) --------------
import os  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAILOR_DIR = Path(os.environ.get("SAILOR_DATA", ROOT.parent / "shared" / "data" / "sailor"))


@pytest.mark.parametrize("runtime", ["sailor-deepspeed", "megatron-sailor"])
def test_gh200_validation_plans_agree_within_0_7_percent(runtime):
    import glob
    from planner import api
    from planner.sailor_plan import load_any_plan
    paths = sorted(glob.glob(str(SAILOR_DIR / "sailor/Planner/simulations/validation/clariden/OPT-350/*/*.json")))
    assert len(paths) == 15, f"expected the 15 GH200 validation runs under {SAILOR_DIR}"
    network = str(ROOT / "planner" / "data" / "network_clariden_gh200.json")
    worst = 0.0
    for path in paths:
        pl, info = load_any_plan(path)
        source = api.DataSource(model="OPT-350", sailor_data=str(SAILOR_DIR), network=network)
        bundle = api.load_data(source, pl.precision)
        ctx = api.make_context(bundle, runtime, gpus_per_node=info.gpus_per_node)
        closed = api.simulate(pl, ctx).iteration_time_s
        worst = max(worst, abs(simulate_events(pl, ctx).makespan_s - closed) / closed)
    assert worst <= 0.007


def test_random_heterogeneous_plans_agree_with_closed_form_in_the_median():
    """300 random plans (1-6 stages, 1-3 pipelines with their own micro-batch counts 1-12, A100-40 / V100-16 /
    GH-96 with TP 1-2 over three zones in two regions, Sailor's OPT-350 profiles, the built-in class-link network
    (Sailor's fitted pairs do not link GH-96 with the other types), either runtime preset)."""
    import statistics
    from planner import api
    bundle = api.load_data(api.DataSource(model="OPT-350", sailor_data=str(SAILOR_DIR)))
    rng = random.Random(0)
    zones = ["us-central1-a", "us-central1-b", "us-west1-b"]
    signed = []
    for _ in range(300):
        S, D = rng.randint(1, 6), rng.randint(1, 3)
        bounds = [0] + sorted(rng.sample(range(1, 24), S - 1)) + [24]
        stages = tuple(Stage(bounds[s], bounds[s + 1] - bounds[s], tuple(
            Replica(rng.choice(["A100-40", "V100-16", "GH-96"]), rng.choice([1, 2]), rng.choice(zones))
            for _ in range(D))) for s in range(S))
        counts = tuple(rng.randint(1, 12) for _ in range(D))
        pl = Plan(num_layers=24, stages=stages, micro_batch_size=1, global_batch_size=sum(counts),
                  microbatches_per_pipeline=counts)
        ctx = SimContext(bundle.model, bundle.profiles, NetworkModel(bundle.catalog), bundle.catalog,
                         rng.choice([OURS, SAILOR_DEEPSPEED]), dict(bundle.gpus_per_node))
        closed = simulate(pl, ctx).iteration_time_s
        signed.append((simulate_events(pl, ctx).makespan_s - closed) / closed)
    diffs = [abs(d) for d in signed]
    assert statistics.median(diffs) <= 0.01
    assert sum(d <= 0.01 for d in diffs) >= 0.5 * len(diffs)
    assert -0.25 <= min(signed) and max(signed) <= 0.10     # closed form up to 25% longer, events up to 10%
