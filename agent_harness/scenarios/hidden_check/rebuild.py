"""How the checker rebuilds what the worker sends (the checker's half of decoding).

Only constructors the checker trusts build what the test sees: classes of the test's and the
reference's (found by name, their state written in without running the module's code), dataclasses
and namedtuples made here, standard-library classes. What the test does not know arrives as a
`Remote`. An object whose class, of the module's making, defines its own comparison, hash, truth or
arithmetic is refused with the flag *suspicious*, as is an exception that ends a test without
failing it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from .codec import MAX_REASON, READABLE_DUNDERS, Malformed, Refused, is_dunder, stdlib_object
from .decode import Decoder, as_list
from .wire import Side

STDLIB = frozenset(sys.stdlib_module_names)
# Exceptions that end a test without failing it, or end the process: never an error a test expects.
STOPPERS = {("builtins", "SystemExit"), ("builtins", "KeyboardInterrupt"), ("builtins", "GeneratorExit"),
            ("unittest.case", "SkipTest"), ("unittest.case", "_ShouldStop")}


class Forged(BaseException):
    """Raised into the test when the code under test tried to forge a pass; a BaseException, so that
    a test's `except Exception` cannot hide it (and a bare `except` cannot hide the flag)."""


class Remote:
    """An object of the worker's (a generator, a function, an object of a class the test does not
    know): uses that yield data are asked of the worker, comparisons and hashes are by identity.
    Its special methods are those of the worker's object among call, iteration, length and indexing
    (`remote_class`), so `callable(x)` or `isinstance(x, Iterable)` answer as they would for it."""

    __slots__ = ("_side", "_ref", "_name", "_sized", "__weakref__")

    def __init__(self, side: Side, ref: int, name: str, sized: bool) -> None:
        for k, v in (("_side", side), ("_ref", ref), ("_name", name), ("_sized", sized)):
            object.__setattr__(self, k, v)

    def _ask(self, kind: str, values: list[Any]) -> Any:
        return self._side.request(kind, self._ref, values)

    def __bool__(self) -> bool:
        return len(self) > 0 if self._sized else True

    def __getattr__(self, name: str) -> Any:
        if (is_dunder(name) and name not in READABLE_DUNDERS) or name in Remote.__slots__:
            raise AttributeError(name)
        return self._ask("getattr", [name])

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", [name, value])

    def __repr__(self) -> str:
        return f"<{self._name} object of the code under test>"


def _remote_len(self: Remote) -> int:
    n = self._ask("op", ["len", ()])
    if type(n) is not int or n < 0:
        raise TypeError("__len__ of the code under test did not give a length")
    return n


def _remote_exit(self: Remote, kind: Any, exc: Any) -> Any:
    swallowed = self._ask("op", ["exit", (kind, exc, None)])
    if swallowed and isinstance(exc, AssertionError):  # the module's __exit__ would hide a failed check
        side: Any = self._side
        side.flag("the code under test's __exit__ swallowed an AssertionError of the test")
    return swallowed


_REMOTE_SPECIALS: dict[str, Callable[..., Any]] = {
    "__call__": lambda self, *args, **kwargs: self._ask("call", [args, tuple(kwargs.items())]),
    "__iter__": lambda self: self._ask("op", ["iter", ()]),
    "__next__": lambda self: self._ask("next", []),
    "__len__": _remote_len,
    "__getitem__": lambda self, key: self._ask("op", ["getitem", (key,)]),
    "__enter__": lambda self: self._ask("op", ["enter", ()]),
    "__exit__": lambda self, kind, exc, tb: _remote_exit(self, kind, exc),
}
_REMOTE_CLASSES: dict[frozenset[str], type] = {}


def remote_class(specials: Any, iterator: bool) -> type:
    names = frozenset(n for n in (specials if type(specials) is list else []) if n in _REMOTE_SPECIALS)
    key = names | ({"iterator"} if iterator else set())
    if key not in _REMOTE_CLASSES:
        methods = {n: _REMOTE_SPECIALS[n] for n in names}
        if iterator:  # iter(it) is it, as for any iterator
            methods["__iter__"] = lambda self: self
        _REMOTE_CLASSES[key] = type("Remote", (Remote,), {"__slots__": (), **methods})
    return _REMOTE_CLASSES[key]


def _forbidden_exception(mro: list[Any], expected: set[str]) -> str | None:
    """The stop an exception of this MRO stands for, unless the test names it (catches it on purpose)."""
    names = [(str(m), str(q)) for m, q in mro]
    for mod, qual in names:
        stop = (mod, qual) in STOPPERS or mod.split(".")[0] == "unittest"
        if qual == "_ShouldStop" or (stop and qual not in expected):
            return f"{mod}.{qual}"
    if ("builtins", "BaseException") not in names:
        return ".".join(names[0]) if names else "an exception that is not an Exception"
    return None


class TrustedSide(Side):
    """The checker's end of the boundary, as far as values coming in are concerned."""

    def __init__(self) -> None:
        super().__init__()
        self.namespace: dict[str, Any] = {}
        self.known: dict[str, type] = {}  # classes of the test's we sent out, by name (those local to `check`)
        self.made: dict[tuple[Any, ...], type] = {}
        self.where = "the code under test passed"
        self.suspicious = ""
        self.expected: set[str] = set()  # the names the test's code uses: the exceptions it catches on purpose

    def flag(self, reason: str) -> Any:
        self.suspicious = self.suspicious or reason[:MAX_REASON]
        raise Forged(self.suspicious)

    def known_class(self, name: Any) -> type | None:
        cls = self.namespace.get(name) if type(name) is str else None
        if isinstance(cls, type) and cls.__module__ == "__main__":
            return cls
        return self.known.get(name) if type(name) is str else None

    # -- the worker's objects coming in --
    def decode_entry(self, dec: Decoder, i: int, tag: str, rest: list[Any]) -> Any:
        if tag == "P" and len(rest) == 4 and type(rest[0]) is int and rest[1] in ("obj", "fn", "it"):
            ref, kind, name, specials = rest
            if ref not in self.proxies:
                made = remote_class(specials, iterator=kind == "it")
                self.remember_proxy(ref, made(self, ref, str(name)[:80], "__len__" in as_list(specials)))
            return self.proxies[ref]
        if tag == "o" and len(rest) == 7:
            name, qual, _, ref, overrides, base, specials = rest
            known = self.known_class(name)
            if known is not None:
                return dec.shell(i, self.new_instance(known, dec.slot(base)))
            self.check_overrides(qual, overrides)
            if base is not None:
                return dec.slot(base)
            if type(ref) is not int:
                raise Malformed("bad object")
            return self.decode_entry(dec, i, "P", [ref, "obj", name, specials])
        if tag == "dc" and len(rest) == 6:
            name, qual, fields, _, flags, overrides = rest
            known = self.known_class(name)
            if known is None or not hasattr(known, "__dataclass_fields__"):
                self.check_overrides(qual, overrides)
                known = self.dataclass(name, fields, flags)
            return dec.shell(i, object.__new__(known))
        raise Malformed(f"bad tag {tag[:10]!r}")

    def fill_entry(self, dec: Decoder, value: Any, tag: str, rest: list[Any]) -> None:
        if tag == "o":
            state = dec.state(rest[2])
        else:  # "dc"
            fields, values = rest[2], rest[3]
            if type(fields) is not list or type(values) is not list or len(fields) != len(values):
                raise Malformed("bad dataclass")
            state = dec.state([x for pair in zip(fields, values, strict=True) for x in pair])
        for k, x in state.items():
            self.guard_methods(type(value), k, x)
        try:
            attrs = getattr(value, "__dict__", None)
            if type(attrs) is dict and tag == "o":
                attrs.update(state)
            else:
                for k, x in state.items():
                    object.__setattr__(value, k, x)
        except (AttributeError, TypeError) as e:
            raise Refused(f"the checker could not rebuild a {type(value).__name__} object: {e}") from None

    def guard_methods(self, cls: type, name: str, value: Any) -> None:
        """Flag anything the worker puts where the test's class has a method (in an object's state or on the
        class): the test's own code would then call the module's function, or a built-in of its choosing
        (`object`, `bool`), and take its answer."""
        method = getattr(cls, name, None)
        if callable(method) and value is not method:
            self.flag(f"the code under test put a function of its own in place of the method `{name[:40]}` "
                      f"of the test's {cls.__name__[:40]}")

    def check_overrides(self, qual: Any, overrides: Any) -> None:
        if type(overrides) is list and overrides:
            names = ", ".join(str(n)[:20] for n in overrides[:4])
            self.flag(f"{self.where} a {str(qual)[:80]} object, not plain data: its class defines its own {names}")

    def new_instance(self, cls: type, base: Any) -> Any:
        try:
            for immutable in (int, float, complex, str, bytes, tuple, frozenset):
                if issubclass(cls, immutable):
                    return immutable.__new__(cls, base)  # type: ignore[type-var]
            if issubclass(cls, list):
                obj: Any = list.__new__(cls)
                list.extend(obj, base or ())
                return obj
            if issubclass(cls, set):
                obj = set.__new__(cls)
                set.update(obj, base or ())
                return obj
            if issubclass(cls, dict):
                obj = dict.__new__(cls)
                dict.update(obj, base or ())
                return obj
            return object.__new__(cls)
        except TypeError as e:
            raise Refused(f"the checker could not rebuild a {cls.__name__} object: {e}") from None

    def dataclass(self, name: Any, fields: Any, flags: Any) -> type:
        if (type(name) is not str or not name.isidentifier() or type(fields) is not list or type(flags) is not list
                or not all(type(f) is str and f.isidentifier() for f in fields) or len(flags) != 3):
            raise Malformed("bad dataclass")
        key = ("dc", name, tuple(fields), tuple(bool(f) for f in flags))
        if key not in self.made:
            import dataclasses

            self.made[key] = dataclasses.make_dataclass(name, fields, eq=bool(flags[0]), order=bool(flags[1]),
                                                        frozen=bool(flags[2]))
        return self.made[key]

    def make_enum(self, name: Any, module: Any, member: Any, base: Any, overrides: Any, members: Any, ref: Any,
                  dec: Decoder) -> Any:
        enum = sys.modules.get("enum")
        cls = self.known_class(name) or (stdlib_object(module, name) if module != "__main__" else None)
        if enum is not None and isinstance(cls, enum.EnumMeta):
            try:
                return cls[member]
            except KeyError:
                raise Refused(f"{name} has no member {member[:40]!r} here") from None
        self.check_overrides(f"{module}.{name}", overrides)
        value = dec.slot(base)
        if value is not None:  # an IntEnum or StrEnum of the module's own: its int or str
            return value
        if type(ref) is not int:
            raise Malformed("bad enum member")
        return self.decode_entry(dec, -1, "P", [ref, "obj", name, []])  # read through, compared by identity

    def note_class(self, cls: type) -> None:
        if getattr(cls, "__module__", None) == "__main__":  # the test's own, maybe local to `check`
            self.known.setdefault(cls.__name__, cls)

    def make_namedtuple(self, name: Any, fields: Any, values: list[Any], module: Any) -> Any:
        if (type(name) is not str or not name.isidentifier() or type(fields) is not list or len(fields) != len(values)
                or not all(type(f) is str and f.isidentifier() and not f.startswith("_") for f in fields)):
            raise Malformed("bad namedtuple")
        cls = self.known_class(name)
        if cls is None and type(module) is str and module != "__main__":
            cls = stdlib_object(module, name)
            cls = cls if isinstance(cls, type) else None
        if cls is None or not issubclass(cls, tuple) or list(getattr(cls, "_fields", ())) != fields:
            key = ("nt", name, tuple(fields))
            if key not in self.made:
                from collections import namedtuple

                self.made[key] = namedtuple(name, fields)
            cls = self.made[key]
        return tuple.__new__(cls, values)

    def make_exception(self, mro: list[Any], args: tuple[Any, ...], state: dict[str, Any], text: Any,
                       cause: Any) -> Any:
        if not mro or not all(type(p) is list and len(p) == 2 and all(type(x) is str for x in p) for p in mro):
            raise Malformed("bad exception")
        stopper = _forbidden_exception(mro, self.expected)
        if stopper:
            self.flag(f"the code under test raised {stopper[:80]}, which ends a test without failing it")
        cls: type[BaseException] = Exception
        for mod, qual in mro:
            found = self.exception_class(mod, qual)
            if found is not None:
                cls = found
                break
        exc = self.new_exception(cls, args, state)
        if type(text) is str and text != str(exc):  # the module's class has its own __str__: keep what it said
            exc = self.new_exception(self.with_text(cls, str(mro[0][1])), args, {**state, "_hc_text": text})
        if isinstance(cause, BaseException):
            exc.__cause__ = cause
        return exc

    @staticmethod
    def new_exception(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
        exc = cls.__new__(cls, *args)
        if cls.__module__ == "builtins":
            with contextlib.suppress(Exception):
                cls.__init__(exc, *args)
        exc.args = args
        if hasattr(exc, "__dict__"):
            exc.__dict__.update(state)
        return exc

    def with_text(self, base: type[BaseException], name: str) -> type[BaseException]:
        """A subclass of `base` whose str() is the text the worker sent (its class defined __str__)."""
        key = ("text", base, name)
        if key not in self.made:
            def __str__(self: Any) -> str:
                return str(self.__dict__.get("_hc_text", ""))

            short = name.rsplit(".", 1)[-1]
            self.made[key] = type(short if short.isidentifier() else base.__name__, (base,),
                                  {"__str__": __str__, "__module__": base.__module__})
        return self.made[key]

    def exception_class(self, mod: str, qual: str) -> type[BaseException] | None:
        if mod.split(".")[0] in STDLIB or mod == "builtins":
            found = stdlib_object(mod, qual)
        else:
            found = self.known_class(qual.rsplit(".", 1)[-1])
        return found if isinstance(found, type) and issubclass(found, BaseException) else None

