"""Property tests (hypothesis): malformed and hostile variants of every input file, fed to its CLI in-process.

Each generated case takes a valid file, applies one mutation that always makes it invalid (a hostile value
where a typed field is, an unknown key, a duplicate key, a non-finite number, a removed required key, deep
nesting, a YAML alias, a truncated text) and checks the one-line contract of tests/adversarial/oneline.py.
The number of cases run is printed at the end of the session ("adversarial generated cases: N").
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch import cli as launch_cli
from planner import cli_plan, cli_sim
from planner.errors import run_cli
from tests.adversarial.oneline import assert_refused
from tests.adversarial.test_cases_cli import PLAN, SAILOR

HOSTILE = st.sampled_from([
    None, True, -1, 0.5, "abc", "a\nb; touch /tmp/x #", "x" * 100_000, [1, 2], {"k": 1}, 10 ** 30, -10 ** 30,
    "../../etc/passwd", "$(id)", "", [], {}])

CLUSTER = {"pools": [{"gpu_type": "A100-40", "zone": "z-a", "count": 4, "gpus_per_node": 4}]}
NODES = {"nodes": [{"host": "gpu-a1", "name": "n0", "gpu_type": "A100-40", "zone": "z-a", "gpus_per_node": 1}]}
CATALOG = {"A100-40": {"peak_fp32_flops": 1.5e14, "gpus_per_node": 4}}
NETWORK = {"format": "megatron-sailor-network/1", "class_links": {"cross_zone": {"bw_bytes_per_s": 1e9,
                                                                                 "latency_s": 0.001}}}
PROFILE = {"format": "megatron-sailor-profile/1", "gpu_type": "A100-40", "entries": [
    {"mbs": 1, "tp": 1, "embedding_s": [0.001, 0.001], "layers_s": [[0.01, 0.02]], "head_s": [0.01, 0.02],
     "update_s_per_param": 1e-9}]}


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Paths to every scalar leaf."""
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _paths(v, prefix + (k,))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _paths(v, prefix + (i,))]
    return [prefix]


def _set(obj: Any, path: tuple, value: Any) -> Any:
    out = json.loads(json.dumps(obj))
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return out


def _invalid_leaf(old: Any, new: Any) -> bool:
    """``new`` is never a valid replacement for ``old`` (different JSON type, or a hostile string); null may
    stand for an optional field's default, so it does not count."""
    if new is None:
        return False
    if type(old) is not type(new) and not (isinstance(old, float) and type(new) is int):
        return True
    return isinstance(new, str) and ("\n" in new or len(new) > 1000 or new == "")


@st.composite
def mutated(draw, base: dict, yaml: bool = False) -> str:  # noqa: ANN001
    kind = draw(st.sampled_from(["leaf", "unknown_key", "duplicate", "nonfinite", "drop", "deep", "truncate"]
                                + (["alias"] if yaml else [])))
    paths = _paths(base)
    if kind == "leaf":
        path = draw(st.sampled_from(paths))
        old = _get(base, path)
        new = draw(HOSTILE.filter(lambda v: _invalid_leaf(old, v)))
        return json.dumps(_set(base, path, new))
    if kind == "unknown_key":
        if "entries" in base:                           # profiles allow top-level extras: hit an entry
            return json.dumps({**base, "entries": [{**base["entries"][0], "bogus": 1}]})
        return json.dumps({**base, draw(st.sampled_from(["bogus", "__class__", "x\ny"])): 1})
    if kind == "duplicate":
        key = draw(st.sampled_from(sorted(base)))
        return json.dumps(base)[:-1] + f', {json.dumps(key)}: {json.dumps(base[key])}}}'
    if kind == "nonfinite":
        numeric = [p for p in paths if isinstance(_get(base, p), (int, float)) and not isinstance(_get(base, p), bool)]
        path = draw(st.sampled_from(numeric or paths))
        token = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400"]))
        return json.dumps(_set(base, path, "@@")).replace('"@@"', token)
    if kind == "drop":
        gone = draw(st.sampled_from(sorted(base)))
        return json.dumps({k: v for k, v in base.items() if k != gone})
    if kind == "deep":
        n = draw(st.integers(100, 50_000))
        return json.dumps(_set(base, draw(st.sampled_from(paths)), "@@")).replace('"@@"', "[" * n + "]" * n)
    if kind == "alias":
        return "a: &a [x, x, x]\nb: [*a, *a]\n"
    text = json.dumps(base)
    return text[:draw(st.integers(1, len(text) - 1))]


def _get(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _always_invalid(text: str, base: dict) -> bool:
    """Mutations that could happen to stay valid ('drop' of an optional key) are skipped."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return True
    if not isinstance(data, dict):
        return True
    return not (set(base) - set(data)) or any(k in data for k in ("bogus", "__class__", "x\ny")) or \
        (set(base) - set(data)) & _REQUIRED


_REQUIRED = {"schema_version", "num_layers", "stages", "micro_batch_size", "global_batch_size", "pools", "nodes",
             "format", "gpu_type", "entries", "pipeline_list", "mbs", "gbs"}

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def sim(argv: list[str]) -> int:
    return run_cli(cli_sim.main, argv)


def _plan_file(d: Path) -> str:
    (d / "good_plan.json").write_text(json.dumps(PLAN))
    return str(d / "good_plan.json")


# reader -> (valid document, file name, argv builder given (work dir, file path))
READERS: dict[str, tuple[dict, str, Callable[[Path, str], tuple[Callable, list[str]]]]] = {
    "plan": (PLAN, "p.json", lambda d, f: (sim, [f, "--model", "tiny"])),
    "sailor_plan": (SAILOR, "s.json", lambda d, f: (sim, [f, "--model", "tiny"])),
    "cluster_json": (CLUSTER, "c.json", lambda d, f: (cli_plan.main, ["--model", "tiny", "--no-comparator", "--cluster", f])),
    "cluster_yaml": (CLUSTER, "c.yaml", lambda d, f: (cli_plan.main, ["--model", "tiny", "--no-comparator", "--cluster", f])),
    "inventory": (NODES, "n.yaml", lambda d, f: (launch_cli.main, [_plan_file(d), "--nodes-file", f, "--dry-run"])),
    "catalog": (CATALOG, "g.json", lambda d, f: (sim, [_plan_file(d), "--gpu-catalog", f])),
    "network": (NETWORK, "w.json", lambda d, f: (sim, [_plan_file(d), "--network", f])),
    "profile": (PROFILE, "r.json", lambda d, f: (sim, [_plan_file(d), "--profiles", f])),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_malformed_files_give_one_line(reader: str, capsys: pytest.CaptureFixture, generated: dict) -> None:
    base, name, build = READERS[reader]
    ran = [0]

    @SETTINGS
    @given(text=mutated(base, yaml=name.endswith(".yaml")))
    def check(text: str) -> None:
        if not _always_invalid(text, base):
            return
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            f = d / name
            f.write_text(text)
            main, argv = build(d, str(f))
            assert_refused(main, argv, capsys, d)
            ran[0] += 1

    check()
    generated[reader] = ran[0]
    assert ran[0] >= 20


META = {"format": "megatron-sailor-checkpoint/2", "iteration": 4, "consumed_samples": 32,
        "model": {"num_layers": 1, "hidden_size": 64}, "files": {
            n: {"sha256": "0" * 64, "bytes": 1, "params": []} for n in ("embedding.pt", "head.pt", "rng.pt",
                                                                       "layer_00000.pt")}}


def test_malformed_checkpoint_meta_is_refused_in_one_line(generated: dict) -> None:
    from megatron_sailor.train.checkpoint_store import CheckpointError, read_meta
    from planner.schema.checkpoint_meta import seal
    ran = [0]

    @SETTINGS
    @given(text=mutated(META), sealed=st.booleans())
    def check(text: str, sealed: bool) -> None:
        if not _always_invalid(text, META):
            return
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "iter_0000004"
            folder.mkdir()
            try:                                       # a forger re-seals whatever still parses
                data = json.loads(text)
                text = json.dumps(seal(data)) if sealed and isinstance(data, dict) else text
            except (ValueError, RecursionError):
                pass
            (folder / "meta.json").write_text(text)
            try:                   # a re-sealed edit of a free-form field (model values) may still be valid
                read_meta(folder)
            except CheckpointError as err:
                assert "\n" not in str(err) and len(str(err)) < 300, str(err)[:400]
                ran[0] += 1

    check()
    generated["checkpoint_meta"] = ran[0]
    assert ran[0] >= 20


@SETTINGS
@given(cell=st.one_of(st.sampled_from(["inf", "-1", "1e400", "NaN", "abc", "4.9", "", "1" * 40, "0x10", "٣"]),
                      st.text(min_size=1, max_size=20).filter(lambda s: not s.strip().isdigit())))
def _trace_case(cell: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        f = d / "t.csv"
        f.write_text(",Timestamp,A100-40_z-a\n0,0," + cell.replace("\n", " ").replace(",", ";").replace('"', "'") + "\n")
        assert_refused(cli_plan.main, ["--model", "tiny", "--no-comparator", "--trace", str(f)], _CAP[0], d)
        _CAP[1] += 1


_CAP: list = [None, 0]


def test_malformed_trace_cells(capsys: pytest.CaptureFixture, generated: dict) -> None:
    _CAP[0], _CAP[1] = capsys, 0
    _trace_case()
    generated["trace_csv"] = _CAP[1]
    assert _CAP[1] >= 20
