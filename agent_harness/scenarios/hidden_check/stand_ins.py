"""The worker's stand-ins for the checker's objects: an instance of a class the test defines, the class
itself, a function or an iterator of the test's. Every use is a request to the checker, which applies it
to the object itself; a stand-in has the special methods of what it stands for (`SPECIALS`), so
`callable`, `Iterable`, `with` and `dataclasses.*` answer as they would for the object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codec import READABLE_DUNDERS, is_dunder

if TYPE_CHECKING:
    from .worker import WorkerSide


class CheckerObject:
    """Stands for an object of the checker's (an instance of a class the test defines, ...): every
    use is a request to the checker, which applies it to the object itself."""

    __slots__ = ("_hc_ref", "_hc_flags", "__weakref__")
    _hc_side: WorkerSide
    _hc_module_class: type | None = None

    def _hc(self, op: str, *args: Any) -> Any:
        return self._hc_side.request("op", self._hc_ref, [op, args])

    def __getattr__(self, name: str) -> Any:
        if is_dunder(name) and name not in READABLE_DUNDERS:
            raise AttributeError(name)
        return self._hc_side.request("getattr", self._hc_ref, [name])

    def __setattr__(self, name: str, value: Any) -> None:
        if name in CheckerObject.__slots__:
            object.__setattr__(self, name, value)
        else:
            self._hc_side.request("setattr", self._hc_ref, [name, value])

    def __delattr__(self, name: str) -> None:
        self._hc_side.request("delattr", self._hc_ref, [name])

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # the module's class of this name, as when test and module share a file
        return type(self)._hc_module_class or type(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._hc_side.request("call", self._hc_ref, [args, tuple(kwargs.items())])

    def __eq__(self, other: object) -> Any:
        if self._hc_flags[0]:  # the object compares by identity: no need to ask
            return self is other or NotImplemented
        return self._hc("eq", other)

    def __ne__(self, other: object) -> Any:
        if self._hc_flags[0]:
            return False if self is other else NotImplemented
        return self._hc("ne", other)

    def __hash__(self) -> int:
        return object.__hash__(self) if self._hc_flags[1] else int(self._hc("hash"))

    def __bool__(self) -> bool:
        return True if self._hc_flags[2] else bool(self._hc("bool"))

    def __repr__(self) -> str:
        return str(self._hc("repr"))

    def __str__(self) -> str:
        return str(self._hc("str"))

    def __format__(self, spec: str) -> str:
        return str(self._hc("format", spec))

    def __copy__(self) -> Any:  # a copy is the checker's copy of its object, not a second name for it
        return self._hc("copy")

    def __deepcopy__(self, memo: Any) -> Any:
        return self._hc("deepcopy")


def _forward(op: str, kind: type | None = None) -> Any:
    def method(self: CheckerObject, *args: Any) -> Any:
        out = self._hc(op, *args)
        return kind(out) if kind is not None else out

    return method


def _forward_call(self: CheckerObject, *args: Any, **kwargs: Any) -> Any:
    return self._hc_side.request("call", self._hc_ref, [args, tuple(kwargs.items())])


# The special methods a stand-in has: those its checker class has (so that `isinstance(x, Iterable)`,
# `callable(x)` and kin answer as they would for the object itself), each a request to the checker.
SPECIALS: dict[str, Any] = {
    "__call__": _forward_call, "__iter__": _forward("iter"), "__next__": _forward("next_"),
    "__len__": _forward("len", int), "__contains__": _forward("contains", bool), "__getitem__": _forward("getitem"),
    "__setitem__": _forward("setitem"), "__delitem__": _forward("delitem"), "__index__": _forward("index", int),
    "__int__": _forward("int", int), "__float__": _forward("float", float), "__round__": _forward("round"),
    "__floor__": _forward("floor"), "__ceil__": _forward("ceil"), "__trunc__": _forward("trunc"),
    "__enter__": _forward("enter"),
    "__exit__": lambda self, kind, exc, tb: self._hc("exit", kind, exc, None),  # a traceback stays here
    **{f"__{op}__": _forward(op) for op in ("lt", "le", "gt", "ge", "neg", "pos", "abs", "invert", "divmod",
                                            "rdivmod")},
    **{f"__{p}{op}__": _forward(p + op + ("_" if op in ("and", "or") else ""))
       for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "lshift", "rshift", "and",
                  "or", "xor") for p in ("", "r")},
}


class ProxyMeta(type):
    """The type of a checker class's stand-in: calling it makes an object of the checker's class."""

    _hc_side: WorkerSide
    _hc_class_ref: int

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._hc_side.request("call", cls._hc_class_ref, [args, tuple(kwargs.items())])

    def __getattr__(cls, name: str) -> Any:
        if is_dunder(name):
            raise AttributeError(name)
        return cls._hc_side.request("getattr", cls._hc_class_ref, [name])


class CheckerFunction:
    """A function of the checker's (a lambda or a function the test passes in)."""

    __slots__ = ("_hc_side", "_hc_ref", "__name__", "__weakref__")
    _hc_side: WorkerSide
    _hc_ref: int

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._hc_side.request("call", self._hc_ref, [args, tuple(kwargs.items())])


class CheckerIterator:
    """An iterator or generator of the checker's: each item is asked for when it is needed."""

    __slots__ = ("_hc_side", "_hc_ref", "__weakref__")
    _hc_side: WorkerSide
    _hc_ref: int

    def __iter__(self) -> CheckerIterator:
        return self

    def __next__(self) -> Any:
        return self._hc_side.request("next", self._hc_ref, [])


def specials(cls: type) -> list[str]:
    """The special methods of `cls` (beyond `object`'s) that stand-ins forward."""
    return [n for n in SPECIALS if getattr(cls, n, None) not in (None, getattr(object, n, None))]
