"""planner.api: typed requests, frozen reports, nothing it is given is changed, and the same answer as the
sailor-plan command line."""
from __future__ import annotations

import dataclasses
import json

import pytest

from planner import api
from planner.cli_plan import main as plan_main
from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.search import Objective

GPUS = "A100-40@us-central1-a=8,V100-16@us-central1-a=8"


def _setup():  # noqa: ANN202
    bundle = api.load_data(api.DataSource(model="opt-350m"))
    ctx = api.make_context(bundle, None)
    return bundle, ctx, parse_gpus(GPUS, bundle.catalog)


def test_plan_does_not_mutate_its_arguments() -> None:
    bundle, ctx, cluster = _setup()
    ctx.gpus_per_node["A100-40"] = 3                 # differs from the cluster's node size (catalog: 8)
    before = (dict(ctx.gpus_per_node), ctx.settings, cluster)
    request = api.PlanRequest(cluster=cluster, global_batch_size=64, top_k=2)
    report = api.plan(request, ctx)
    assert (dict(ctx.gpus_per_node), ctx.settings, cluster) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.plan = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.top_k = 3  # type: ignore[misc]
    assert len(report.alternatives) == 1 and report.comparator_ran and report.comparator is not None


def test_report_estimate_is_simulate_of_the_plan() -> None:
    _, ctx, cluster = _setup()
    report = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=64), ctx)
    again = api.simulate(report.plan, api.context_for(ctx, cluster))
    assert again == report.estimate


def test_api_and_cli_give_the_same_plan(capsys: pytest.CaptureFixture[str]) -> None:
    _, ctx, cluster = _setup()
    obj = Objective("cost", max_cost_per_iter_usd=None, min_throughput_iters_per_s=0.5)
    report = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=64, objective=obj, comparator=False), ctx)
    assert plan_main(["--model", "opt-350m", "--gpus", GPUS, "--gbs", "64", "--objective", "cost",
                      "--min-throughput", "0.5", "--no-comparator", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"] == report.plan.to_dict() and "comparator" not in out
    assert out["estimate"]["iteration_time_s"] == report.estimate.iteration_time_s


@pytest.mark.parametrize("kwargs, message", [
    ({"global_batch_size": 0}, "--gbs must be >= 1, got 0"),
    ({"global_batch_size": 64, "top_k": 0}, "--top must be >= 1, got 0"),
])
def test_bad_request_is_one_input_error(kwargs: dict, message: str) -> None:
    _, _, cluster = _setup()
    with pytest.raises(InputError, match=message):
        api.PlanRequest(cluster=cluster, **kwargs)


def test_infeasible_request_names_the_constraint() -> None:
    _, ctx, cluster = _setup()
    with pytest.raises(InputError, match="throughput"):
        api.plan(api.PlanRequest(cluster=cluster, global_batch_size=64,
                                 objective=Objective(min_throughput_iters_per_s=1e6), comparator=False), ctx)


def test_bad_runtime_preset_is_refused() -> None:
    with pytest.raises(InputError, match="runtime must be one of"):
        api.DataSource(model="tiny", runtime="nope")
