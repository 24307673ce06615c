"""One exception type for every user-facing input problem.

CLIs catch :class:`InputError` and print ``error: <message>`` on one line with exit status 2, so every
message must name the file (when there is one), the field and the offending value.
"""
from __future__ import annotations

from typing import Any, Mapping


class InputError(ValueError):
    """Bad user input: malformed file, unknown name, impossible constraint."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)

    def with_source(self, source: str) -> "InputError":
        """Return the same error prefixed by the file it came from (if not prefixed yet)."""
        if self.source is not None:
            return self
        return InputError(str(self), source=source)


def check_keys(data: Any, allowed: set[str], required: set[str], where: str) -> None:
    """Raise :class:`InputError` unless ``data`` is a mapping with only ``allowed`` keys and all ``required``."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InputError(f"{where} has unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(data))
    if missing:
        raise InputError(f"{where} is missing required key(s) {missing}")


class InternalError(RuntimeError):
    """A planner bug detected at run time (e.g. the search's evaluator disagrees with the simulator).

    CLIs print ``internal error: <message>`` on one line and exit with status 3."""
