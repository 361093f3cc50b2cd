"""The channel between the checker and the worker: one JSON message per line on two pipes.

A request (``["q", kind, target, table, slots, news]``) asks the other side to act on one of its
objects; its answer (``["a", status, table, slot, news]``) carries the result, a raised exception or
the end of an iterator. Both carry *news* of lent containers: a request, the contents of the copies
it names (so the owner acts on what the sender sees); an answer, the contents of every copy the
answering side was lent while serving it, and of its own containers the request named (so the
requester's copies see what was done to them here).
While a side waits for an answer it serves the other side's requests, so calls may nest both ways
(a function of the module calling a lambda of the test calling back into the module).
"""

from __future__ import annotations

import copy
import json
import math
import operator
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from .codec import MALFORMED, MAX_MESSAGE, MAX_REASON, Encoder, Malformed, Refused, type_name
from .decode import Decoder, apply_contents, as_list


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: op(b, a)


_BINARY = {name: getattr(operator, name) for name in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "lshift", "rshift", "and_", "or_", "xor")}
# What a proxy asks its object's owner to do: the owner applies the operation to its own object.
OPS: dict[str, Callable[..., Any]] = {
    "len": len, "bool": bool, "iter": iter, "hash": hash, "str": str, "repr": repr, "format": format,
    "contains": operator.contains, "getitem": operator.getitem, "setitem": operator.setitem,
    "delitem": operator.delitem, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge, "neg": operator.neg, "pos": operator.pos, "abs": abs,
    "invert": operator.invert, "int": int, "float": float, "index": operator.index, "round": round,
    "divmod": divmod, "rdivmod": _reflected(divmod), "next_": next, "copy": copy.copy,
    "deepcopy": copy.deepcopy, "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc,
    "enter": lambda o: type(o).__enter__(o), "exit": lambda o, *exc: type(o).__exit__(o, *exc),
    **_BINARY, **{f"r{name}": _reflected(op) for name, op in _BINARY.items()},
}


# ---------------------------------------------------------------------------------------------
# Framing: one JSON text per line
# ---------------------------------------------------------------------------------------------


def print_traceback(e: BaseException) -> None:
    """The traceback of `e` on stderr, without the frames of this package or of the import machinery (the
    test's and the module's stay)."""
    here = os.path.dirname(os.path.abspath(__file__))
    te = traceback.TracebackException.from_exception(e)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not f.filename.startswith(here)
                                                 and not f.filename.startswith("<frozen importlib")])
    sys.stderr.write("".join(te.format()))


def send(fd: int, message: Any) -> None:
    data = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Reader:
    """Lines from a pipe, each at most MAX_MESSAGE bytes; None at end of file."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, bytearray()

    def line(self) -> bytes | None:
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end >= 0:
                out = bytes(self.buf[:end])
                del self.buf[: end + 1]
                return out
            if len(self.buf) > MAX_MESSAGE:
                raise Malformed(f"a message longer than {MAX_MESSAGE} bytes")
            start = len(self.buf)
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk


# ---------------------------------------------------------------------------------------------
# One end of the boundary
# ---------------------------------------------------------------------------------------------


class Side:
    """What one process knows of the boundary: the objects it lent or exported (by id), the copies
    and proxies it holds of the other side's objects, and the channel. Subclasses decide what may
    go out by reference (`export_entry`), what comes in (`decode_entry`) and what requests do."""

    def __init__(self) -> None:
        self.exports: dict[int, Any] = {}  # our id -> our object (lent container or exported)
        self.export_kinds: dict[int, str] = {}
        self.export_ids: dict[int, int] = {}  # id(object) -> our id
        self.borrowed: dict[int, Any] = {}  # their id -> our copy of their lent container
        self.proxies: dict[int, Any] = {}  # their id -> our proxy of their object
        self.peer_ids: dict[int, int] = {}  # id(copy or proxy) -> their id
        self.seen: dict[int, Any] = {}  # their id -> what our copy held when both sides last agreed

    # -- tables --
    def export(self, obj: Any, kind: str) -> int:
        ref = self.export_ids.get(id(obj))
        if ref is None:
            ref = len(self.exports) + 1
            self.exports[ref], self.export_kinds[ref], self.export_ids[id(obj)] = obj, kind, ref
        return ref

    def lend(self, obj: Any) -> int:
        return self.export(obj, "lent")

    def borrow(self, ref: int, copy: Any) -> None:
        if ref in self.borrowed:
            self.peer_ids.pop(id(self.borrowed[ref]), None)
        self.borrowed[ref] = copy
        self.peer_ids[id(copy)] = ref

    def agreed(self, refs: Any) -> None:
        """Both sides now hold the same contents of these lent containers."""
        for ref in refs:
            copy = self.borrowed.get(ref)
            if copy is not None and lendable(copy):
                self.seen[ref] = snapshot(copy)

    def differs(self, ref: int) -> bool:
        """Whether our copy of their container `ref` changed since both sides last agreed on it."""
        copy = self.borrowed.get(ref)
        return copy is not None and ref in self.seen and not same(self.seen[ref], snapshot(copy))

    def changed(self) -> dict[int, Any]:
        """Our copies of the other side's containers that differ from what both sides last agreed on; a copy
        nothing but these tables still holds is forgotten once its news is out (the module let it go)."""
        out: dict[int, Any] = {}
        for ref, held in list(self.borrowed.items()):
            if not lendable(held):
                continue
            if ref not in self.seen or not same(self.seen[ref], snapshot(held)):
                out[ref] = held
            if sys.getrefcount(held) <= 3:  # this loop's name, the dict, the call's argument
                del self.borrowed[ref]
                self.seen.pop(ref, None)
                self.peer_ids.pop(id(held), None)
        return out

    def remember_proxy(self, ref: int, proxy: Any) -> Any:
        self.proxies[ref] = proxy
        self.peer_ids[id(proxy)] = ref
        return proxy

    def peer_ref(self, v: Any) -> int | None:
        ref = self.peer_ids.get(id(v))
        if ref is not None and (self.borrowed.get(ref) is v or self.proxies.get(ref) is v):
            return ref
        return None

    def lent_own(self, ref: int) -> Any:
        if self.export_kinds.get(ref) != "lent":
            raise Malformed("news of a container we did not lend")
        return self.exports[ref]

    def own(self, ref: int) -> Any:
        if ref not in self.exports:
            raise Malformed("a reference to nothing we sent")
        return self.exports[ref]

    def collections_types(self) -> tuple[type, ...]:
        mod = sys.modules.get("collections")
        if mod is None:
            return ()
        return (mod.deque, mod.defaultdict, mod.Counter, mod.OrderedDict)

    # -- hooks --
    def export_entry(self, enc: Encoder, v: Any) -> list[Any]:
        raise TypeError(f"a {type_name(type(v))} object cannot cross to the other process")

    def decode_entry(self, dec: Decoder, i: int, tag: str, rest: list[Any]) -> Any:
        raise Malformed(f"bad tag {tag[:10]!r}")

    def fill_entry(self, dec: Decoder, value: Any, tag: str, rest: list[Any]) -> None:
        raise Malformed(f"bad tag {tag[:10]!r}")

    def make_namedtuple(self, name: Any, fields: Any, values: list[Any], module: Any) -> Any:
        raise NotImplementedError

    def make_enum(self, name: Any, module: Any, member: Any, base: Any, overrides: Any, members: Any, ref: Any,
                  dec: Decoder) -> Any:
        raise NotImplementedError

    def note_class(self, cls: type) -> None:
        """A class whose values went out by value (an enum, a namedtuple): the checker remembers its own."""

    def synthesized_enum(self, name: str, members: Any, dec: Decoder) -> Any:
        """An Enum made here with the sender's members (its kind int, str or plain), cached; None if malformed."""
        import enum

        kind, pairs = as_list(members)
        items = tuple((str(m), dec.slot(v)) for m, v in as_list(pairs))
        key = ("enum", name, kind, repr(items))
        made: dict[Any, Any] = self.__dict__.setdefault("_enums", {})
        if key not in made:
            base = {"int": enum.IntEnum, "str": enum.StrEnum}.get(kind, enum.Enum)
            try:
                made[key] = base(name, list(items))
            except (TypeError, ValueError):
                made[key] = None
        return made[key]

    def make_exception(self, mro: list[Any], args: tuple[Any, ...], state: dict[str, Any], text: Any,
                       cause: Any) -> Any:
        raise NotImplementedError

    def overrides(self, cls: type) -> list[str]:
        """The verdict-deciding dunders a class of the code under test defines (the worker's to say)."""
        return []

    def base_value(self, v: Any) -> Any:
        """The built-in value under an enum member (an IntEnum's int, ...), or None."""
        for base in (int, str, float):
            if isinstance(v, base):
                return base.__dict__[f"__{base.__name__}__"](v)
        return None

    # -- the channel --
    def connect(self, read_fd: int, write_fd: int) -> None:
        self.reader, self.write_fd = Reader(read_fd), write_fd
        self.depth = 0  # requests of the other side being served now, one inside another

    def bad(self, reason: str) -> Any:
        """The other side broke the protocol (never returns)."""
        raise Malformed(reason)

    def closed(self) -> Any:
        """The other side closed its end while we waited (never returns)."""
        raise EOFError("the other process is gone")

    def receive(self) -> list[Any]:
        try:
            line = self.reader.line()
        except Malformed as e:
            return self.bad(str(e))
        if line is None:
            return self.closed()
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            message = None
        if (type(message) is not list or not message or message[0] not in ("q", "a")
                or len(message) != (6 if message[0] == "q" else 5)):
            return self.bad(MALFORMED)
        return message

    def request(self, kind: str, target: Any, values: list[Any]) -> Any:
        """Ask the other side to act on one of its objects; serve what it asks meanwhile; its answer."""
        enc = Encoder(self, lend=True)
        try:
            slots = [enc.slot(v) for v in values]
            enc.drain()
            news = enc.news({}, {})  # the copies we name go with what we did to them
        except OverflowError as e:
            raise ValueError(f"{e}, which cannot go to the other process") from None
        send(self.write_fd, ["q", kind, target, enc.objs, slots, news])
        self.agreed(enc.mentioned)
        while True:
            message = self.receive()
            if message[0] == "q":
                self.serve(message)
                continue
            return self.answer(message)

    def take(self, objs: Any, slots: list[Any], news: Any) -> tuple[list[Any], Decoder]:
        """The values of a message, once its news is written into our objects and our copies."""
        try:
            dec = Decoder(self, objs)
            values = [dec.slot(s) for s in slots]
            updates = []
            for which, ref, s in _news(news):
                target = self.lent_own(ref) if which == "yours" else self.borrowed.get(ref)
                if target is None:
                    raise Malformed("news of a copy we do not hold")
                updates.append((target, dec.slot(s)))
            dec.finish()
            for target, new in updates:
                apply_contents(target, new)
            self.agreed([*dec.received, *(ref for which, ref, _ in _news(news) if which == "mine")])
        except Refused:
            raise
        except RecursionError:
            raise Refused("a value nested too deep to rebuild") from None
        except (Malformed, ValueError, TypeError, KeyError, IndexError, OverflowError):
            return self.bad(MALFORMED)
        return values, dec

    def answer(self, message: list[Any]) -> Any:
        _, status, objs, slot, news = message
        [value], _ = self.take(objs, [slot], news)
        if status == "ok":
            return value
        if status == "stop":
            raise StopIteration(value)
        if status == "raise" and isinstance(value, BaseException):
            raise value
        return self.bad(MALFORMED)

    def serve(self, message: list[Any]) -> None:
        """Carry out one request of the other side and send the answer (with our news of what it lent)."""
        _, kind, target, objs, slots, news = message
        self.depth += 1
        try:
            try:
                values, dec = self.take(objs, as_list(slots), news)
            except Refused as e:
                self.reply("raise", TypeError(str(e)), {})
                return
            status = "ok"
            try:
                result = self.handle(kind, target, values)
            except StopIteration as e:
                status, result = "stop", e.value
            except self.passes_on() as e:
                status, result = "raise", e
            self.reply(status, result, dec.mentioned)
        finally:
            self.depth -= 1

    def reply(self, status: str, result: Any, mentioned: dict[int, Any]) -> None:
        """Send an answer, with the news of every lent container: theirs we hold (what we did to them) and
        ours they named (what was done to them here)."""
        try:
            enc = Encoder(self, lend=True)
            slot = enc.encode(result)
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            status, enc = "raise", Encoder(self, lend=False)
            slot = enc.encode(TypeError(str(e)[:MAX_REASON]))
        changed = self.changed()
        send(self.write_fd, ["a", status, enc.objs, slot, enc.news(mentioned, changed)])
        self.agreed([*changed, *enc.mentioned])

    def passes_on(self) -> tuple[type[BaseException], ...]:
        """The exceptions of a request that go back to the other side as its answer."""
        return (Exception,)

    def handle(self, kind: Any, target: Any, values: list[Any]) -> Any:
        raise NotImplementedError


def lendable(v: Any) -> bool:
    t = type(v)
    return t in (list, dict, set, bytearray) or t.__module__ == "collections" and t.__name__ in (
        "deque", "defaultdict", "Counter", "OrderedDict")


def snapshot(v: Any) -> tuple[Any, ...]:
    """What a lent container holds, by the identity of its parts (no comparison runs anyone's code)."""
    if type(v) is bytearray:
        return ("b", bytes(v))
    if isinstance(v, dict):
        return ("d", tuple(v.items()), getattr(v, "default_factory", None))
    if isinstance(v, set):
        items = tuple(v)  # holds the parts, so their ids stay theirs
        return ("s", frozenset(map(id, items)), items)
    return ("l", tuple(v))


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] in ("b", "s"):
        return bool(a[1] == b[1])
    if len(a[1]) != len(b[1]):
        return False
    if a[0] == "d":
        return a[2] is b[2] and all(x[0] is y[0] and x[1] is y[1] for x, y in zip(a[1], b[1], strict=True))
    return all(x is y for x, y in zip(a[1], b[1], strict=True))


def _news(news: Any) -> list[tuple[str, int, Any]]:
    out = []
    for item in as_list(news):
        if type(item) is not list or len(item) != 3 or item[0] not in ("mine", "yours") or type(item[1]) is not int:
            raise Malformed("bad news")
        out.append((item[0], item[1], item[2]))
    return out
