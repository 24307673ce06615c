"""Checkpoints are plan-independent across the distributed optimizer and 16-bit precision (one 4-rank launch
of tests/runtime/checkpoint_reshard_script.py, seven cases).

Per case: a checkpoint written under plan A, loaded under plan B and written again at the same iteration
holds bit-identical full tensors (fp32 weights / fp32 main weights, AdamW states, steps), whatever A's and
B's optimizer sharding, TP degrees and stages; training on resumes exactly (same plan: bit-identical losses;
fp32 under another plan: within 1e-6 relative; 16-bit under another plan: within 1e-4 relative, above the
16-bit summation-order noise the numerics suite measures, 5.7e-5..7.0e-5) and an fp16 run's dynamic loss
scaler resumes with its scale, clean-step count and hysteresis.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launch import torchrun


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("ckpt")
    out = work / "results.json"
    proc = torchrun(4, "tests/runtime/checkpoint_reshard_script.py", [str(out), str(work)], timeout_s=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["name"]: r for r in json.loads(out.read_text())}


CASES = ["fp32_distopt_to_plain_other_plan", "fp32_plain_to_distopt_other_plan", "bf16_distopt_same_plan",
         "bf16_plain_same_plan", "bf16_distopt_to_plain_other_plan", "fp16_plain_to_distopt_same_layout",
         "fp16_distopt_same_plan"]


@pytest.mark.slow
@pytest.mark.timeout(700)
@pytest.mark.parametrize("name", CASES)
def test_checkpoint_reshards_and_resumes(results: dict[str, dict], name: str) -> None:
    r = results[name]
    assert r["files_identical"], name
    assert r["steps"] == [2.0]
    full, resumed = r["full_losses"], r["resumed_losses"]
    if r["same_plan"]:
        assert resumed == full
    else:
        tol = 1e-6 if r["precision"] == "fp32" else 1e-4
        assert all(abs(a - b) <= tol * abs(b) for a, b in zip(resumed, full)), (resumed, full)
    if r["precision"] == "fp16":
        assert r["scaler_loaded"] == r["scaler_saved"]
        assert r["scaler_saved"]["loss_scale"] != 2.0 ** 16      # the scale moved before the save
    else:
        assert r["scaler_saved"] is None
