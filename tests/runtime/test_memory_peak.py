"""The simulator's peak of activations saved for backward equals, to the byte, what the runtime's counter
(saved_tensors_hooks, live bytes) reports on every rank of plans with full recomputation and dropout 0.1:
uniform groups of 1 and 2 layers, block, fp32 / bf16 / fp16, TP 2, with and without linear biases. Counts of
bytes do not depend on timing, so the comparison is exact (docs/SIMULATOR.md, "Activations")."""
from __future__ import annotations

import json

import pytest

from tests.helpers.launch import torchrun
from tests.helpers.memory_peak import CASES, DROPOUT


def _predicted(plan_dict: dict, bias: bool) -> dict[tuple[int, int], tuple[float, float]]:
    """{(stage, replica): (peak activation bytes, the recompute excess in it)} from simulate's own functions."""
    from planner.hardware import GPUCatalog
    from planner.model import get_model, with_overrides
    from planner.network import NetworkModel
    from planner.plan import Plan
    from planner.profiles import ProfileStore
    from planner.simulator import OURS, SimContext
    from planner.simulator.memory import activation_peak_bytes
    from planner.simulator.stage import all_replica_costs
    model = get_model("tiny") if bias else with_overrides(get_model("tiny"), bias=False)
    plan = Plan.from_dict(plan_dict)
    cat = GPUCatalog()
    ctx = SimContext(model, ProfileStore(model, cat, plan.precision), NetworkModel(cat), cat,
                     OURS.with_(hidden_dropout=DROPOUT, attention_dropout=DROPOUT))
    return {(c.stage, c.replica): (activation_peak_bytes(plan, c), c.act_peak_extra_bytes)
            for row in all_replica_costs(plan, ctx) for c in row}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_counted_activation_peaks_equal_the_simulators(tmp_path):
    out = tmp_path / "peaks.json"
    proc = torchrun(4, "tests/helpers/memory_peak.py", [str(out)], timeout_s=350)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = {r["name"]: r["ranks"] for r in json.loads(out.read_text())}
    with_excess = 0
    for name, plan, bias in CASES:
        pred = _predicted(plan, bias)
        for stage, replica, _tp_rank, _memory, peaks in results[name]:
            peak, excess = pred[(stage, replica)]
            assert peaks == [peak, peak], (name, stage, replica, peaks, peak)
            with_excess += excess > 0
    assert with_excess >= 3        # the short-lived recompute peak is exercised, not only the kept bytes
