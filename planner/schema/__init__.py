"""Input schemas (pydantic v2) and strict parsers: every file a user or another process hands us is
checked here before any reader uses it. See :mod:`planner.schema.base` for the error format.

The readers and limits come from :mod:`planner.schema.parse` (no pydantic); ``Strict`` and ``validate`` load
:mod:`planner.schema.base` (and pydantic) on first use, so importing any ``planner.schema`` module costs no
pydantic import unless that module needs it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from planner.lazy import lazy_exports
from planner.schema.parse import MAX_BATCH, MAX_DEPTH, MAX_GPUS, MAX_LAYERS, parse_by_suffix, parse_json, parse_yaml

if TYPE_CHECKING:
    from planner.schema.base import Strict, validate  # noqa: F401

__getattr__, __dir__ = lazy_exports(__name__, "planner.schema", {"Strict": "base", "validate": "base"}, globals())

__all__ = ["MAX_BATCH", "MAX_DEPTH", "MAX_GPUS", "MAX_LAYERS", "Strict", "parse_by_suffix", "parse_json",
           "parse_yaml", "validate"]
