"""Start-up work cut without changing answers: what `import planner.api` / `planner.cli_sim` load, the strict
JSON reader's fast checks against the per-character reference, schemas built on first use giving the same
one-line errors, and profile smoothing done on first use giving the eager values."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError, quote
from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.profiles import LayerCosts, ProfileStore
from planner.schema import base

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(stmt: str) -> set[str]:
    code = f"import sys; {stmt}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def _tops(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


def test_planner_api_imports_no_torch_rich_matplotlib_or_yaml():
    tops = _tops(_modules_after("import planner.api"))
    assert "planner" in tops
    assert not tops & {"torch", "rich", "matplotlib", "yaml", "megatron", "megatron_sailor", "launch"}


def test_sailor_sim_imports_no_search_and_its_flags_no_cost_model():
    mods = _modules_after("import planner.cli_sim")       # parsing flags (--help, bad flags): no numpy yet
    assert "planner.inputs" in mods and "planner.simulator.settings" in mods
    assert not {m for m in mods if m.startswith(("numpy", "planner.simulator.core", "planner.search", "planner.api",
                                                 "planner.baselines"))}
    assert not _tops(mods) & {"torch", "rich", "matplotlib", "yaml"}
    ran = _modules_after("import planner.simulator as S; S.simulate")          # what sailor-sim's main loads
    assert "planner.simulator.core" in ran and not {m for m in ran if m.startswith("planner.search")}


def test_sailor_plan_flags_import_no_search_and_the_search_names_load_on_first_use():
    mods = _modules_after("import planner.cli_plan")      # parsing flags (--help, bad flags): no search yet
    assert not {m for m in mods if m.startswith(("numpy", "planner.search", "planner.api", "planner.simulator.core",
                                                 "planner.frontier", "planner.baselines"))}
    light = _modules_after("from planner.search.space import SearchSpace")
    assert "planner.search.engine" not in light
    import planner.search as S
    from planner.search.engine import plan_search
    from planner.search.space import Objective
    assert S.plan_search is plan_search and S.Objective is Objective
    with pytest.raises(AttributeError):
        S.NoSuchName  # noqa: B018


def test_schema_files_loads_only_the_schema_asked_for():
    mods = _modules_after("from planner.schema.files import RuntimeConstantsFile")
    assert "planner.schema.runtime_constants_file" in mods
    assert not mods & {"planner.schema.plan_files", "planner.schema.cluster_files", "planner.schema.data_files"}
    from planner.schema import files
    from planner.schema.plan_files import PlanFile
    assert files.PlanFile is PlanFile
    with pytest.raises(AttributeError):
        files.NoSuchFile  # noqa: B018


# --- the strict JSON reader against the per-character reference it replaced -----------------------------------

def _ref_no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise InputError(f"duplicate key {quote(k)} in one JSON object")
        out[k] = v
    return out


def _ref_finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"number {quote(text)} is out of range (not finite)")
    return value


def _ref_parse_json(text, source=None):
    """The reader before the fast checks: a depth count per character and a check per float literal."""
    depth = best = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > best:
                best = depth
                if best > base.MAX_DEPTH:
                    raise InputError(f"nested deeper than {base.MAX_DEPTH} levels", source=source)
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text, object_pairs_hook=_ref_no_duplicates, parse_constant=base._no_constant,
                          parse_float=_ref_finite_float)
    except InputError as exc:
        raise exc.with_source(source) if source else exc from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                         source=source) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not valid JSON ({quote(str(exc))})", source=source) from None


def _outcome(fn, text):
    try:
        return "ok", repr(fn(text, "f.json"))
    except InputError as exc:
        return "error", str(exc)


NUMBERS = st.one_of(
    st.integers(-10 ** 30, 10 ** 30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.builds(lambda m, e, s: f"{m}{'eE'[s % 2]}{'+-'[s // 2 % 2] if s % 3 else ''}{e}",
              st.sampled_from(["1", "9.99", "0.5", "17976931348623157", "-2"]),
              st.sampled_from(["99", "100", "307", "308", "309", "400", "0308", "99999"]), st.integers(0, 11)),
    st.builds(lambda n, d: "9" * n + ("." + "9" * d if d else ""), st.integers(150, 420), st.integers(0, 3)),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "01", "1.", "--1"]),
)


def _json_like(depth):
    leaf = st.one_of(NUMBERS, st.sampled_from(['"a"', '"[["', '"é{"', 'true', 'null', '"\\u00e9"']))
    if depth == 0:
        return leaf
    inner = _json_like(depth - 1)
    return st.one_of(
        leaf,
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(st.sampled_from(["a", "b", "c", "é"]), inner), max_size=4).map(
            lambda kv: "{" + ",".join(f'"{k}":{v}' for k, v in kv) + "}"),
    )


@settings(max_examples=400, deadline=None)
@given(body=_json_like(3), wrap=st.integers(0, 70), closes=st.integers(0, 70), junk=st.sampled_from(["", "]", "}x", " "]))
def test_parse_json_equals_the_reference(body, wrap, closes, junk):
    """Same value or the same one-line error as the reference, on valid and invalid text, nested up to 73 deep
    (MAX_DEPTH is 64), with floats that overflow, long digit runs, duplicate keys and brackets in strings."""
    text = "[" * wrap + body + "]" * min(closes, wrap) + junk
    assert _outcome(base.parse_json, text) == _outcome(_ref_parse_json, text)


@pytest.mark.parametrize("text", [
    "[1e309]", "[1E+309]", "[-1e400]", "[1e308, 2e308]", "[" + "9" * 309 + ".0]", "[1e-400]", "[1.7976931348623157e308]",
    '{"a": 1, "b": 2, "a": 3}', '{"x": {"y": 1, "y": 2}}', "[" * 65 + "]" * 65, "[" * 64 + "]" * 64,
    '["' + "[" * 70 + '"]', "[" * 70, "{" * 40 + "[" * 30, "[NaN]", '{"a": -Infinity}', "[1, 2", "",
])
def test_parse_json_edge_cases_equal_the_reference(text):
    assert _outcome(base.parse_json, text) == _outcome(_ref_parse_json, text)


# --- schemas built on first use: the same one-line errors in a fresh process ----------------------------------

BAD_CLUSTER = '{"pools": [{"gpu_type": "A100-40", "zone": "us-central1-a", "count": -3}]}'


def test_bad_cluster_file_first_thing_validated_in_a_fresh_process(tmp_path):
    """The cluster schema is built on its first validation: a fresh sailor-plan given a bad cluster file
    prints the same single error line as in a process where every schema was already built."""
    f = tmp_path / "cluster.json"
    f.write_text(BAD_CLUSTER)
    out = subprocess.run([sys.executable, "-m", "planner.cli_plan", "--model", "tiny", "--cluster", str(f)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {f}: ") and "must be >= 0, got -3" in lines[0]
    from planner.schema import files
    for name in ("PlanFile", "SailorPlanFile", "InventoryFile", "NetworkFile", "CatalogFile", "ProfileFile",
                 "RuntimeConstantsFile", "ClusterFile"):
        with pytest.raises(InputError):       # build every schema here first
            base.validate(getattr(files, name), {"no": "such key"})
    with pytest.raises(InputError) as exc:
        base.validate(files.ClusterFile, json.loads(BAD_CLUSTER), source=str(f))
    assert lines[0] == f"error: {exc.value}"


# --- profile smoothing on first use equals smoothing every entry up front -------------------------------------

def _costs(gpu, mbs, tp, scale, layers=3):
    f = [scale * mbs * (1 + 0.1 * i) + 0.01 * (mbs % 3) for i in range(layers)]
    return LayerCosts(gpu_type=gpu, mbs=mbs, tp=tp, embedding_fwd_s=0.1, embedding_bwd_s=0.2,
                      layer_fwd_s=tuple(f), layer_bwd_s=tuple(2.07 * x for x in f), head_fwd_s=0.3 * mbs + 0.011,
                      head_bwd_s=0.61 * mbs, update_s_per_param=1e-9)


def _ref_affine_at(xs, ys, x):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((a - mx) ** 2 for a in xs)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / var if var else 0.0
    return max(0.0, my + slope * (x - mx))


def _ref_smooth(entries, window):
    """Every entry fitted at once, as smooth_across_mbs did before it deferred the fits."""
    from dataclasses import replace
    groups = {}
    for (g, m, t), c in entries.items():
        groups.setdefault((g, t), {})[m] = c
    out = dict(entries)
    for (g, t), by_mbs in groups.items():
        for m, c in by_mbs.items():
            near = sorted(x for x in by_mbs if m / window <= x <= m * window)
            if len(near) >= 3:
                ns = [by_mbs[x] for x in near]
                fit = lambda get: _ref_affine_at(near, [get(n) for n in ns], c.mbs)  # noqa: E731
                out[(g, m, t)] = replace(
                    c, layer_fwd_s=tuple(fit(lambda n, i=i: n.layer_fwd_s[i]) for i in range(len(c.layer_fwd_s))),
                    layer_bwd_s=tuple(fit(lambda n, i=i: n.layer_bwd_s[i]) for i in range(len(c.layer_bwd_s))),
                    head_fwd_s=fit(lambda n: n.head_fwd_s), head_bwd_s=fit(lambda n: n.head_bwd_s),
                    source=c.source + " (smoothed across mbs)")
    return out


def test_deferred_smoothing_equals_eager_smoothing_bit_for_bit():
    model = get_model("tiny")
    store = ProfileStore(model, GPUCatalog())
    raw = {}
    for gpu, scale in (("A100-40", 0.013), ("V100-16", 0.031)):
        for tp in (1, 2):
            for mbs in (1, 2, 3, 4, 6, 8, 16, 32):
                c = _costs(gpu, mbs, tp, scale * (1 + 0.37 * tp) * (1.0 + 0.05 * (mbs % 2)), model.num_layers)
                store.add(c)
                raw[(gpu, mbs, tp)] = c
    store.smooth_across_mbs(4.0)
    expected = _ref_smooth(raw, 4.0)
    assert any(expected[k] != raw[k] for k in raw)                       # the fit changed something
    late = _costs("A100-40", 4, 1, 0.5, model.num_layers)                  # added after smoothing: kept as given
    store.add(late)
    expected[("A100-40", 4, 1)] = late
    for k in sorted(raw, reverse=True):                                  # any order of first use
        assert store.get(*k) == expected[k], k
    store.smooth_across_mbs(2.0)                                         # a second smoothing fits the fitted
    again = _ref_smooth(expected, 2.0)
    for k in sorted(raw):
        assert store.get(*k) == again[k], k
