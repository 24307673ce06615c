"""A pydantic-free pre-check that recognises input documents which plainly meet their schema.

Contract: ``plainly_valid_runtime_constants(data)`` is True only for parsed data that
:class:`planner.schema.runtime_constants_file.RuntimeConstantsFile` accepts, and then the document's values are
the ones the schema would give (numbers as given, converted with ``float``/``int`` by the reader). It may answer
False for a valid document (an unusual one: a huge integer, a string that is not valid UTF-8); the caller then
validates with pydantic, which gives the verdict and, for a bad file, the one-line error. So the rules and the
messages stay pydantic's, and a process whose constants file is in order never imports pydantic (importing it
and building this one schema took about 0.08 s of every ``sailor-plan`` / ``sailor-sim`` start).

Each check below mirrors one annotated type of :mod:`planner.schema.base` (strict: no bool for a number, no
string for a number; floats finite). ``tests/planner/test_quick_schema.py`` checks the contract against pydantic
on generated documents, so a change to the schema that this module does not follow fails there.
"""
from __future__ import annotations

import math
from typing import Any

from planner.schema.parse import MAX_GPUS, MAX_NAME_CHARS, MAX_TEXT_CHARS

RUNTIME_CONSTANTS_FORMAT = "megatron-sailor-runtime-constants/1"
_EXACT_INT = 2 ** 53           # ints beyond this are left to pydantic (float conversion would round)
_CONTROL = frozenset(map(chr, [*range(0x20), 0x7F]))


def _number(v: Any, low: float | None = None, high: float | None = None, above: float | None = None) -> bool:
    """A strict finite float field (``Number``/``NonNeg``/``Positive``): an int or a float, never a bool."""
    t = type(v)
    if t is float:
        if not math.isfinite(v):
            return False
    elif t is int:
        if not -_EXACT_INT <= v <= _EXACT_INT:
            return False
    else:
        return False
    return (low is None or v >= low) and (high is None or v <= high) and (above is None or v > above)


def _int(v: Any, low: int, high: int) -> bool:
    return type(v) is int and low <= v <= high


def _utf8(v: str) -> bool:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:        # a lone surrogate
        return False
    return True


def _text(v: Any) -> bool:
    """``Text``: a string of at most MAX_TEXT_CHARS characters."""
    return type(v) is str and len(v) <= MAX_TEXT_CHARS and _utf8(v)


def _name(v: Any) -> bool:
    """``Name``: 1..MAX_NAME_CHARS characters, none a control character."""
    return type(v) is str and 1 <= len(v) <= MAX_NAME_CHARS and _CONTROL.isdisjoint(v) and _utf8(v)


def _keys(d: Any, required: frozenset[str], optional: frozenset[str]) -> bool:
    """A plain dict (``extra="forbid"``) holding every required key and no other than the optional ones."""
    return type(d) is dict and required <= d.keys() and d.keys() <= required | optional


_RC_REQUIRED = frozenset({"format", "machine", "measured_by", "measured_at", "per_microbatch_overhead_s",
                          "memory_overhead_bytes", "activation_reserve_factor"})
_RC_OPTIONAL = frozenset({"load_average", "core_share", "sharded_collective_scale", "notes"})
_CORE_SHARE = frozenset({"cores", "ranks_per_core_slowdown"})


def _core_share(v: Any) -> bool:
    if not _keys(v, _CORE_SHARE, frozenset()) or not _int(v["cores"], 1, MAX_GPUS):
        return False
    rows = v["ranks_per_core_slowdown"]
    return type(rows) is list and 1 <= len(rows) <= 1000 and all(
        type(r) is list and len(r) == 2 and _number(r[0], above=0) and _number(r[1], above=0) for r in rows)


def plainly_valid_runtime_constants(data: Any) -> bool:
    """True only if ``RuntimeConstantsFile`` accepts ``data`` (see the module's contract)."""
    if not _keys(data, _RC_REQUIRED, _RC_OPTIONAL):
        return False
    get = data.get
    notes = get("notes")
    return (type(data["format"]) is str and data["format"] == RUNTIME_CONSTANTS_FORMAT
            and _text(data["machine"]) and _text(data["measured_by"]) and _text(data["measured_at"])
            and (get("load_average") is None or _number(data["load_average"], low=0))
            and _number(data["per_microbatch_overhead_s"], low=0) and _number(data["memory_overhead_bytes"], low=0)
            and _number(data["activation_reserve_factor"], low=1.0)
            and (get("core_share") is None or _core_share(data["core_share"]))
            and (get("sharded_collective_scale") is None
                 or _number(data["sharded_collective_scale"], low=1.0, high=1000.0))
            and (notes is None or (type(notes) is dict and all(_name(k) and _text(t) for k, t in notes.items()))))
