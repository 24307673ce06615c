"""Session 18 start-up cuts (helper s18i): sailor-plan and sailor-sim ask for one OpenBLAS thread before numpy loads (a user's
value kept), and the Sailor importer reads a planner profile copy only for GPU types profiles_tmp.json lacks,
giving the dict (keys in the same order) that reading every copy and then profiles_tmp.json gave."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.sailor_data import SAILOR_MODELS, _json, _profile_source, _root

ROOT = Path(__file__).resolve().parents[2]


_PLAN_CALL = ("cli_plan.main(['--model', 'tiny', '--gpus', 'A100-40@us-central1-a=2', '--json',"
              " '--no-comparator'])")
_SIM_CALL = "cli_sim.entry(['examples/plans/opt350m_hetero.json', '--json'])"


def _blas_var_after_main(env_value: str | None, call: str = _PLAN_CALL) -> list[str]:
    code = ("import os, sys; from planner import cli_plan, cli_sim\n"
            f"rc = {call}\n"
            "print(rc, os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**env, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[-3:]


def test_sailor_plan_asks_for_one_blas_thread_and_keeps_a_users_choice():
    assert _blas_var_after_main(None) == ["0", "1", "True"]
    assert _blas_var_after_main("3") == ["0", "3", "True"]


def test_sailor_sim_asks_for_one_blas_thread_and_keeps_a_users_choice():
    assert _blas_var_after_main(None, _SIM_CALL) == ["0", "1", "True"]
    assert _blas_var_after_main("2", _SIM_CALL) == ["0", "2", "True"]


def _reference(root: Path, sname: str) -> dict:
    """The reading before Session 18: every planner copy, then profiles_tmp.json over them."""
    out = {}
    pdir = root / "Planner" / "sailor_planner" / "profiles" / sname
    if pdir.is_dir():
        for gdir in sorted(pdir.iterdir()):
            if (gdir / "profile.json").is_file():
                out[gdir.name] = _json(gdir / "profile.json")
    tmp = root / "Planner" / "simulations" / "profiles_tmp.json"
    if tmp.is_file():
        out.update(_json(tmp).get(sname, {}))
    return out


def test_profile_source_equals_reading_every_copy_on_the_shared_data(sailor_data_dir):
    root = _root(sailor_data_dir)
    for sname in SAILOR_MODELS:
        got, ref = _profile_source(root, sname), _reference(root, sname)
        assert got == ref and list(got) == list(ref)


def _folder(tmp_path: Path, with_tmp: bool) -> Path:
    root = tmp_path / "sailor"
    for gpu, text in (("A100-40", "{not json"), ("B-1", json.dumps({"1": {"1": {"0": [1, 2, 3]}}}))):
        d = root / "Planner" / "sailor_planner" / "profiles" / "OPT-350" / gpu
        d.mkdir(parents=True)
        (d / "profile.json").write_text(text)
    sims = root / "Planner" / "simulations"
    sims.mkdir(parents=True)
    if with_tmp:
        (sims / "profiles_tmp.json").write_text(json.dumps({"OPT-350": {"C-2": {"2": {}}, "A100-40": {"4": {}}}}))
    return root


def test_a_copy_profiles_tmp_replaces_is_not_read_and_a_copy_it_lacks_is(tmp_path):
    got = _profile_source(_folder(tmp_path, with_tmp=True), "OPT-350")
    assert list(got) == ["A100-40", "B-1", "C-2"]
    assert got["A100-40"] == {"4": {}} and got["B-1"] == {"1": {"1": {"0": [1, 2, 3]}}}
    with pytest.raises(InputError, match="not valid JSON"):   # no profiles_tmp.json: the copy is read, and refused
        _profile_source(_folder(tmp_path / "b", with_tmp=False), "OPT-350")
