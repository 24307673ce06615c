"""One exception type for every user-facing input problem.

CLIs catch :class:`InputError` and print ``error: <message>`` on one line with exit status 2, so every
message must name the file (when there is one), the field and the offending value; :func:`run_cli` is that
one wrapper, shared by every command-line entry (planner, profiler).
"""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Mapping


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


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; turn :class:`InputError` into one ``error:`` line and exit status 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return main(argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
