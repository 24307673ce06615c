"""Module attributes loaded on first use (PEP 562): the one rule for the planner's lazy re-exports.

``__getattr__, __dir__ = lazy_exports(__name__, package, homes, globals())`` in a module makes ``module.X`` (and
``from module import X``) import ``package.homes[X]`` when X is first asked for, keep it in the module's
globals and return it; unknown names raise ``AttributeError`` as usual.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(module: str, package: str, homes: dict[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for ``module``: name X lives in ``package + '.' + homes[X]``."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return getattr_, dir_
