"""Simulator accuracy on the 15 real GH200 runs: a deterministic regression guard for the issue's goals."""
import glob
import statistics

from planner.inputs import load_network_file
from planner.sailor_data import load_sailor_data
from planner.sailor_plan import load_any_plan
from planner.simulator import SAILOR_DEEPSPEED, SimContext, simulate
from tests.conftest import ROOT


def test_real_runs_within_goals(sailor_data_dir):
    sd = load_sailor_data(sailor_data_dir, "OPT-350")
    net = load_network_file(str(ROOT / "planner" / "data" / "network_clariden_gh200.json"), sd.network)
    paths = sorted(glob.glob(str(sailor_data_dir / "sailor/Planner/simulations/validation/clariden/OPT-350/*/*.json")))
    t_err, m_err = [], []
    for path in paths:
        plan, info = load_any_plan(path)
        ctx = SimContext(sd.model, sd.profiles, net, sd.profiles.catalog, SAILOR_DEEPSPEED, info.gpus_per_node)
        est = simulate(plan, ctx)
        t_err.append(abs(est.iteration_time_s / info.measured_iteration_s - 1))
        m_err.append(abs(est.peak_memory_bytes / info.measured_peak_memory_bytes - 1))
    assert len(paths) == 15
    assert statistics.mean(t_err) <= 0.05 and statistics.mean(m_err) <= 0.05
    assert max(t_err) <= 0.12 and max(m_err) <= 0.12
