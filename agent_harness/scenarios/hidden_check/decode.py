"""Turning a message's table back into objects (the format is codec.py's)."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .codec import BY_NAME, MAX_ENTRIES, MAX_MESSAGE, PATHS, Malformed, Refused, import_type, stdlib_object

if TYPE_CHECKING:
    from .wire import Side

# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------

_SHELLS = {"l": list, "S": set, "d": dict, "Y": bytearray}
_NUMBER = (int, float)


class Decoder:
    """Turns one message's table back into objects, through `side` for what is not plain data."""

    def __init__(self, side: Side, objs: Any) -> None:
        if type(objs) is not list or len(objs) > MAX_ENTRIES:
            raise Malformed("no object table")
        self.side, self.objs = side, objs
        self.done: dict[int, Any] = {}
        self.busy: set[int] = set()
        self.filling: list[int] = []
        self.later: list[int] = []  # dicts and sets: filled once everything they may hash is whole
        self.mentioned: dict[int, Any] = {}  # our lent containers the sender referred to
        self.received: list[int] = []  # the sender's lent containers whose contents came with this message

    def decode(self, slot: Any) -> Any:
        value = self.slot(slot)
        self.finish()
        return value

    def finish(self) -> None:
        while self.filling or self.later:
            while self.filling:
                self.fill(self.filling.pop())
            if self.later:
                self.fill(self.later.pop())

    def slot(self, s: Any) -> Any:
        t = type(s)
        if s is None or t is bool or t is str or t is float or t is int:
            return s
        if t is not list or len(s) != 1 or type(s[0]) is not int or not 0 <= s[0] < len(self.objs):
            raise Malformed("bad slot")
        return self.at(s[0])

    def at(self, i: int) -> Any:
        if i in self.done:
            return self.done[i]
        e = self.objs[i]
        if type(e) is not list or not e or type(e[0]) is not str:
            raise Malformed("bad entry")
        if i in self.busy:
            raise Malformed("an immutable value that holds itself")
        self.busy.add(i)
        try:
            value = self.build(i, e[0], e[1:])
        finally:
            self.busy.discard(i)
        self.done[i] = value
        return value

    def shell(self, i: int, value: Any, later: bool = False) -> Any:
        """A mutable object made empty now and filled in `finish` (so cycles through it close)."""
        self.done[i] = value
        (self.later if later else self.filling).append(i)
        return value

    def lent(self, i: int, fresh: Callable[[], Any], lent_id: Any, later: bool) -> Any:
        if lent_id is None:
            return self.shell(i, fresh(), later)
        if type(lent_id) is not int:
            raise Malformed("bad lent id")
        side, copy = self.side, self.side.borrowed.get(lent_id)
        if copy is not None and side.differs(lent_id):  # ours is newer: what we did is not yet sent back
            self.done[i] = copy
            return copy
        new = fresh()
        if copy is None or type(copy) is not type(new) or getattr(copy, "maxlen", 0) != getattr(new, "maxlen", 0):
            copy = new
            side.borrow(lent_id, copy)
        self.received.append(lent_id)
        return self.shell(i, copy, later)

    def build(self, i: int, tag: str, rest: list[Any]) -> Any:
        n = len(rest)
        if tag in _SHELLS and n in (1, 2):
            cls = _SHELLS[tag]
            return self.lent(i, cls, rest[1] if n == 2 else None, later=tag in ("S", "d"))
        if tag in ("dq", "dd", "C", "od") and n in (1, 2, 3):
            kind = import_type("collections", {"dq": "deque", "dd": "defaultdict", "C": "Counter",
                                               "od": "OrderedDict"}[tag])
            lent_id = rest[-1] if n == {"dq": 3, "dd": 3, "C": 2, "od": 2}[tag] else None
            if tag == "dq":
                maxlen = rest[1] if n > 1 else None
                if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
                    raise Malformed("bad deque")
                return self.lent(i, lambda: kind(maxlen=maxlen), lent_id, later=False)
            return self.lent(i, kind, lent_id, later=True)
        if tag == "R" and n == 1 and type(rest[0]) is int:
            own = self.side.own(rest[0])
            if self.side.export_kinds.get(rest[0]) == "lent":
                self.mentioned[rest[0]] = own  # the sender will act on our object: its copy must be refreshed
            return own
        if tag == "i" and n == 1 and type(rest[0]) is str and len(rest[0]) < MAX_MESSAGE:
            return int(rest[0], 16)
        if tag == "t" and n == 1 and type(rest[0]) is list:
            return tuple(self.slot(x) for x in rest[0])
        if tag == "F" and n == 1 and type(rest[0]) is list:
            return frozenset(self.slot(x) for x in rest[0])
        if tag == "y" and n == 1 and type(rest[0]) is str:
            return bytes.fromhex(rest[0])
        if tag == "c" and n == 2 and all(type(x) in _NUMBER for x in rest):
            return complex(float(rest[0]), float(rest[1]))
        if tag in ("r", "sl") and n == 3:
            parts = [self.slot(x) for x in rest]
            if tag == "sl":
                return slice(*parts)
            if not all(type(p) is int for p in parts):
                raise Malformed("bad range")
            return range(*parts)
        if tag == "..." and n == 0:
            return Ellipsis
        if tag == "NI" and n == 0:
            return NotImplemented
        if tag == "std" and n == 2 and type(rest[0]) is str and type(rest[1]) is str:
            if rest[0].lstrip("_").split(".")[0] not in BY_NAME:
                raise Malformed("not a module whose objects cross by name")
            found = stdlib_object(rest[0], rest[1])
            if found is None or not callable(found):
                raise Refused(f"{rest[0]}.{rest[1]} is not here")
            return found
        if tag == "uuid" and n == 1 and type(rest[0]) is str and len(rest[0]) <= 32:
            return import_type("uuid", "UUID")(int=int(rest[0], 16))
        if tag == "path" and n == 2 and rest[0] in PATHS and type(rest[1]) is str:
            return import_type("pathlib", rest[0])(rest[1])
        if tag == "ns" and n == 1:
            return self.shell(i, import_type("types", "SimpleNamespace")())
        if tag == "arr" and n == 2 and type(rest[0]) is str and len(rest[0]) == 1:
            return import_type("array", "array")(rest[0], [self.slot(x) for x in as_list(rest[1])])
        if tag == "bi" and n == 1 and type(rest[0]) is str:
            found = getattr(builtins, rest[0], None)
            if not callable(found) or rest[0].startswith("_"):
                raise Malformed("bad built-in")
            return found
        if tag == "nt" and n == 4:
            return self.side.make_namedtuple(rest[0], rest[1], [self.slot(x) for x in as_list(rest[2])], rest[3])
        if tag == "en" and n == 7 and all(type(x) is str for x in rest[:3]):
            return self.side.make_enum(rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6], self)
        if tag == "nan" and n == 1 and type(rest[0]) is int:
            nan = float("nan")
            self.side.borrow(rest[0], nan)
            return nan
        if tag == "E" and n == 6 and type(rest[4]) is int:
            args = tuple(self.slot(x) for x in as_list(rest[1]))
            state, cause = self.state(rest[2]), self.slot(rest[5])
            self.finish()  # the containers in its arguments are whole before its constructor sees them
            exc = self.side.make_exception(as_list(rest[0]), args, state, rest[3], cause)
            self.side.borrow(rest[4], exc)  # sent back, it is the sender's own object again
            return exc
        value = self.value_type(tag, rest)
        if value is not None:
            return value
        return self.side.decode_entry(self, i, tag, rest)

    def value_type(self, tag: str, rest: list[Any]) -> Any:
        n = len(rest)
        if tag == "fr" and n == 2:
            num, den = self.slot(rest[0]), self.slot(rest[1])
            if type(num) is not int or type(den) is not int or den <= 0:
                raise Malformed("bad fraction")
            return import_type("fractions", "Fraction")(num, den)
        if tag == "dec" and n == 1 and type(rest[0]) is str and len(rest[0]) < 10_000:
            return import_type("decimal", "Decimal")(rest[0])
        if tag in ("dt", "date", "time", "td", "tz"):
            import datetime as d

            if tag == "date" and n == 3 and all(type(x) is int for x in rest):
                return d.date(*rest)
            if tag == "td" and n == 3 and all(type(x) is int for x in rest):
                return d.timedelta(days=rest[0], seconds=rest[1], microseconds=rest[2])
            if tag in ("dt", "time") and n == 3 and type(rest[0]) is list and all(type(x) is int for x in rest[0]):
                tz, parts, fold = self.slot(rest[1]), rest[0], rest[2]
                if (tz is not None and not isinstance(tz, d.tzinfo)) or fold not in (0, 1):
                    raise Malformed("bad time zone")
                if tag == "dt" and len(parts) == 7:
                    year, month, day, hour, minute, second, micro = parts
                    return d.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz, fold=fold)
                if tag == "time" and len(parts) == 4:
                    return d.time(parts[0], parts[1], parts[2], parts[3], tzinfo=tz, fold=fold)
            if tag == "tz" and n == 2:
                offset, name = self.slot(rest[0]), self.slot(rest[1])
                if type(offset) is not d.timedelta or (name is not None and type(name) is not str):
                    raise Malformed("bad time zone")
                return d.timezone(offset, name) if name is not None else d.timezone(offset)
            raise Malformed("bad date or time")
        return None

    def state(self, pairs: Any) -> dict[str, Any]:
        """Attribute name -> value from ``[name, slot, name, slot, ...]``."""
        pairs = as_list(pairs)
        if len(pairs) % 2:
            raise Malformed("bad state")
        out: dict[str, Any] = {}
        for k, s in zip(pairs[::2], pairs[1::2], strict=True):
            if type(k) is not str or not k.isidentifier() or (k.startswith("__") and k.endswith("__")):
                raise Malformed("bad attribute name")
            out[k] = self.slot(s)
        return out

    def fill(self, i: int) -> None:
        value, e = self.done[i], self.objs[i]
        tag, rest = e[0], e[1:]
        if tag in ("l", "S", "dq"):
            items = [self.slot(x) for x in as_list(rest[0])]
            if tag == "l":
                value[:] = items
            else:
                value.clear()
                (value.update if tag == "S" else value.extend)(items)
        elif tag == "ns":
            value.__dict__.update(self.state(rest[0]))
        elif tag == "Y":
            if type(rest[0]) is not str:
                raise Malformed("bad bytearray")
            value[:] = bytes.fromhex(rest[0])
        elif tag in ("d", "dd", "C", "od"):
            pairs = as_list(rest[0])
            if len(pairs) % 2:
                raise Malformed("bad mapping")
            items = [(self.slot(k), self.slot(x)) for k, x in zip(pairs[::2], pairs[1::2], strict=True)]
            value.clear()
            for k, x in items:
                value[k] = x
            if tag == "dd":
                factory = self.slot(rest[1])
                if factory is not None and not callable(factory):
                    raise Malformed("bad default factory")
                value.default_factory = factory
        else:
            self.side.fill_entry(self, value, tag, rest)


def as_list(x: Any) -> list[Any]:
    if type(x) is not list:
        raise Malformed("expected a list")
    return x


def apply_contents(own: Any, news: Any) -> None:
    """Write what the other side did to a lent container into the container itself."""
    if type(own) is not type(news):
        raise Malformed("a lent container came back as another type")
    if type(own) in (list, bytearray):
        own[:] = news
    elif type(own).__name__ == "deque":
        own.clear()
        own.extend(news)
    elif type(own) is set:
        own.clear()
        own.update(news)
    else:  # the dict family; item by item, so Counter and OrderedDict keep their own rules
        own.clear()
        for k, x in news.items():
            own[k] = x
        if type(own).__name__ == "defaultdict":
            own.default_factory = news.default_factory


