"""Strict readers and the one-line error format shared by every input file.

Contract: :func:`parse_json` and :func:`parse_yaml` turn text into plain data or raise one
:class:`~planner.errors.InputError` (duplicate keys, ``NaN``/``Infinity``, YAML aliases, nesting deeper
than :data:`MAX_DEPTH`, integers longer than Python's digit limit); :func:`validate` checks parsed data
against a pydantic model and reports the first problem as ``<file>: <where>: field '<name>' <rule>, got
<value>``; :func:`quote` is the one place that shortens a value quoted in any error (:data:`QUOTE_CHARS`).
"""
from __future__ import annotations

import json
import math
from itertools import accumulate
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import InputError, quote

MAX_DEPTH = 64                 # nesting of any input file (plans need 5)
MAX_GPUS = 1_000_000           # GPUs per pool, per plan and in a whole cluster
MAX_LAYERS = 100_000
MAX_BATCH = 10_000_000         # sequences per global batch
MAX_NAME_CHARS = 200

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
Text = Annotated[str, Field(strict=True, max_length=10_000)]


def _depth(obj: Any, limit: int) -> int:
    """Nesting depth of parsed data, iterative (never recurses), stops counting past ``limit``."""
    stack = [(obj, 1)]
    deepest = 0
    while stack:
        cur, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(cur, dict):
            stack.extend((v, d + 1) for v in cur.values())
        elif isinstance(cur, list):
            stack.extend((v, d + 1) for v in cur)
    return deepest


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):              # a key repeats: name the first repeat, in file order
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise InputError(f"duplicate key {quote(k)} in one JSON object")
            seen.add(k)
    return out


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"number {quote(text)} is out of range (not finite)")
    return value


# per byte: +1 opens, -1 closes, 0 anything else (read-only)
_DEPTH_STEP = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_DIGITS_AS_0 = bytes.maketrans(b"123456789E", b"000000000e")
_LONG_DIGITS = b"0" * 200


def _may_overflow(raw: bytes) -> bool:
    """Whether a float literal in the UTF-8 text ``raw`` could round to infinity: only with a positive
    exponent of 3+ digits or a run of 200+ digits (else it is below 10**200 * 10**99). Conservative: strings
    count too. Where it is False every float is finite and needs no per-float check."""
    flat = raw.translate(_DIGITS_AS_0)
    return b"e000" in flat or b"e+000" in flat or _LONG_DIGITS in flat


def _shallow_enough(text: str, source: str | None, raw: bytes | None = None) -> None:
    """Refuse text whose brackets (``[`` ``{`` open, ``]`` ``}`` close, inside strings too) nest deeper than
    MAX_DEPTH at any point: the running count over the brackets alone (UTF-8 never encodes a non-ASCII
    character with an ASCII byte), in C via translate/accumulate. ``raw``: ``text`` encoded, if at hand."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    raw = _utf8(text) if raw is None else raw
    if max(accumulate(map(_DEPTH_STEP.__getitem__, raw.translate(None, _NOT_BRACKET))), default=0) > MAX_DEPTH:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def parse_json(text: str, source: str | None = None) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity, no absurd nesting or integer length."""
    raw = _utf8(text)
    _shallow_enough(text, source, raw)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                          parse_float=_finite_float if _may_overflow(raw) else float)
    except InputError as exc:
        raise exc.with_source(source) if source else exc from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                         source=source) from None
    except (ValueError, RecursionError) as exc:   # e.g. an integer of more than 4300 digits
        raise InputError(f"not valid JSON ({quote(str(exc))})", source=source) from None


def _yaml_loader() -> type:
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        """SafeLoader that refuses aliases (``*name``): no billion-laughs expansion."""

        def compose_node(self, parent, index):  # noqa: ANN001, ANN201
            if self.check_event(yaml.events.AliasEvent):
                mark = self.peek_event().start_mark
                raise InputError(f"YAML alias at line {mark.line + 1} is not allowed (anchors/aliases are refused)")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201
            keys = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in keys:
                    raise InputError(f"duplicate key {quote(key)} at line {key_node.start_mark.line + 1}")
                keys.add(key)
            return super().construct_mapping(node, deep=deep)

    return NoAliasLoader


def parse_yaml(text: str, source: str | None = None) -> Any:
    """Safe YAML without aliases or duplicate keys; floats must be finite (checked by the schema)."""
    import yaml
    _shallow_enough(text, source)
    try:
        data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - SafeLoader subclass
    except InputError as exc:
        raise exc.with_source(source) if source else exc from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise InputError(f"cannot parse YAML ({quote(reason)})", source=source) from None
    if _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise InputError(f"nested deeper than {MAX_DEPTH} levels", source=source)
    return data


def parse_by_suffix(text: str, source: str) -> Any:
    """YAML for ``.yaml``/``.yml``, JSON otherwise."""
    if source.endswith((".yaml", ".yml")):
        return parse_yaml(text, source)
    return parse_json(text, source)


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


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
