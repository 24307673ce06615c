import json

import pytest

from planner.errors import InputError
from planner.plan import Plan, Replica, Stage, region_of


def rep(gpu="A100-40", tp=1, zone="us-central1-a"):
    return Replica(gpu, tp, zone)


def two_stage(**kw):
    base = dict(num_layers=4, stages=(Stage(0, 1, (rep(), rep(tp=2))), Stage(1, 3, (rep("V100-16"), rep()))),
                micro_batch_size=2, global_batch_size=8)
    base.update(kw)
    return Plan(**base)


def test_roundtrip_and_derived_views():
    p = two_stage()
    q = Plan.from_json(p.to_json())
    assert q == p
    assert p.num_stages == 2 and p.dp_degree == 2 and p.world_size == 1 + 2 + 1 + 1
    assert p.microbatch_counts == (2, 2)
    assert p.pipeline(1) == (rep(tp=2), rep())
    assert p.gpu_counts() == {("A100-40", "us-central1-a"): 4, ("V100-16", "us-central1-a"): 1}


def test_per_pipeline_counts():
    p = two_stage(microbatches_per_pipeline=(3, 1))
    assert p.microbatch_counts == (3, 1)
    with pytest.raises(InputError, match="sum to 3"):
        two_stage(microbatches_per_pipeline=(2, 1))
    with pytest.raises(InputError, match="must list 2 counts"):
        two_stage(microbatches_per_pipeline=(4,))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(num_layers=5), "cover transformer layers \\[0, 4\\) but 'num_layers' is 5"),
    (lambda d: d["stages"][1].update(first_layer=2), "must be contiguous: expected 1"),
    (lambda d: d["stages"][1]["replicas"].pop(), "stages\\[1\\] has 1 replicas but stages\\[0\\] has 2"),
    (lambda d: d.update(micro_batch_size=0), "'micro_batch_size' must be >= 1, got 0"),
    (lambda d: d.update(global_batch_size=-8), "'global_batch_size' must be >= 1, got -8"),
    (lambda d: d["stages"][0]["replicas"][0].update(tp=0), "'tp' must be >= 1, got 0"),
    (lambda d: d.update(precision="fp8"), "'precision' must be one of"),
    (lambda d: d.update(bogus=1), "unknown key\\(s\\) \\['bogus'\\]"),
    (lambda d: d.update(global_batch_size=6), "not divisible by micro_batch_size x replicas = 2 x 2"),
    (lambda d: d.update(schema_version=9), "'schema_version' must be 1, got 9"),
])
def test_validation_names_field_and_value(change, message):
    data = two_stage().to_dict()
    change(data)
    with pytest.raises(InputError, match=message):
        Plan.from_json(json.dumps(data), source="p.json")


def test_error_names_file(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    with pytest.raises(InputError, match="bad.json: not valid JSON"):
        Plan.load(f)


def test_middle_stage_needs_layers_but_ends_may_be_empty():
    Plan(num_layers=2, stages=(Stage(0, 0, (rep(),)), Stage(0, 2, (rep(),))), micro_batch_size=1,
         global_batch_size=1)
    with pytest.raises(InputError, match="only the first or last stage"):
        Plan(num_layers=2, stages=(Stage(0, 1, (rep(),)), Stage(1, 0, (rep(),)), Stage(1, 1, (rep(),))),
             micro_batch_size=1, global_batch_size=1)


def test_region_of():
    assert region_of("us-central1-a") == "us-central1"
    assert region_of("local") == "local"
