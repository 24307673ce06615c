"""Input schemas (pydantic v2) and strict parsers: every file a user or another process hands us is
checked here before any reader uses it. See :mod:`planner.schema.base` for the error format."""
from planner.schema.base import (MAX_BATCH, MAX_DEPTH, MAX_GPUS, MAX_LAYERS, Strict, parse_by_suffix,
                                 parse_json, parse_yaml, validate)

__all__ = ["MAX_BATCH", "MAX_DEPTH", "MAX_GPUS", "MAX_LAYERS", "Strict", "parse_by_suffix", "parse_json",
           "parse_yaml", "validate"]
