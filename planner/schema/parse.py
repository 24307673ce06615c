"""Strict readers of input text, with no pydantic: every file a user or another process hands us is parsed here.

Contract: :func:`parse_json` and :func:`parse_yaml` turn text into plain data or raise one
:class:`~planner.errors.InputError` (duplicate keys, ``NaN``/``Infinity``, YAML aliases, nesting deeper
than :data:`MAX_DEPTH`, integers longer than Python's digit limit). The limits (``MAX_*``) the schemas share
live here too. In a module of its own so that a process that reads files whose schema it does not check with
pydantic (the Sailor data folder) or checks another way first (:mod:`planner.schema.quick`) never imports
pydantic; :mod:`planner.schema.base` re-exports every name.
"""
from __future__ import annotations

import json
import math
from itertools import accumulate
from typing import Any

from planner.errors import InputError, quote

MAX_DEPTH = 64                 # nesting of any input file (plans need 5)
MAX_GPUS = 1_000_000           # GPUs per pool, per plan and in a whole cluster
MAX_LAYERS = 100_000
MAX_BATCH = 10_000_000         # sequences per global batch
MAX_NAME_CHARS = 200
MAX_TEXT_CHARS = 10_000        # free text (a machine name, a note)


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



def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
