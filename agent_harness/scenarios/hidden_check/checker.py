"""The checker: runs the dataset's test and reports the verdict; it never imports the code under test.

It reads the test from a descriptor the harness hands it (no file holds it), makes itself
non-dumpable (no process of its uid may open /proc/<pid>/fd or /proc/<pid>/mem or ptrace it), and
only then starts the worker, which imports the module. Of what the worker sends, the test sees:
- built-in and standard-library values rebuilt here by their own constructors;
- objects of classes the test or the reference code define (found by name), rebuilt here from
  their state, so their own ``__eq__`` and kin, written by the dataset, decide comparisons;
- dataclasses and namedtuples of other classes, rebuilt as such classes made here;
- its own objects back (``is`` holds), with what the worker did to those it lent written in;
- everything else as a `Remote`: it can be called, iterated, indexed and read, each answer again
  one of these, but it compares and hashes by identity and is always true (or true when not empty).
(rebuild.py). A class of the module's making whose own dunders would decide a comparison or a
number, reaching the test that way, is flagged *suspicious*, as are exceptions that end a test
without failing it (`unittest.SkipTest` and kin, `SystemExit`), StopIteration out of a call when the
test then passes (it can end a test's own `all(map(...))` early), a worker that exits 0 before it
answers, and any message this protocol does not make.

The worker may ask for the test's objects: call what the test passed, read and set attributes that
are not dunders, apply operators, take the next item. It cannot reach modules, frames, code or the
test's namespace through them; see `CheckerSide.export_entry` and `CheckerSide.handle`.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import linecache
import os
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

from .codec import MALFORMED, MAX_REASON, READABLE_DUNDERS, RECURSION_LIMIT, Encoder, Refused, is_dunder, type_name
from .rebuild import TrustedSide
from .wire import OPS, Side, print_traceback, send

HERE = os.path.dirname(os.path.abspath(__file__))
_REFUSED = (types.ModuleType, types.FrameType, types.CodeType, types.TracebackType, types.CellType,
            types.MappingProxyType, types.CoroutineType, types.AsyncGeneratorType, types.GetSetDescriptorType,
            types.MemberDescriptorType)
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.BuiltinMethodType,
              types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
              types.ClassMethodDescriptorType)


# The special methods the worker's stand-ins of the test's objects forward (see worker.SPECIALS).
FORWARDED = ("__call__", "__iter__", "__next__", "__len__", "__contains__", "__getitem__", "__setitem__",
             "__delitem__", "__index__", "__int__", "__float__", "__round__", "__floor__", "__ceil__", "__trunc__",
             "__enter__", "__exit__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__",
             "__pos__", "__abs__", "__invert__", "__divmod__", "__rdivmod__",
             *(f"__{p}{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                         "lshift", "rshift", "and", "or", "xor") for p in ("", "r")))


def dataclass_shape(cls: type) -> list[Any] | None:
    """[field names, [eq, order, frozen]] of a dataclass, for the worker's stand-in; None otherwise."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        return None
    params = getattr(cls, "__dataclass_params__", None)
    return [[f.name for f in dataclasses.fields(cls)], [bool(getattr(params, k, False)) for k in ("eq", "order",
                                                                                                   "frozen")]]


def specials(cls: type) -> list[str]:
    return [n for n in FORWARDED if getattr(cls, n, None) not in (None, getattr(object, n, None))]


class CheckerSide(TrustedSide):
    def __init__(self, entry_point: str) -> None:
        super().__init__()
        self.entry_point = entry_point
        self.failure = ""
        self.stopped = False  # a call of the code under test raised StopIteration into the test
        self.calls = 0
        self.proc: subprocess.Popen[bytes] | None = None

    # -- verdict --
    def fail(self, reason: str) -> Any:
        self.failure = self.failure or reason[:MAX_REASON]
        raise RuntimeError(self.failure)

    def bad(self, reason: str) -> Any:
        if reason.startswith("a message longer"):
            return self.fail(f"the code under test replied with {reason}")
        return self.flag(MALFORMED)

    def closed(self) -> Any:
        assert self.proc is not None
        code = self.proc.wait()
        why = f"the code under test exited with code {code} before it reported back"
        return self.flag(why) if code == 0 else self.fail(why)

    def request(self, kind: str, target: Any, values: list[Any]) -> Any:
        try:
            return super().request(kind, target, values)
        except StopIteration:
            if kind != "next":
                self.stopped = True
            raise

    # -- the worker process --
    def start(self, module: str) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        for fd in (req_w, rep_r):
            os.set_inheritable(fd, False)
        boot = (f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r}); "
                "from hidden_check.worker import main; sys.exit(main(sys.argv[1:]))")
        self.proc = subprocess.Popen([sys.executable, "-B", "-P", "-c", boot, module, self.entry_point, str(req_r),
                                      str(rep_w)], stdin=subprocess.DEVNULL, pass_fds=(req_r, rep_w))
        os.close(req_r)
        os.close(rep_w)
        self.connect(rep_r, req_w)
        message = self.receive()
        if message[1] == "error":
            self.fail(str(message[3]))
        if message[1] != "ready":
            self.flag(MALFORMED)

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            os.close(self.write_fd)
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.reader.fd)

    def candidate(self) -> Callable[..., Any]:
        """What the test gets for the entry point: each call goes to the worker."""

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self.where = f"{self.entry_point} returned"
            try:
                return self.request("call", "entry", [args, tuple(kwargs.items())])
            except Refused as e:
                self.fail(str(e))
            except ValueError as e:
                if "cannot go to the other process" in str(e):
                    self.fail(f"the hidden test passes {e}")
                raise
            finally:
                self.where = "the code under test passed"

        call.__name__ = call.__qualname__ = self.entry_point
        return call

    # -- the test's objects going out --
    def export_entry(self, enc: Encoder, v: Any) -> list[Any]:
        t = type(v)
        if isinstance(v, (*_REFUSED, Side)):
            raise TypeError(f"a {type_name(t)} object, which cannot go to the code under test")
        if isinstance(v, type):
            if v.__module__ == "__main__":
                self.known.setdefault(v.__name__, v)
            return ["P", self.export(v, "cls"), "cls", [v.__name__, specials(v), dataclass_shape(v)]]
        if isinstance(v, (types.GeneratorType, types.CoroutineType)) or (
                hasattr(t, "__next__") and t.__module__ == "builtins"):
            return ["P", self.export(v, "it"), "it", None]  # a generator or built-in iterator: items, never a frame
        if isinstance(v, _FUNCTIONS) or t.__name__ == "partial":
            return ["P", self.export(v, "fn"), "fn", str(getattr(v, "__name__", "function"))[:80]]
        class_entry = self.export_entry(enc, t)
        plain = [t.__eq__ is object.__eq__, t.__hash__ is object.__hash__,
                 not hasattr(t, "__bool__") and not hasattr(t, "__len__")]
        info = [class_entry[1], t.__name__, specials(t), dataclass_shape(t), *plain]
        return ["P", self.export(v, "obj"), "obj", info]

    # -- the worker's requests --
    def handle(self, kind: Any, target: Any, values: list[Any]) -> Any:
        if type(target) is not int or target not in self.exports:
            return self.bad("a request for an object the checker never sent")
        obj, what = self.exports[target], self.export_kinds[target]
        if kind == "call" and what in ("fn", "cls", "obj") and len(values) == 2:
            args, kwargs = values
            if type(args) is not tuple or type(kwargs) is not tuple or not all(
                    type(p) is tuple and len(p) == 2 and type(p[0]) is str for p in kwargs):
                return self.bad("a malformed call")
            return obj(*args, **dict(kwargs))
        if kind == "next" and what == "it" and not values:
            return next(obj)
        if kind in ("getattr", "setattr", "delattr") and what in ("obj", "cls") and values:
            name = values[0]
            readable = kind == "getattr" and name in READABLE_DUNDERS and (what == "obj" or name != "__dict__")
            if type(name) is not str or not name.isidentifier() or (is_dunder(name) and not readable):
                raise AttributeError(f"{str(name)[:40]!r}: the checker's special attributes stay out of reach")
            if name == "__dict__":
                return dict(vars(obj))
            if kind == "getattr" and len(values) == 1:
                return getattr(obj, name)
            if kind == "setattr" and len(values) == 2:
                self.guard_methods(obj if what == "cls" else type(obj), name, values[1])
                return setattr(obj, name, values[1])
            if kind == "delattr" and len(values) == 1:
                self.guard_methods(obj if what == "cls" else type(obj), name, None)
                return delattr(obj, name)
        if (kind == "op" and what in ("obj", "cls") and len(values) == 2 and values[0] in OPS
                and type(values[1]) is tuple):
            return OPS[values[0]](obj, *values[1])
        return self.bad("a request the protocol does not make")


def names_used(source: str) -> set[str]:
    """The names and attribute names the test's code uses (`SystemExit`, `json.JSONDecodeError` -> both parts)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def seal_imports() -> None:
    """Import now what the checker may need later, then leave only read-only folders on sys.path: the
    scoring folder (where this package lies) is writable by the code under test, and a module planted
    there must never be imported by the checker."""
    import ast  # noqa: F401
    import collections  # noqa: F401
    import dataclasses  # noqa: F401
    import datetime  # noqa: F401
    import decimal  # noqa: F401
    import enum  # noqa: F401
    import fractions  # noqa: F401

    package_root = os.path.dirname(HERE)
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != package_root
                   and not os.path.abspath(p).startswith(os.getcwd())]
    sys.path_importer_cache.clear()


def _undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): no process of the same uid may open /proc/<pid>/fd or ptrace us."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)) == 0
    except (ImportError, OSError, AttributeError):
        return False


def read_spec(fd: int) -> dict[str, Any]:
    """The spec the harness wrote to `fd` (a memfd), read whole; the descriptor is closed after."""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    spec = json.loads(b"".join(chunks).decode("utf-8"))
    assert isinstance(spec, dict)
    return spec


def compile_source(source: str, name: str) -> Any:
    """Compiled `source`, with its lines known to tracebacks."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    return compile(source, name, "exec")


def main(argv: list[str]) -> int:
    """``checker VERDICT_FD SPEC_FD``: run the spec's test; report {"passed", "calls", "private", ...}."""
    verdict_fd = int(argv[0])
    os.set_inheritable(verdict_fd, False)
    seal_imports()
    sys.setrecursionlimit(RECURSION_LIMIT)
    private = _undumpable()
    spec = read_spec(int(argv[1]))
    side = CheckerSide(spec["entry_point"])
    side.expected = names_used(spec["test"])
    passed = False
    try:
        side.start(spec["module"])
        side.namespace = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile_source(spec["helpers"], "<reference helpers>"), side.namespace)
        side.namespace[spec["entry_point"]] = side.candidate()
        exec(compile_source(spec["test"], "<hidden test>"), side.namespace)
        passed = not (side.suspicious or side.failure)  # even when the test caught the error
        if passed and side.stopped and "StopIteration" not in side.expected:
            # it may have ended a loop of the test's (all(map(...))) as if it were done
            side.suspicious = "a call of the code under test raised StopIteration, which ends a test's loop early"
            passed = False
    except BaseException as e:  # Forged, or a SystemExit the test let through: either way not a pass
        print_traceback(e)
    finally:
        side.stop()
    report: dict[str, Any] = {"passed": passed, "calls": side.calls, "private": private}
    if side.suspicious:
        report["suspicious"] = side.suspicious
    if side.failure:
        report["failure"] = side.failure
    sys.stdout.flush()
    sys.stderr.flush()
    send(verdict_fd, report)
    return 0 if passed else 1
