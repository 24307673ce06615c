"""Load one module of another checkout under its own name, for the in-process A/B benchmarks (the old code beside
the new in one process)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_module(path: Path, name: str) -> ModuleType:
    """The module at ``path`` (another tree's copy), registered in ``sys.modules`` as ``name``."""
    import sys
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod         # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod
