"""Values between the checker and the worker: each message's values in one flat table.

A value in a message is a *slot*: a JSON scalar (None, bool, an int that fits in 64 bits, a float,
a str) stands for itself; a one-item list ``[i]`` stands for entry ``i`` of the message's table of
objects. Entries are tagged lists (``["l", [slots], lent]``, ``["d", [k, v, ...]]``, ...) and refer
to each other only through slots, so a graph with cycles or a list 100,000 deep encodes without
recursion (`Encoder`) and decodes in two passes, shells first, then their contents (decode.py).

Three ways an object crosses:
- by value: built-in data and the standard library's value types (Fraction, Decimal, datetime
  values, namedtuples, ...), rebuilt by the receiver from plain parts with its own constructors;
- lent: a mutable container (list, dict, set, bytearray, deque, defaultdict, Counter, OrderedDict)
  is a copy the receiver keeps under the sender's id; when the receiver answers a request, the
  answer carries what it did to the containers it was lent while serving it, and the owner writes
  that into its own objects. So a list sorted in place is sorted for the test, a node's list of
  children appended to is appended to, and a copy sent back (``return lst``) arrives as the owner's
  own object (``is`` holds);
- by reference: everything else stays with its owner, and the other side holds a proxy whose every
  use is a request to the owner. Each side decides which of its objects may go out this way and
  what requests on them may do (`Side.export_entry`, `Side.handle` in the checker and the worker).
"""

from __future__ import annotations

import builtins
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .wire import Side

MAX_MESSAGE = 48 << 20  # bytes of one message
MAX_ENTRIES = 2_000_000  # objects in one message's table
MAX_REASON = 300
MALFORMED = "the code under test wrote a malformed reply on the checker's channel"
# Each call across the boundary costs a few frames on both sides: recursion that crosses at every level
# reaches about as deep as in one process.
RECURSION_LIMIT = 10_000
_INT_LIMIT = 1 << 63
PATHS = ("PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath", "WindowsPath")


class Malformed(Exception):
    """A message or value that is not one this protocol makes."""


class Refused(Exception):
    """A value the receiver cannot rebuild faithfully, from honest code: a plain failure, never a flag."""


def type_name(cls: type) -> str:
    mod, name = getattr(cls, "__module__", "?"), getattr(cls, "__qualname__", "?")
    return (f"{mod}.{name}" if isinstance(mod, str) and isinstance(name, str) else "?")[:80]


def is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


# Special attributes that hold data only (names, a docstring, what a decorator wrapped): readable across.
READABLE_DUNDERS = frozenset({"__name__", "__qualname__", "__module__", "__doc__", "__wrapped__", "__dict__"})


# ---------------------------------------------------------------------------------------------
# Standard-library value types: known by exact type, imported only when a value needs them
# ---------------------------------------------------------------------------------------------


def _stdlib_type(module: str, name: str) -> type | None:
    mod = sys.modules.get(module)
    t = getattr(mod, name, None) if mod is not None else None
    return t if isinstance(t, type) else None


def import_type(module: str, name: str) -> type:
    mod = __import__(module, fromlist=[name])
    t = getattr(mod, name)
    assert isinstance(t, type)
    return t


def is_namedtuple_class(cls: type) -> bool:
    fields = cls.__dict__.get("_fields") if tuple in cls.__bases__ else None
    return type(fields) is tuple and all(type(f) is str for f in fields)


# Standard modules a receiver never imports to find a class by name (they act when imported).
_UNSAFE_IMPORTS = frozenset({"antigravity", "this", "turtle", "turtledemo", "tkinter", "idlelib", "__hello__",
                             "__phello__", "webbrowser", "pydoc", "ensurepip", "venv", "lib2to3", "test"})


def stdlib_object(module: str, qualname: str) -> Any:
    """`module.qualname` when `module` belongs to the standard library (imported if need be); else None."""
    top = module.split(".")[0]
    if module == "builtins":
        return getattr(builtins, qualname, None)
    if top not in sys.stdlib_module_names or top in _UNSAFE_IMPORTS:
        return None
    try:
        obj: Any = sys.modules.get(module) or __import__(module, fromlist=["_"])
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj


# Standard modules whose functions and classes cross by name (the receiver uses its own, so `is` holds):
# pure ones, whose objects compute values and touch nothing outside.
BY_NAME = frozenset({"operator", "math", "cmath", "functools", "itertools", "string", "datetime", "decimal",
                     "fractions", "collections", "statistics", "re", "json", "heapq", "bisect", "enum", "dataclasses",
                     "typing", "numbers", "uuid", "pathlib", "ipaddress", "calendar", "textwrap", "unicodedata", "copy",
                     "random", "types", "abc", "zoneinfo", "array"})


def _by_name(v: Any) -> list[Any] | None:
    """``["std", module, qualname]`` for a function or class of a BY_NAME module that resolves back to `v`."""
    if not callable(v):
        return None
    mod, qual = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qual, str) or mod.lstrip("_").split(".")[0] not in BY_NAME:
        return None
    public = mod.lstrip("_") if mod.startswith("_") else mod  # _operator.add is operator.add
    for name in (mod, public):
        if stdlib_object(name, qual) is v:
            return ["std", name, qual]
    return None


def _namedtuple_class(value: Any) -> type | None:
    """The namedtuple class (made by collections.namedtuple) `value` is an instance of, or None."""
    for cls in type(value).__mro__:
        if is_namedtuple_class(cls):
            return cls
    return None


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


class Encoder:
    """Builds one message's table. `lend`: mutable containers go out as lent copies (requests only)."""

    def __init__(self, side: Side, lend: bool) -> None:
        self.side, self.lend = side, lend
        self.objs: list[Any] = []
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # the encoded objects stay alive while ids name them
        self.pending: list[tuple[Any, int, bool]] = []
        self.mentioned: dict[int, Any] = {}  # the receiver's lent containers we refer to: their news goes along

    def encode(self, value: Any) -> Any:
        root = self.slot(value)
        self.drain()
        return root

    def drain(self) -> None:
        while self.pending:
            obj, index, contents_only = self.pending.pop()
            self.objs[index] = self.contents(obj) if contents_only else self.entry(obj)

    def slot(self, v: Any) -> Any:
        t = type(v)
        if v is None or t is bool or t is str or (t is float and v == v):
            return v
        if t is int and -_INT_LIMIT <= v < _INT_LIMIT:
            return v
        key = id(v)
        if key in self.memo:
            return [self.memo[key]]
        return [self._allocate(v, key, False)]

    def _allocate(self, v: Any, key: int | None, contents_only: bool) -> int:
        if len(self.objs) >= MAX_ENTRIES:
            raise OverflowError(f"a value of more than {MAX_ENTRIES} objects")
        index = len(self.objs)
        self.objs.append(None)
        if key is not None:
            self.memo[key] = index
        self.keep.append(v)
        self.pending.append((v, index, contents_only))
        return index

    def contents_slot(self, container: Any) -> list[int]:
        """A slot for a fresh copy of a container's items (news of a lent container)."""
        index = self._allocate(container, None, True)
        self.drain()
        return [index]

    def news(self, mine: dict[int, Any], yours: dict[int, Any]) -> list[Any]:
        """``[which, id, slot]`` for our lent containers the receiver holds copies of (`mine`: it refreshes
        them) and its containers we hold copies of (`yours`, and every one we mention: it writes them in)."""
        out: list[Any] = [["mine", ref, self.contents_slot(own)] for ref, own in mine.items()]
        done: set[int] = set()
        while True:
            todo = {**yours, **self.mentioned}
            fresh = [ref for ref in todo if ref not in done]
            if not fresh:
                return out
            for ref in fresh:
                done.add(ref)
                out.append(["yours", ref, self.contents_slot(todo[ref])])

    def items(self, values: Any) -> list[Any]:
        return [self.slot(x) for x in values]

    def pairs(self, mapping: Any) -> list[Any]:
        out: list[Any] = []
        for k, x in mapping.items():
            out.append(self.slot(k))
            out.append(self.slot(x))
        return out

    def entry(self, v: Any) -> list[Any]:
        side, t = self.side, type(v)
        ref = side.peer_ref(v)
        if ref is not None:  # the receiver's own object, or the copy of one it lent us
            if side.borrowed.get(ref) is v and (t in (list, dict, set, bytearray) or t in side.collections_types()):
                self.mentioned[ref] = v
            return ["R", ref]
        if t is int:
            return ["i", format(v, "x")]
        if t is float:  # a NaN: it keeps its identity (`[nan] == [nan]` holds only for the same object)
            return ["nan", side.export(v, "value")]
        if t in (list, dict, set, bytearray) or t in side.collections_types():
            lent = side.lend(v) if self.lend else None
            return [*self.contents(v), lent]
        if t is tuple:
            return ["t", self.items(v)]
        if t is frozenset:
            return ["F", self.items(v)]
        if t is bytes:
            return ["y", v.hex()]
        if t is complex:
            return ["c", v.real, v.imag]
        if t is range:
            return ["r", self.slot(v.start), self.slot(v.stop), self.slot(v.step)]
        if t is slice:
            return ["sl", self.slot(v.start), self.slot(v.stop), self.slot(v.step)]
        if v is Ellipsis:
            return ["..."]
        if v is NotImplemented:
            return ["NI"]
        value_entry = self.value_type_entry(v) or self.library_value_entry(v)
        if value_entry is not None:
            return value_entry
        if isinstance(v, BaseException):
            return self.exception_entry(v)
        enum = sys.modules.get("enum")
        if enum is not None and issubclass(t, enum.Enum):
            side.note_class(t)
            members = [[str(m.name), self.slot(m.value)] for m in list(t.__members__.values())[:1000]]
            kind = next((b.__name__ for b in (int, str) if issubclass(t, b)), "")
            return ["en", t.__name__, str(t.__module__), str(v.name), self.slot(side.base_value(v)), side.overrides(t),
                    [kind, members], side.export(v, "obj")]
        if isinstance(v, tuple) and _namedtuple_class(v) is t:
            side.note_class(t)
            return ["nt", t.__name__, list(getattr(t, "_fields", ())), self.items(v), str(t.__module__)]
        by_name = _by_name(v)
        if by_name is not None:
            return by_name
        name = getattr(v, "__name__", "")
        if (t is type or t is type(len)) and isinstance(name, str) and getattr(builtins, name, None) is v:
            return ["bi", name]  # a built-in function or type: the receiver uses its own
        return side.export_entry(self, v)

    def contents(self, v: Any) -> list[Any]:
        t = type(v)
        if t is list:
            return ["l", self.items(v)]
        if t is set:
            return ["S", self.items(v)]
        if t is dict:
            return ["d", self.pairs(v)]
        if t is bytearray:
            return ["Y", v.hex()]
        name = t.__name__
        if name == "deque":
            return ["dq", self.items(v), v.maxlen]
        if name == "defaultdict":
            return ["dd", self.pairs(v), self.slot(v.default_factory)]
        if name == "Counter":
            return ["C", self.pairs(v)]
        return ["od", self.pairs(v)]

    def value_type_entry(self, v: Any) -> list[Any] | None:
        t = type(v)
        if t is _stdlib_type("fractions", "Fraction"):
            return ["fr", self.slot(v.numerator), self.slot(v.denominator)]
        if t is _stdlib_type("decimal", "Decimal"):
            return ["dec", str(v)]
        mod = sys.modules.get("datetime")
        if mod is None or t.__module__ != "datetime":
            return None
        if t is mod.datetime:
            return ["dt", [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond],
                    self.slot(v.tzinfo), v.fold]
        if t is mod.date:
            return ["date", v.year, v.month, v.day]
        if t is mod.time:
            return ["time", [v.hour, v.minute, v.second, v.microsecond], self.slot(v.tzinfo), v.fold]
        if t is mod.timedelta:
            return ["td", v.days, v.seconds, v.microseconds]
        if t is mod.timezone:
            return ["tz", self.slot(v.utcoffset(None)), self.slot(v.tzname(None))]
        return None

    def library_value_entry(self, v: Any) -> list[Any] | None:
        """Other standard-library values, rebuilt from plain parts: UUID, pure and concrete paths,
        SimpleNamespace, array."""
        t = type(v)
        if t is _stdlib_type("uuid", "UUID"):
            return ["uuid", format(v.int, "x")]
        if t.__module__ == "pathlib" and t.__name__ in PATHS:
            return ["path", t.__name__, str(v)]
        if t is _stdlib_type("types", "SimpleNamespace"):
            return ["ns", self.pairs(vars(v))]
        if t is _stdlib_type("array", "array"):
            return ["arr", v.typecode, self.items(v.tolist())]
        return None

    def exception_entry(self, e: BaseException) -> list[Any]:
        mro = [[str(getattr(k, "__module__", "?")), str(getattr(k, "__qualname__", "?"))]
               for k in type(e).__mro__ if k is not object]
        state = getattr(e, "__dict__", None)
        pairs: list[Any] = []
        if type(state) is dict:
            for k, x in list(state.items())[:50]:
                if type(k) is str and not k.startswith("__"):
                    try:
                        pairs += [k, self.slot(x)]
                    except Exception:
                        continue
        try:
            text: Any = str(e)[:2000]
        except Exception:
            text = None
        cause = e.__cause__ if isinstance(e.__cause__, BaseException) else None
        return ["E", mro, self.items(e.args), pairs, text, self.side.export(e, "exc"), self.slot(cause)]


