"""One exception type for every user-facing input problem.

CLIs catch :class:`InputError` and print ``error: <message>`` on one line with exit status 2, so every
message must name the file (when there is one), the field and the offending value.
"""
from __future__ import annotations


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
