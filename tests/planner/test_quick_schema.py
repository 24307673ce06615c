"""The pydantic-free pre-check of the runtime constants file (planner.schema.quick): it accepts only documents
the pydantic schema accepts, and the loader that uses it returns the same constants or the same one-line error
as the loader that always validated with pydantic (kept here as the reference)."""
import copy
import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.schema.base import validate
from planner.schema.files import RuntimeConstantsFile
from planner.schema.quick import plainly_valid_runtime_constants
from planner.simulator.constants import DEFAULT_FILE, RuntimeConstants, load_runtime_constants
from tests.conftest import ROOT

SHIPPED = json.loads(DEFAULT_FILE.read_text())
FULL = {**SHIPPED, "sharded_collective_scale": 2.5, "load_average": 0}


def _reference_load(path) -> RuntimeConstants:
    """load_runtime_constants as it was before the pre-check: pydantic validates every file."""
    from planner.schema.parse import parse_json
    doc = validate(RuntimeConstantsFile, parse_json(path.read_text(encoding="utf-8"), str(path)), source=str(path))
    table, cores = (), 0
    if doc.core_share is not None:
        raw = sorted((float(r), float(x)) for r, x in doc.core_share.ranks_per_core_slowdown)
        table = tuple((r, max(x for _, x in raw[:i + 1])) for i, (r, _) in enumerate(raw))
        cores = doc.core_share.cores
        if len({r for r, _ in table}) != len(table):
            raise InputError("core_share.ranks_per_core_slowdown lists one ranks-per-core value twice, got "
                             f"{[r for r, _ in table]}", source=str(path))
    return RuntimeConstants(source=str(path), machine=doc.machine,
                            per_microbatch_overhead_s=float(doc.per_microbatch_overhead_s),
                            memory_overhead_bytes=float(doc.memory_overhead_bytes),
                            activation_reserve_factor=float(doc.activation_reserve_factor),
                            core_share_table=table, cores=cores,
                            sharded_collective_scale=float(doc.sharded_collective_scale or 1.0))


def _outcome(fn, path):
    try:
        return "ok", fn(path)
    except InputError as exc:
        return "error", str(exc)


VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, 1, 2, -1, 0.0, -0.0, 0.5, 1.0, 0.999, 1000.0, 1000.5, 1000, 1001, 2 ** 53,
                     2 ** 53 + 1, -(2 ** 53) - 1, 10 ** 400, 1e308, 1_000_000, 1_000_001, "", "x", "1.5", "\x00a",
                     "a\x7f", "a\nb", "é" * 200, "é" * 201, "y" * 10_000, "y" * 10_001, "\ud800", [], [1.0],
                     [1.0, 2.0], [0.0, 1.0], [1.0, 2.0, 3.0], [[1.0, 2.0]], {}, {"a": "b"},
                     "megatron-sailor-runtime-constants/1", "megatron-sailor-runtime-constants/2"]),
    st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 5), st.text(max_size=5))

PATHS = ["format", "machine", "measured_by", "measured_at", "load_average", "per_microbatch_overhead_s",
         "memory_overhead_bytes", "activation_reserve_factor", "sharded_collective_scale", "notes", "core_share",
         "core_share.cores", "core_share.ranks_per_core_slowdown", "core_share.ranks_per_core_slowdown.0",
         "core_share.ranks_per_core_slowdown.0.0", "core_share.ranks_per_core_slowdown.1.1", "notes.core_share",
         "unknown", "core_share.unknown"]
EDITS = st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["set", "delete", "set_key"]), VALUES),
                 max_size=3)


def _apply(doc, path, how, value):
    value = copy.deepcopy(value)     # VALUES' objects are shared by every example: never insert (then mutate) them
    *parents, leaf = path.split(".")
    cur = doc
    for p in parents:
        if isinstance(cur, list):         # an earlier edit may have made an object a list: index only by a digit
            cur = cur[int(p)] if p.isdigit() and int(p) < len(cur) else None
        else:
            cur = cur.get(p) if isinstance(cur, dict) else None
        if not isinstance(cur, (dict, list)):
            return
    if isinstance(cur, list):
        i = int(leaf) if leaf.isdigit() else None
        if i is None or i >= len(cur):
            return
        if how == "delete":
            del cur[i]
        else:
            cur[i] = value
    elif how == "delete":
        cur.pop(leaf, None)
    elif how == "set_key":               # a key that is any string in an object (notes: a Name, 1..200 plain chars)
        if isinstance(cur.get(leaf), dict) and isinstance(value, str):
            cur[leaf][value] = "a note"
    else:
        cur[leaf] = value


@settings(max_examples=500, deadline=None)
@given(base=st.sampled_from([SHIPPED, FULL, {k: v for k, v in SHIPPED.items() if k not in ("notes", "core_share")}]),
       edits=EDITS)
def test_the_loader_equals_the_pydantic_reference_on_edited_files(tmp_path_factory, base, edits):
    doc = copy.deepcopy(base)
    for path, how, value in edits:
        _apply(doc, path, how, value)
    f = tmp_path_factory.mktemp("rc") / "c.json"
    f.write_text(json.dumps(doc), encoding="utf-8", errors="surrogatepass")
    assert _outcome(load_runtime_constants, f) == _outcome(_reference_load, f)
    if plainly_valid_runtime_constants(doc):            # never a document the schema refuses
        validate(RuntimeConstantsFile, doc)


def test_the_shipped_file_and_plain_variants_pass_the_pre_check():
    assert plainly_valid_runtime_constants(SHIPPED) and plainly_valid_runtime_constants(FULL)
    assert plainly_valid_runtime_constants({k: v for k, v in SHIPPED.items() if k not in ("notes", "core_share")})


def test_the_pre_check_refuses_what_the_schema_refuses():
    for change in ({"activation_reserve_factor": 0.99}, {"memory_overhead_bytes": True}, {"machine": 3},
                   {"sharded_collective_scale": 1000.5}, {"extra": 1}, {"notes": {"": "x"}},
                   {"core_share": {"cores": 0, "ranks_per_core_slowdown": [[1, 1]]}},
                   {"core_share": {"cores": 2, "ranks_per_core_slowdown": []}}, {"format": "x"}):
        doc = {**SHIPPED, **change}
        assert not plainly_valid_runtime_constants(doc), change
    assert not plainly_valid_runtime_constants({k: v for k, v in SHIPPED.items() if k != "machine"})
    assert not plainly_valid_runtime_constants([SHIPPED])


def test_planning_with_the_shipped_constants_imports_no_pydantic():
    code = ("import sys; from planner.cli_plan import main; "
            "rc = main(['--model', 'tiny', '--gpus', 'A100-40@z=2', '--json', '--no-comparator']); "
            "sys.stdout.flush(); print('PYDANTIC' if any(m.startswith('pydantic') for m in sys.modules) else 'NONE', "
            "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "NONE"
