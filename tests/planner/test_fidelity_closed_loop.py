"""benchmarks/closed_loop.py's model side: the plan set, the core-sharing term, and the emulated slow link
predicted exactly as the runtime's emulation hook delays a message."""
import sys

import pytest

from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.network import Endpoint, Link, NetworkModel
from planner.plan import Plan
from planner.profiles import ProfileStore
from planner.simulator import OURS, SimContext, simulate
from planner.simulator.constants import core_share_scale
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import closed_loop as cl  # noqa: E402


def test_core_sharing_term():
    """Without a measured table the term is time slicing: ranks / cores over the profile's."""
    assert core_share_scale(2, 2, 2) == 1.0
    assert core_share_scale(3, 2, 2) == pytest.approx(1.5)
    assert core_share_scale(4, 2, 2) == pytest.approx(2.0)
    assert core_share_scale(3, 16, 2) == 1.0
    assert core_share_scale(4, 1, 2) == pytest.approx(2.0)   # profile already shared 1 core
    assert core_share_scale(2.5, 2, 2) == pytest.approx(1.25)   # fractional busy ranks (core_sharing.py)


def test_plan_set_covers_the_issue_kinds():
    plans = {n: Plan.from_dict(d) for n, (d, _) in cl.fixed_plans("A100-40").items()}
    worlds = {n: w for n, (_, w) in cl.fixed_plans("A100-40").items()}
    assert len(plans) + 1 >= 6                      # + the planner's own plan
    assert all(p.world_size == worlds[n] for n, p in plans.items())
    assert plans["data-parallel"].dp_degree == 2 and plans["tensor-par"].stages[0].replicas[0].tp == 2
    assert plans["pipe-even"].num_stages == 2 and plans["pipe-3"].num_stages == 3
    ev, un = plans["pipe-even"].stages, plans["pipe-uneven"].stages
    assert ev[0].num_layers == ev[1].num_layers and un[0].num_layers != un[1].num_layers
    assert [r.tp for s in plans["mixed-tp"].stages for r in s.replicas] == [2, 1]
    assert {s.replicas[0].zone for s in plans["slow-link"].stages} == {"local-a", "local-b"}


def test_slow_link_prediction_is_the_emulated_delay():
    from megatron_sailor.runtime.emulation import Emulation
    emu = Emulation(**cl.SLOW_LINK)
    model = get_model("tiny")
    cat = GPUCatalog()
    link = Link(cl.SLOW_LINK["cross_zone_gbps"] * 1e9 / 8, cl.SLOW_LINK["cross_zone_latency_s"])
    net = NetworkModel(cat).with_class_links({"cross_zone": link})
    nbytes = model.boundary_activation_bytes(1, 4)
    assert net.link(Endpoint("A100-40", "local-a"), Endpoint("A100-40", "local-b")).time_s(nbytes) == \
        pytest.approx(emu.message_delay_s(int(nbytes), True), rel=1e-9)
    d, _ = cl.fixed_plans("A100-40")["slow-link"]
    d = dict(d, num_layers=4, model=None, stages=[dict(s, first_layer=2 * i, num_layers=2)
                                                  for i, s in enumerate(d["stages"])])
    ctx = SimContext(model, ProfileStore(model, cat), net, cat, OURS)
    est = simulate(Plan.from_dict(d), ctx)
    assert est.stages[0].p2p_s == pytest.approx(emu.message_delay_s(int(nbytes), True), rel=1e-9)
