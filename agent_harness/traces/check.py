"""A trace's values checked against the trace model before anything uses them (loader, export, report,
`--resume`): each field the model declares has its declared type (``passed: "yes"`` is refused) and
numbers lie in sane ranges, so that no count read from a file drives a loop, a plot or an int64 column
out of bounds. Keys the model does not know are let through unchecked, as the loader always did.

The checks are derived from `trace_model` (field annotations and their ``ge`` bounds), so a field added
there is checked here without more code; `COUNTERS` and `MAX_NUMBER` add the upper bounds.
`validate_trace` checks a trace against the generated JSON Schema (``trace_schema.json``) instead.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel
from typing_extensions import is_typeddict

from .files import Unreadable
from .model import LOADER_REQUIRED, READABLE_VERSIONS, STEP_FIELDS, Trace

MAX_STEPS = 1_000_000  # step indexes, turns, samples, positions: analyses loop and plot up to these
MAX_NUMBER = 10**12  # every other number (tokens, seconds): int64- and float-safe, also summed
MAX_EMBEDDING_DIM = 16_384  # longer vectors count as absent (the loader's matrix is steps × dim)
COUNTERS = frozenset({"i", "turn", "sample", "task_index", "num_steps", "num_turns", "attempt", "repeat_of"})
UNBOUNDED = frozenset({"embedding"})  # any finite float (the loader drops vectors float32 cannot hold)

Check = Callable[[Any], None]  # raises _Bad
_STEP_REQUIRED = tuple(k for k in LOADER_REQUIRED if "." not in k and k not in Trace.model_fields)
_TRACE_REQUIRED = tuple(sorted(k for k in LOADER_REQUIRED if k not in _STEP_REQUIRED))


class _Bad(Exception):
    """A value that breaks its check: the message, and the path to it (filled in on the way out)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str] = []


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _got(value: Any) -> str:
    return f"got {type(value).__name__} {_show(value)}"


def _number(kind: type, lo: float, hi: float) -> Check:
    def check(v: Any) -> None:
        if type(v) is not int and (kind is int or type(v) is not float):
            raise _Bad(f"expected {'an integer' if kind is int else 'a number'}, {_got(v)}")
        if not lo <= v <= hi:
            raise _Bad(f"{_show(v)} is out of range [{lo}, {hi}]")
    return check


def _exact(kind: type, what: str) -> Check:
    def check(v: Any) -> None:
        if type(v) is not kind:
            raise _Bad(f"expected {what}, {_got(v)}")
    return check


def _literal(allowed: frozenset[Any]) -> Check:
    def check(v: Any) -> None:
        if type(v) is not str or v not in allowed:
            raise _Bad(f"expected one of {sorted(allowed)}, {_got(v)}")
    return check


def _ge(meta: list[Any]) -> float | None:
    return next((m.ge for m in meta if getattr(m, "ge", None) is not None), None)


def _compile(tp: Any, name: str, meta: list[Any]) -> Check | None:
    """The check of a value annotated `tp` (None: anything goes). `name` picks the range of a number."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return None
    if origin in (typing.Required, typing.NotRequired):
        return _compile(typing.get_args(tp)[0], name, meta)
    if origin is Annotated:
        base, *extra = typing.get_args(tp)
        return _compile(base, name, meta + [m for e in extra for m in getattr(e, "metadata", [e])])
    if origin in (Union, types.UnionType):
        return _union(list(typing.get_args(tp)), name, meta)
    if origin is Literal:
        return _literal(frozenset(typing.get_args(tp)))
    if tp in (int, float):
        lo, hi = _ge(meta), MAX_STEPS if name in COUNTERS else math.inf if name in UNBOUNDED else MAX_NUMBER
        return _number(tp, -hi if lo is None else lo, hi)
    if tp is bool:
        return _exact(bool, "true or false")
    if tp is str:
        return _exact(str, "a string")
    if tp is dict or origin is dict:
        return _exact(dict, "an object")
    if tp is list or origin is list:
        args = typing.get_args(tp)
        return _list(_compile(args[0], name, []) if args else None)
    if is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return _object({k: _compile(t, k, []) for k, t in hints.items()})
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _object({k: _compile(f.annotation, k, list(f.metadata)) for k, f in tp.model_fields.items()})
    raise TypeError(f"trace_check: no check for {tp!r} ({name})")


def _union(options: list[Any], name: str, meta: list[Any]) -> Check | None:
    nullable = type(None) in options
    checks = [_compile(o, name, meta) for o in options if o is not type(None)]
    if any(c is None for c in checks):
        return None
    first, rest = checks[0], checks[1:]

    def check(v: Any) -> None:
        if v is None and nullable:
            return
        try:
            first(v)  # type: ignore[misc]
        except _Bad as e:
            for c in rest:
                try:
                    c(v)  # type: ignore[misc]
                    return
                except _Bad:
                    pass
            if nullable and not e.path:
                e.args = (f"{e.args[0]} (or null)",)
            raise
    return check


def _list(item: Check | None) -> Check:
    def check(v: Any) -> None:
        if type(v) is not list:
            raise _Bad(f"expected a list, {_got(v)}")
        if item is not None:
            for n, x in enumerate(v):
                try:
                    item(x)
                except _Bad as e:
                    e.path.insert(0, str(n))
                    raise
    return check


def _object(fields: dict[str, Check | None]) -> Check:
    checks = {k: c for k, c in fields.items() if c is not None}

    def check(v: Any) -> None:
        if type(v) is not dict:
            raise _Bad(f"expected an object, {_got(v)}")
        for k, x in v.items():
            c = checks.get(k)
            if c is not None:
                try:
                    c(x)
                except _Bad as e:
                    e.path.insert(0, k)
                    raise
    return check


def _embedding_or_mark(vector: Check) -> Check:
    """A step's embedding as the loader sees it: a vector, null, or the index of the array it cut out."""
    def check(v: Any) -> None:
        if type(v) is not int:
            vector(v)
    return check


@cache
def _checks(cut: bool) -> Check:
    step_checks = {k: _compile(t, k, meta) for k, (t, meta) in STEP_FIELDS.items()}  # any step type's fields
    if cut:
        emb = step_checks["embedding"]
        assert emb is not None
        step_checks["embedding"] = _embedding_or_mark(emb)
    fields = {k: _compile(f.annotation, k, list(f.metadata)) for k, f in Trace.model_fields.items() if k != "steps"}
    fields["steps"] = _list(_object(step_checks))
    return _object(fields)


def check_trace(data: Any, cut: bool = False) -> dict[str, Any]:
    """`data` if it is a trace the analyses can use; else Unreadable saying which field is wrong and how.

    `cut`: step embeddings may be the loader's integer marks (see `trace._parse`).
    """
    if not isinstance(data, dict):
        raise Unreadable(f"top level is {type(data).__name__}, not an object")
    if data.get("schema_version") not in READABLE_VERSIONS:
        raise Unreadable(f"schema_version {_show(data.get('schema_version'))} not in {READABLE_VERSIONS}")
    for path in _TRACE_REQUIRED:
        node: Any = data
        for key in path.split("."):
            if not isinstance(node, dict) or key not in node:
                raise Unreadable(f"KeyError: required field {path!r} is missing")
            node = node[key]
    try:
        _checks(cut)(data)
    except _Bad as e:
        raise Unreadable(f"{'/'.join(e.path)}: {e.args[0]}") from None
    for n, s in enumerate(data["steps"]):
        for key in _STEP_REQUIRED:
            if key not in s:
                raise Unreadable(f"KeyError: required field 'steps/{n}/{key}' is missing")
    return data


SCHEMA_PATH = Path(__file__).with_name("trace_schema.json")  # generated from trace_model


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def validate_trace(data: dict[str, Any]) -> list[str]:
    """Schema errors of one trace, as short strings (empty when valid)."""
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in _validator().iter_errors(data)]
