"""docs/RUNTIME.md: megatron_sailor/runtime/groups.py is the only module that calls torch's ``new_group``
(the profiler goes through ``groups.new_group``). Checked on the source: every ``*.new_group(...)`` call."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _callers() -> set[str]:
    found = set()
    for folder in ("megatron_sailor", "launch", "planner", "patches", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "new_group" \
                        and ast.unparse(node.func.value) in ("dist", "distributed", "torch.distributed"):
                    found.add(str(path.relative_to(ROOT)))
    return found


def test_only_groups_py_calls_torch_new_group() -> None:
    assert _callers() == {"megatron_sailor/runtime/groups.py"}
