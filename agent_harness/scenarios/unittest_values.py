"""What the unittest guard's hook judges assertions with: which values are plain data, and the
comparisons themselves. The first part of the runner's `-c` source (verdict.runner_source; the
design is in unittest_runner.py's docstring).

Each function takes every name it uses as a default argument (a tuple no one can change in place;
replacing it is an audited event), so rebinding a name in this module's namespace, which is the
runner's `__main__` and within reach of the code under test, changes nothing for the hook, which
keeps its own references to these functions. None of them calls a method of an object that is not
plain data: the hook calls them while it is busy, when its own events are not seen.
"""

from __future__ import annotations

import array
import collections
import datetime
import decimal
import types
import unittest
from typing import Any

MAX_DEPTH = 100
MAX_NODES = 1_000_000
IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a C type whose methods cannot be replaced
_LEAVES = (type(None), bool, int, float, complex, str, bytes, range, datetime.date, datetime.datetime,
           datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal)
# Only C types: the pure-Python fallbacks of datetime and decimal could be patched.
LEAVES = frozenset(t for t in _LEAVES if t.__flags__ & IMMUTABLE)
CONTAINERS = frozenset((list, tuple, set, frozenset, dict))
# C types whose truth comes from their own C data, whatever they hold (weakref.proxy or
# MappingProxyType, also C types, ask a Python object and are not among them)
SIZED = frozenset((collections.deque, array.array, bytearray, memoryview, type({}.keys()), type({}.values()),
                   type({}.items())))
NUMBERS = frozenset((int, float))
# assertion -> positions (after self) of the operands that must be plain data, and the comparison
COMPARED: dict[str, tuple[tuple[int, ...], str]] = {
    **{name: ((0, 1), "eq") for name in ("assertEqual", "assertListEqual", "assertTupleEqual", "assertDictEqual",
                                         "assertSetEqual", "assertMultiLineEqual")},
    "assertSequenceEqual": ((0, 1), "seq"),  # equal item by item, whatever the two sequence types
    "assertNotEqual": ((0, 1), "ne"), "assertAlmostEqual": ((0, 1), "almost"),
    "assertNotAlmostEqual": ((0, 1), "not_almost"), "assertCountEqual": ((0, 1), "count"),
    "assertGreater": ((0, 1), "gt"), "assertGreaterEqual": ((0, 1), "ge"), "assertLess": ((0, 1), "lt"),
    "assertLessEqual": ((0, 1), "le"), "assertTrue": ((0,), "true"), "assertFalse": ((0,), "false"),
    "assertIn": ((0,), "in"), "assertNotIn": ((0,), "not_in"),
}
_MRO = type.__dict__["__mro__"].__get__
_CLS_DICT = type.__dict__["__dict__"].__get__
_MODULE_OF = type.__dict__["__module__"].__get__  # C types keep it in their name, not their dict
_QUALNAME_OF = type.__dict__["__qualname__"].__get__
_CASE_DICT = vars(unittest.TestCase)["__dict__"].__get__  # a TestCase's own dict, whatever its class says


def value_label(v: Any, _type: Any = type, _function: Any = types.FunctionType, _mro: Any = _MRO,
                _module_of: Any = _MODULE_OF, _qualname_of: Any = _QUALNAME_OF, _str: Any = str,
                _meta: Any = type) -> str:
    """`module.name` of a function or class, else `a module.Class object`, read without running any
    code of the object's."""
    def text(x: Any) -> str:
        return x if _type(x) is _str else "?"

    if _type(v) is _function:
        return f"{text(v.__module__)}.{text(v.__qualname__)}"
    is_class = False
    for k in _mro(_type(v)):
        is_class = is_class or k is _meta
    cls = v if is_class else _type(v)
    name = f"{text(_module_of(cls))}.{text(_qualname_of(cls))}"
    return name if is_class else f"a {name} object"


def value_truthful(t: Any, _sized: Any = SIZED, _immutable: int = IMMUTABLE, _mro: Any = _MRO,
                   _cls_dict: Any = _CLS_DICT) -> bool:
    """Whether the truth of a `t` object is decided by C code on its own data: a C type (its methods
    cannot be replaced) that has no `__bool__` or `__len__` (always true), or one of SIZED."""
    if not t.__flags__ & _immutable:
        return False
    if t in _sized:
        return True
    for k in _mro(t):  # noqa: SIM110 (all() would be a name read at run time)
        if "__bool__" in _cls_dict(k) or "__len__" in _cls_dict(k):
            return False
    return True


def value_not_plain(value: Any, truth: bool = False, _type: Any = type, _leaves: Any = LEAVES,
                    _containers: Any = CONTAINERS, _truthful: Any = value_truthful, _label: Any = value_label,
                    _limits: tuple[int, int] = (MAX_NODES, MAX_DEPTH), _meta: Any = type,
                    _dict: Any = dict) -> str | None:
    """Why `value` is not plain data (the type found, or the bound passed); None when it is. For a truth
    test (`truth`), a C-type object whose truth C code decides from its own data will also do."""
    count = 0
    todo = [(value, 0)]
    while todo:
        v, depth = todo.pop()
        count += 1
        if count > _limits[0] or depth > _limits[1]:
            return f"a value too large or too deep to check (over {_limits[0]} parts or {_limits[1]} levels)"
        t = _type(v)
        if _type(t) is _meta and (t in _leaves or (truth and depth == 0 and _truthful(t))):
            continue
        if _type(t) is not _meta or t not in _containers:
            return _label(v)[:120]
        if t is _dict:
            for kv in v.items():
                todo.append((kv[0], depth + 1))
                todo.append((kv[1], depth + 1))
        else:
            for x in v:
                todo.append((x, depth + 1))
    return None


def value_count_equal(a: Any, b: Any, _list: Any = list, _len: Any = len, _range: Any = range,
                      _TypeError: Any = TypeError) -> bool:
    """assertCountEqual's question on plain data: the same items, as many times each."""
    a, b = _list(a), _list(b)
    if _len(a) != _len(b):
        return False
    try:
        ca: dict[Any, int] = {}
        cb: dict[Any, int] = {}
        for x in a:
            ca[x] = ca.get(x, 0) + 1
        for x in b:
            cb[x] = cb.get(x, 0) + 1
        return ca == cb
    except _TypeError:  # unhashable items: pair them off
        rest = _list(b)
        for x in a:
            for i in _range(_len(rest)):
                if rest[i] == x:
                    del rest[i]
                    break
            else:
                return False
        return not rest


def value_own_equality(case: Any, t: Any, _case_dict: Any = _CASE_DICT,
                       _type: Any = type, _TypeError: Any = TypeError, _dict: Any = dict, _str: Any = str) -> bool:
    """Whether the test `case` registered an equality function of its own for type `t` (read without
    hashing anything of the test's)."""
    try:
        funcs = _case_dict(case).get("_type_equality_funcs")
    except _TypeError:
        return False
    if _type(funcs) is not _dict:
        return False
    for k, f in funcs.items():  # noqa: SIM110 (any() would be a name read at run time)
        if k is t and _type(f) is not _str:
            return True
    return False


def value_holds(kind: str, values: tuple[Any, ...], case: Any, _type: Any = type, _len: Any = len,
                _range: Any = range, _abs: Any = abs, _round: Any = round, _bool: Any = bool,
                _numbers: Any = NUMBERS, _containers: Any = CONTAINERS, _not_plain: Any = value_not_plain,
                _count_equal: Any = value_count_equal, _own_equality: Any = value_own_equality,
                _Exception: Any = BaseException, _int: Any = int) -> bool | None:
    """The hook's own verdict on a comparison of plain data (`values`: the assertion's arguments after
    self, in order); None: leave it to unittest."""
    a: Any = values[0]
    b: Any = values[1] if _len(values) > 1 else None
    try:
        if kind == "eq":
            return None if _type(a) is _type(b) and _own_equality(case, _type(a)) else a == b
        if kind == "seq":
            if a == b:
                return True
            if _len(a) != _len(b):
                return False
            for i in _range(_len(a)):  # noqa: SIM110 (all() would be a name read at run time)
                if a[i] != b[i]:
                    return False
            return True
        if kind == "ne":
            return a != b
        if kind in ("almost", "not_almost"):
            places, delta = values[2], values[4]
            if not (places is None or _type(places) is _int) or not (delta is None or _type(delta) in _numbers):
                return None
            if a == b:
                near = True
            elif delta is not None:
                near = _abs(a - b) <= delta
            else:
                near = _round(_abs(b - a), 7 if places is None else places) == 0
            return near if kind == "almost" else (a != b and not near)
        if kind == "count":
            return _count_equal(a, b)
        if kind in ("gt", "ge", "lt", "le"):
            return a > b if kind == "gt" else a >= b if kind == "ge" else a < b if kind == "lt" else a <= b
        if kind in ("true", "false"):
            return _bool(a) is (kind == "true")
        if kind in ("in", "not_in") and _type(b) in _containers and not _not_plain(b):
            return (a in b) is (kind == "in")
    except _Exception:
        return None
    return None
