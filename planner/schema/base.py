"""Schema validation and the one-line error format shared by every input file.

Contract: :func:`validate` checks parsed data against a pydantic model and reports the first problem as
``<file>: <where>: field '<name>' <rule>, got <value>``; :func:`~planner.errors.quote` is the one place that
shortens a value quoted in any error (:data:`~planner.errors.QUOTE_CHARS`). The strict readers
(:func:`parse_json`, :func:`parse_yaml`, :func:`parse_by_suffix`) and the limits (``MAX_*``) live in
:mod:`planner.schema.parse`, which imports no pydantic; they are re-exported here.
"""
from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import InputError, quote
from planner.schema.parse import (MAX_BATCH, MAX_DEPTH, MAX_GPUS, MAX_LAYERS, MAX_NAME_CHARS,  # noqa: F401
                                  MAX_TEXT_CHARS, _no_constant, _no_duplicates, finite, parse_by_suffix, parse_json, parse_yaml)


M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base of every input schema: unknown keys and non-finite floats are refused; scalar fields use the
    strict types below (no "4" for 4, no true for 1, no 4.9 for an integer); lists may stand for tuples."""

    # defer_build: a schema's validator is built on its first validation, so a process pays only for the file
    # kinds it reads (building all of them took about 0.1 s at every start); the rules are the same
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, defer_build=True)


Int = Annotated[int, Field(strict=True)]
Count = Annotated[int, Field(strict=True, ge=0, le=MAX_GPUS)]           # GPUs in a pool (may be 0)
PosCount = Annotated[int, Field(strict=True, ge=1, le=MAX_GPUS)]        # GPUs per node, TP, replicas
Layers = Annotated[int, Field(strict=True, ge=0, le=MAX_LAYERS)]
Batch = Annotated[int, Field(strict=True, ge=1, le=MAX_BATCH)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]      # ints accepted, finite
NonNeg = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
Bool = Annotated[bool, Field(strict=True)]
Name = Annotated[str, Field(strict=True, min_length=1, max_length=MAX_NAME_CHARS,
                            pattern=r"^[^\x00-\x1f\x7f]+$")]                # no control characters
Text = Annotated[str, Field(strict=True, max_length=MAX_TEXT_CHARS)]


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_RULES = {
    "greater_than_equal": lambda c: f"must be >= {c.get('ge')}",
    "greater_than": lambda c: f"must be > {c.get('gt')}",
    "less_than_equal": lambda c: f"must be <= {c.get('le')}",
    "less_than": lambda c: f"must be < {c.get('lt')}",
    "int_type": lambda c: "must be an integer",
    "int_from_float": lambda c: "must be an integer",
    "int_parsing": lambda c: "must be an integer",
    "float_parsing": lambda c: "must be a number",
    "bool_parsing": lambda c: "must be true or false",
    "float_type": lambda c: "must be a number",
    "finite_number": lambda c: "must be a finite number",
    "string_type": lambda c: "must be a string",
    "bool_type": lambda c: "must be true or false",
    "list_type": lambda c: "must be a list",
    "tuple_type": lambda c: "must be a list",
    "dict_type": lambda c: "must be an object",
    "model_type": lambda c: "must be an object",
    "model_attributes_type": lambda c: "must be an object",
    "string_too_short": lambda c: "must be a non-empty string",
    "string_too_long": lambda c: f"must be at most {c.get('max_length')} characters",
    "too_short": lambda c: "must be a non-empty list" if c.get("min_length") == 1
    else f"must list at least {c.get('min_length')} items",
    "too_long": lambda c: f"must list at most {c.get('max_length')} item(s)",
    "string_pattern_mismatch": lambda c: "must be text without control characters"
    if "x00" in str(c.get("pattern")) else f"must match {c.get('pattern')}",
    "none_required": lambda c: "must be null",
}


def _describe(err: dict[str, Any]) -> str:
    loc, kind, ctx = tuple(err.get("loc", ())), err.get("type", ""), err.get("ctx") or {}
    # pydantic appends the union member / function name to loc; drop non-field parts
    loc = tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(("function-", "constrained-")))
    key_error = bool(loc) and loc[-1] == "[key]"
    if key_error:
        loc = loc[:-1]
    parent, leaf = _where(loc[:-1]), (loc[-1] if loc else "")
    at = f"{parent}: " if parent else ""
    if kind == "extra_forbidden":
        return f"{parent or 'the file'} has unknown key(s) [{quote(str(leaf))}]"
    if kind == "missing":
        return f"{parent or 'the file'} is missing required key(s) [{quote(str(leaf))}]"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        rule = f"must be one of [{expected}]" if " or " in str(expected) or "," in str(expected) \
            else f"must be {expected}"
    elif kind in _RULES:
        rule = _RULES[kind](ctx)
    else:
        rule = f"is invalid ({quote(str(err.get('msg', kind)))})"
    name = f"key {quote(leaf)}" if key_error else (f"field '{leaf}'" if isinstance(leaf, str) else f"item [{leaf}]")
    return f"{at}{name} {rule}, got {quote(err.get('input'))}"


def validate(model: type[M], data: Any, source: str | None = None) -> M:
    """``model`` built from ``data``, or one InputError naming the first failing field and its value."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errs = exc.errors(include_url=False)
        raise InputError(_describe(errs[0]), source=source) from None
