"""One exception type for every user-facing input problem.

CLIs catch :class:`InputError` and print ``error: <message>`` on one line with exit status 2, so every
message must name the file (when there is one), the field and the offending value; :func:`run_cli` is that
one wrapper, shared by every command-line entry (planner, profiler).
"""
from __future__ import annotations

import argparse

import logging
import sys
from typing import Any, Callable, Mapping, NoReturn

QUOTE_CHARS = 120          # longest value quoted in any error message (keeps a line under 300)
MESSAGE_CHARS = 1000       # backstop: longest error message at all


def quote(value: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters: the one way errors quote a value."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        text = f"<{type(value).__name__} of {len(value)} items>"
    else:
        try:
            text = repr(value)
        except (ValueError, RecursionError):        # e.g. an int with more digits than Python prints
            text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[:limit - 20] + f"...<{len(text)} chars>"
    return text


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A message folded to one line and cut to ``limit`` characters."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 30] + f"...<{len(text)} chars>"


class InputError(ValueError):
    """Bad user input: malformed file, unknown name, impossible constraint."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.source = source
        super().__init__(one_line(f"{source}: {message}" if source else message))

    def with_source(self, source: str) -> "InputError":
        """Return the same error prefixed by the file it came from (if not prefixed yet)."""
        if self.source is not None:
            return self
        return InputError(str(self), source=source)


def check_keys(data: Any, allowed: set[str], required: set[str], where: str) -> None:
    """Raise :class:`InputError` unless ``data`` is a mapping with only ``allowed`` keys and all ``required``."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(map(str, set(data) - allowed))
    if unknown:
        raise InputError(f"{where} has unknown key(s) {quote(unknown)}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(data))
    if missing:
        raise InputError(f"{where} is missing required key(s) {missing}")


class InternalError(RuntimeError):
    """A planner bug detected at run time (e.g. the search's evaluator disagrees with the simulator).

    CLIs print ``internal error: <message>`` on one line and exit with status 3."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors (bad value, unknown or missing flag) are one :class:`InputError` line, printed by
    :func:`run_cli` (or the CLI's own handler) as ``error: ...`` with exit status 2, instead of usage text.
    ``parse_args`` must therefore run inside that handler."""

    def error(self, message: str) -> NoReturn:
        raise InputError(message)


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; turn :class:`InputError` into one ``error:`` line and exit status 2."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return main(argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except InternalError as exc:
        print(f"internal error: {exc}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
