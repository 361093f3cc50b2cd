"""The worker: imports the module under test and carries out the checker's requests on it.

Everything here runs beside the code under test and can be rewritten by it, so nothing here
decides a verdict: what it sends is checked and rebuilt by the checker. It only has to be faithful
for honest code: it sends the module's objects in a form the checker can rebuild (dataclasses,
namedtuples, enum members and instances by class name and state; iterators and callables by
reference), and it notes which dunder methods a module-made class defines (`overrides`), which the
checker turns into a *suspicious* flag when such an object reaches the test.
"""

from __future__ import annotations

import builtins
import importlib.util
import os
import sys
import types
from typing import Any

from .codec import (
    RECURSION_LIMIT,
    Encoder,
    Malformed,
    is_dunder,
    is_namedtuple_class,
    stdlib_object,
    type_name,
)
from .decode import Decoder, as_list
from .stand_ins import SPECIALS, CheckerFunction, CheckerIterator, CheckerObject, ProxyMeta, specials
from .wire import OPS, Side, print_traceback, send

# Dunder methods whose result is a verdict the test would take on trust: a comparison, a hash, a
# truth value, a number. Iteration, length, indexing and str/repr are answered with data the test
# then judges itself, so they are carried out for the checker and are not signs of forgery.
BEHAVIOUR = frozenset({
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__abs__", "__round__",
    "__trunc__", "__floor__", "__ceil__", "__float__", "__int__", "__index__", "__complex__", "__neg__",
    "__pos__", "__invert__", "__class__", "__getattribute__", "__instancecheck__", "__divmod__", "__rdivmod__",
    *(f"__{p}{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
                                "xor", "lshift", "rshift") for p in ("", "r")),
})
_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType,
              types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType, type)
STDLIB = frozenset(sys.stdlib_module_names) | {"builtins"}



def _base_value(v: Any) -> Any:
    """The built-in value under an instance of a subclass of a built-in type, read without its methods."""
    t = type(v)
    for scalar in (int, float, complex, str, bytes):
        if issubclass(t, scalar):
            return scalar.__dict__[f"__{scalar.__name__}__"](v)  # a plain copy, whatever the subclass defines
    if issubclass(t, dict):
        return dict(dict.items(v))
    for collection in (tuple, list, set, frozenset):
        if issubclass(t, collection):
            return collection(collection.__iter__(v))
    return None


class WorkerSide(Side):
    def __init__(self, module: types.ModuleType, entry: Any) -> None:
        super().__init__()
        self.module, self.entry = module, entry
        self.classes: dict[int, type] = {}
        self.made: dict[tuple[Any, ...], type] = {}

    def module_made(self, cls: type) -> bool:
        mod = getattr(cls, "__module__", None)
        return not isinstance(mod, str) or mod == self.module.__name__ or mod.split(".")[0] not in STDLIB

    def overrides(self, cls: type) -> list[str]:
        """The verdict-deciding dunders that module-made classes in `cls`'s MRO define themselves."""
        found: list[str] = []
        library = [k for k in cls.__mro__ if not self.module_made(k)]
        for k in cls.__mro__:
            if k is object or not self.module_made(k):
                continue
            for name, attr in vars(k).items():
                code = getattr(attr, "__code__", None)
                generated = getattr(code, "co_filename", "") == "<string>"  # dataclass's own __eq__ and kin
                copied = any(vars(b).get(name) is attr for b in library)  # enum puts Flag's __or__ in each Flag
                if name in BEHAVIOUR and attr is not None and not generated and not copied and name not in found:
                    found.append(name)
        return found

    # -- our objects going out --
    def export_entry(self, enc: Encoder, v: Any) -> list[Any]:
        t = type(v)
        if issubclass(t, types.ModuleType):
            raise TypeError(f"a module ({v.__name__}) cannot go to the checker")
        if hasattr(t, "__dataclass_fields__") and not issubclass(t, type):
            import dataclasses

            fields = dataclasses.fields(v)
            params = getattr(t, "__dataclass_params__", None)
            flags = [bool(getattr(params, k, False)) for k in ("eq", "order", "frozen")]
            return ["dc", t.__name__, type_name(t), [f.name for f in fields],
                    [enc.slot(getattr(v, f.name, None)) for f in fields], flags, self.overrides(t)]
        if issubclass(t, tuple) and not self.overrides(t):
            for k in t.__mro__:
                if is_namedtuple_class(k):
                    return ["nt", t.__name__, list(getattr(k, "_fields", ())), enc.items(tuple.__iter__(v)),
                            str(t.__module__)]
        if hasattr(t, "__next__") and hasattr(t, "__iter__"):
            return ["P", self.export(v, "it"), "it", type_name(t), ["__iter__", "__next__"]]
        if issubclass(t, _CALLABLES) or t.__name__ == "partial":
            return ["P", self.export(v, "fn"), "fn", str(getattr(v, "__name__", type_name(t)))[:80], ["__call__"]]
        state: list[Any] = []
        attrs = getattr(v, "__dict__", None)
        if type(attrs) is dict:
            for k, x in attrs.items():
                if type(k) is str and k.isidentifier():
                    state += [k, enc.slot(x)]
        for k in t.__mro__:
            slots = k.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if isinstance(name, str) and name.isidentifier() and not is_dunder(name) and hasattr(v, name):
                    state += [name, enc.slot(getattr(v, name))]
        base = _base_value(v)
        return ["o", t.__name__, type_name(t), state, self.export(v, "obj"), self.overrides(t), enc.slot(base),
                specials(t)]

    # -- the checker's objects coming in --
    def decode_entry(self, dec: Decoder, i: int, tag: str, rest: list[Any]) -> Any:
        if tag != "P" or len(rest) != 3 or type(rest[0]) is not int or rest[1] not in ("obj", "cls", "fn", "it"):
            raise Malformed(f"bad tag {tag[:10]!r}")
        ref, kind, info = rest
        if ref in self.proxies:
            return self.proxies[ref]
        if kind == "cls":
            return self.remember_proxy(ref, self.proxy_class(ref, str(info[0]), info[1], info[2]))
        if kind == "obj":
            class_ref, class_name, specials, dataclass, *flags = info
            proxy: Any = object.__new__(self.proxy_class(int(class_ref), str(class_name), specials, dataclass))
            object.__setattr__(proxy, "_hc_flags", tuple(bool(f) for f in flags))
        elif kind == "fn":
            proxy = object.__new__(CheckerFunction)
            object.__setattr__(proxy, "__name__", str(info))
        else:
            proxy = object.__new__(CheckerIterator)
        object.__setattr__(proxy, "_hc_ref", ref)
        if kind != "obj":
            object.__setattr__(proxy, "_hc_side", self)
        return self.remember_proxy(ref, proxy)

    def proxy_class(self, ref: int, name: str, specials: Any, dataclass: Any) -> type:
        cls = self.proxies.get(ref)
        if isinstance(cls, type):
            return cls
        own = getattr(self.module, name, None)
        methods = {n: SPECIALS[n] for n in as_list(specials) if n in SPECIALS}
        if dataclass is not None:  # dataclasses.fields/replace/asdict work on the stand-in as on the object
            import dataclasses

            fields, (eq, order, frozen) = as_list(dataclass)
            shape = dataclasses.make_dataclass(name, [str(f) for f in as_list(fields)], eq=eq, order=order,
                                               frozen=frozen)
            methods["__dataclass_fields__"] = shape.__dataclass_fields__  # type: ignore[attr-defined]
            methods["__dataclass_params__"] = shape.__dataclass_params__  # type: ignore[attr-defined]
        made = ProxyMeta(name if name.isidentifier() else "Object", (CheckerObject,), {
            "__slots__": (), "_hc_side": self, "_hc_class_ref": ref,
            "_hc_module_class": own if isinstance(own, type) else None, **methods})
        return self.remember_proxy(ref, made)

    def make_enum(self, name: Any, module: Any, member: Any, base: Any, overrides: Any, members: Any, ref: Any,
                  dec: Decoder) -> Any:
        enum = sys.modules.get("enum")
        cls = getattr(self.module, name, None) if module == "__main__" else stdlib_object(module, name)
        if enum is None or not isinstance(cls, enum.EnumMeta) or member not in cls.__members__:
            cls = self.synthesized_enum(name, members, dec)  # the test's enum, which the module does not define
        if cls is not None and member in cls.__members__:
            return cls[member]
        value = dec.slot(base)
        return value if value is not None else member

    def make_namedtuple(self, name: Any, fields: Any, values: list[Any], module: Any) -> Any:
        own = getattr(self.module, str(name), None) if module == "__main__" else stdlib_object(str(module), str(name))
        if isinstance(own, type) and issubclass(own, tuple) and list(getattr(own, "_fields", ())) == fields:
            return tuple.__new__(own, values)
        key = ("nt", name, tuple(fields))
        if key not in self.made:
            from collections import namedtuple

            self.made[key] = namedtuple(name, fields)
        return tuple.__new__(self.made[key], values)

    def make_exception(self, mro: list[Any], args: tuple[Any, ...], state: dict[str, Any], text: Any,
                       cause: Any) -> Any:
        base: type = Exception
        for mod, qual in mro:
            found = stdlib_object(str(mod), str(qual))
            if isinstance(found, type) and issubclass(found, BaseException):
                base = found
                break
        name = str(mro[0][1]).rsplit(".", 1)[-1] if mro else "Exception"
        cls = base
        if name != base.__name__ and name.isidentifier():  # a class of the test's: a stand-in of that name
            key = ("exc", name, base)
            if key not in self.made:
                self.made[key] = type(name, (base,), {})
            cls = self.made[key]
        exc = cls.__new__(cls, *args)
        exc.args = args
        if hasattr(exc, "__dict__"):
            exc.__dict__.update(state)
        if isinstance(cause, BaseException):
            exc.__cause__ = cause
        return exc

    # -- requests --
    def handle(self, kind: Any, target: Any, values: list[Any]) -> Any:
        obj = self.entry if target == "entry" else self.own(target)
        if kind == "call":
            args, kwargs = values
            try:
                return obj(*args, **dict(kwargs))
            except BaseException as e:
                if target == "entry" and not isinstance(e, StopIteration):
                    print_traceback(e)
                raise
        if kind == "next":
            return next(obj)
        if kind == "getattr":
            return getattr(obj, values[0])
        if kind == "setattr":
            return setattr(obj, values[0], values[1])
        if kind == "delattr":
            return delattr(obj, values[0])
        if kind == "op" and values[0] in OPS:
            return OPS[values[0]](obj, *values[1])
        raise Malformed("an unknown request")

    def passes_on(self) -> tuple[type[BaseException], ...]:
        return (BaseException,)

    def bad(self, reason: str) -> Any:
        raise SystemExit(3)

    def closed(self) -> Any:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # the checker is done: no atexit hooks or threads of the module to wait for


def load(module: str) -> types.ModuleType:
    """Import `module` from the working folder (by path: its name may be that of a loaded module)."""
    sys.path.insert(0, os.getcwd())
    spec = importlib.util.spec_from_file_location(module, os.path.join(os.getcwd(), module + ".py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def _exception_name(e: BaseException) -> str:
    name = type(e).__name__
    return name if getattr(builtins, name, None) is type(e) else "Exception"


def main(argv: list[str]) -> int:
    """``worker MODULE ENTRY REQ_FD REP_FD``: import the module, then serve until the checker closes."""
    module, entry_point, req_fd, rep_fd = argv[0], argv[1], int(argv[2]), int(argv[3])
    sys.setrecursionlimit(RECURSION_LIMIT)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(rep_fd, False)
    try:
        fn = getattr(load(module), entry_point)
        if not callable(fn):
            raise TypeError(f"{entry_point} is not a function")
    except BaseException as e:
        print_traceback(e)
        send(rep_fd, ["a", "error", [], f"importing {module} failed: {_exception_name(e)}", []])
        return 1
    side = WorkerSide(sys.modules[module], fn)
    side.connect(req_fd, rep_fd)
    send(rep_fd, ["a", "ready", [], None, []])
    while True:
        try:
            message = side.receive()
        except Malformed:
            return 3
        if message[0] != "q":
            return 3
        side.serve(message)
