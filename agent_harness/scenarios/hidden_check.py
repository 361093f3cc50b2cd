"""The HumanEvalFix hidden check, run by the sandbox's python3 (standard library only).

Two processes. The checker (``python3 -P this.py VERDICT_FD SPEC``) holds the dataset's test, the
helpers the task's reference code defines and the harness's report pipe; it never imports the code
under test. The worker (``... this.py serve MODULE ENTRY REQ_FD REP_FD``), its child, imports the
module and answers each call the test makes. Only plain data crosses: the worker encodes a result
by exact type (int, float, bool, str, bytes, None, complex, range, list, tuple, dict, set,
frozenset; a builtin iterator is consumed and arrives as a list iterator), and the checker builds
fresh built-in objects from that encoding. So no value can carry code into a comparison, no
module-level name (``abs``, ``check``, a helper) reaches the test, and the code under test cannot
reach the report pipe: the pipe is not inherited, and the checker makes itself non-dumpable, which
closes /proc/<pid>/fd and ptrace to a process of the same uid.

A value of any other type fails the check and is reported as *suspicious*, as is a worker that
exits 0 before it answers or writes a reply the checker cannot read.

``... this.py probe VERDICT_FD SPEC`` runs the test the old way (module imported in-process, its
names `spec["names"]` laid over the test's) for a module that failed; see hidden_score.py.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import linecache
import os
import subprocess
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100  # nesting of one value
MAX_NODES = 200_000  # values (and iterator items) in one value
MAX_MESSAGE = 16 << 20  # bytes of one encoded message
MAX_REASON = 300

_ITERATOR_SAMPLES: tuple[Any, ...] = (
    (i for i in range(0)), map(int, ()), filter(None, ()), zip(), enumerate(()), reversed([]), reversed(range(0)),
    iter([]), iter(()), iter(range(0)), iter(range(1 << 70)), iter(""), iter("\u00e9"), iter(b""), iter(set()),
    iter({}), iter({}.values()), iter({}.items()),
)
_ITERATORS = frozenset(map(type, _ITERATOR_SAMPLES))
MALFORMED = "the code under test wrote a malformed reply on the checker's channel"


_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "S", frozenset: "F"}


class NotPlain(Exception):
    """A value that is not plain data: `suspicious` when its type is not allowed at all."""

    def __init__(self, reason: str, suspicious: bool) -> None:
        super().__init__(reason)
        self.suspicious = suspicious


class Forged(BaseException):
    """Raised into the test when the code under test answered with something other than plain
    data; a BaseException, so that a test's `except Exception` cannot hide it."""


def _type_name(v: object) -> str:
    t = type(v)
    mod = getattr(t, "__module__", "?")
    name = getattr(t, "__qualname__", "?")
    text = f"{mod}.{name}" if isinstance(mod, str) and isinstance(name, str) else "?"
    return text[:80]


def encode(value: object) -> Any:
    """A JSON-ready tagged encoding of `value`, which must be plain data: types are checked exactly,
    and a builtin iterator is run to its end. (The checker's `decode` is what makes the result safe.)"""
    count = [0]

    def enc(v: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_NODES:
            raise NotPlain(f"a value of more than {MAX_NODES} parts", False)
        if depth > MAX_DEPTH:
            raise NotPlain(f"a value nested more than {MAX_DEPTH} deep (or holding itself)", False)
        t = type(v)
        if v is None:
            return ["n"]
        if t is bool:
            return ["b", v]
        if t is int:
            return ["i", format(v, "x")]
        if t is float:
            return ["f", repr(v)]
        if t is complex:
            return ["c", repr(v.real), repr(v.imag)]
        if t is str:
            return ["s", v]
        if t is bytes:
            return ["y", v.hex()]
        if t is range:
            return ["r", format(v.start, "x"), format(v.stop, "x"), format(v.step, "x")]
        if t is list or t is tuple or t is set or t is frozenset:
            return [_TAGS[t], [enc(x, depth + 1) for x in v]]
        if t is dict:
            return ["d", [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]]
        if t in _ITERATORS:
            items: list[Any] = []
            for x in v:
                if len(items) >= MAX_NODES:
                    raise NotPlain(f"an iterator of more than {MAX_NODES} items", False)
                items.append(enc(x, depth + 1))
            return ["g", items]
        raise NotPlain(f"a {_type_name(v)} object, not plain data", True)

    return enc(value, 0)


def _float(s: Any) -> float:
    if type(s) is not str or len(s) > 40:
        raise ValueError("bad float")
    return float(s)


def _int(s: Any) -> int:
    if type(s) is not str or len(s) > MAX_MESSAGE:
        raise ValueError("bad int")
    return int(s, 16)


def decode(data: Any, depth: int = 0) -> Any:
    """The plain value an `encode` result stands for, built from fresh built-in objects; a
    ValueError for anything that is not such a result."""
    if depth > MAX_DEPTH + 1 or type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError("not an encoded value")
    tag, rest = data[0], data[1:]
    if tag == "n" and not rest:
        return None
    if tag == "b" and len(rest) == 1 and type(rest[0]) is bool:
        return rest[0] is True
    if tag == "i" and len(rest) == 1:
        return _int(rest[0])
    if tag == "f" and len(rest) == 1:
        return _float(rest[0])
    if tag == "c" and len(rest) == 2:
        return complex(_float(rest[0]), _float(rest[1]))
    if tag == "s" and len(rest) == 1 and type(rest[0]) is str:
        return str(rest[0])
    if tag == "y" and len(rest) == 1 and type(rest[0]) is str:
        return bytes.fromhex(rest[0])
    if tag == "r" and len(rest) == 3:
        return range(_int(rest[0]), _int(rest[1]), _int(rest[2]))
    if tag in ("l", "t", "S", "F", "g") and len(rest) == 1 and type(rest[0]) is list:
        items = [decode(x, depth + 1) for x in rest[0]]
        if tag == "g":
            return iter(items)
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag == "d" and len(rest) == 1 and type(rest[0]) is list:
        out = {}
        for pair in rest[0]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("bad dict item")
            out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
        return out
    raise ValueError(f"bad tag {tag[:10]!r}")


# ---------------------------------------------------------------------------------------------
# Messages: one JSON text per line on a pipe
# ---------------------------------------------------------------------------------------------


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
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                out = bytes(self.buf[:end])
                del self.buf[: end + 1]
                return out
            if len(self.buf) > MAX_MESSAGE:
                raise ValueError(f"a message longer than {MAX_MESSAGE} bytes")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk


# ---------------------------------------------------------------------------------------------
# The worker: imports the module under test and answers calls
# ---------------------------------------------------------------------------------------------


def _exception_name(e: BaseException) -> str:
    name = type(e).__name__
    return name if getattr(builtins, name, None) is type(e) else "Exception"


def load(module: str) -> types.ModuleType:
    """Import `module` from the working folder (by path: its name may be that of a loaded module)."""
    import importlib.util

    sys.path.insert(0, os.getcwd())
    spec = importlib.util.spec_from_file_location(module, os.path.join(os.getcwd(), module + ".py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


def serve(module: str, entry_point: str, req_fd: int, rep_fd: int) -> int:
    """Import `module`, then answer ["call", args, kwargs] lines until the checker closes the pipe."""
    os.set_inheritable(req_fd, False)
    os.set_inheritable(rep_fd, False)
    reader = Reader(req_fd)
    try:
        fn = getattr(load(module), entry_point)
        if not callable(fn):
            raise TypeError(f"{entry_point} is not a function")
    except Exception as e:
        traceback.print_exc()
        send(rep_fd, ["error", f"importing {module} failed: {_exception_name(e)}"])
        return 1
    send(rep_fd, ["ready"])
    while (line := reader.line()) is not None:
        request = json.loads(line)
        args, kwargs = decode(request[1]), decode(request[2])
        try:
            reply = ["ok", encode(fn(*args, **kwargs))]  # encoding may run a generator
        except NotPlain as e:
            reply = ["bad", str(e), e.suspicious]
        except Exception as e:
            traceback.print_exc()
            reply = ["raise", _exception_name(e)]
        send(rep_fd, reply)
    return 0


# ---------------------------------------------------------------------------------------------
# The checker: runs the dataset's test against a proxy of the entry point
# ---------------------------------------------------------------------------------------------


def _undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): no process of the same uid may open /proc/<pid>/fd or ptrace us."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)) == 0
    except (ImportError, OSError, AttributeError):
        return False


class Worker:
    """The worker process and the two pipes to it."""

    def __init__(self, module: str, entry_point: str) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        for fd in (self.req_w, self.rep_r):
            os.set_inheritable(fd, False)
        self.entry_point = entry_point
        self.proc = subprocess.Popen(
            [sys.executable, "-B", "-P", os.path.abspath(__file__), "serve", module, entry_point, str(req_r),
             str(rep_w)], stdin=subprocess.DEVNULL, pass_fds=(req_r, rep_w))
        os.close(req_r)
        os.close(rep_w)
        self.reader = Reader(self.rep_r)
        self.calls = 0
        self.suspicious = ""
        self.failure = ""

    def receive(self) -> list[Any]:
        """The worker's next message; a Forged or RuntimeError (with the reason kept) when none can be read."""
        try:
            line = self.reader.line()
        except ValueError as e:
            self.failure = f"the code under test replied with {e}"
            raise RuntimeError(self.failure) from None
        if line is None:
            code = self.proc.wait()
            why = f"the code under test exited with code {code} before it reported back"
            if code == 0:
                self.suspicious = self.suspicious or why
                raise Forged(why)
            self.failure = why
            raise RuntimeError(why)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            message = None
        if type(message) is not list or not message or type(message[0]) is not str:
            self.suspicious = self.suspicious or MALFORMED
            raise Forged(self.suspicious)
        return message

    def start(self) -> None:
        message = self.receive()
        if message[0] == "error":
            self.failure = str(message[1] if len(message) > 1 else "the module could not be imported")[:MAX_REASON]
            raise RuntimeError(self.failure)
        if message != ["ready"]:
            self.suspicious = MALFORMED
            raise Forged(self.suspicious)

    def proxy(self) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                request = ["call", encode(list(args)), encode(dict(kwargs))]
            except NotPlain as e:
                raise TypeError(f"the hidden test passes {e}, which cannot go to another process") from None
            self.calls += 1
            with contextlib.suppress(OSError):  # the worker is gone: receive says how it ended
                send(self.req_w, request)
            message = self.receive()
            if message[0] == "raise" and len(message) == 2 and type(message[1]) is str:
                cls = getattr(builtins, message[1], None)
                cls = cls if isinstance(cls, type) and issubclass(cls, Exception) else Exception
                raise cls(f"{self.entry_point} raised {cls.__name__}")
            try:
                return self._answer(message)
            except (ValueError, RecursionError, TypeError):  # from decode: not one of our replies
                self.suspicious = self.suspicious or MALFORMED
                raise Forged(self.suspicious) from None

        call.__name__ = call.__qualname__ = self.entry_point
        return call

    def _answer(self, message: list[Any]) -> Any:
        kind = message[0]
        if kind == "ok" and len(message) == 2:
            return decode(message[1])
        if kind == "bad" and len(message) == 3 and type(message[1]) is str:
            reason = f"{self.entry_point} returned {message[1]}"[:MAX_REASON]
            if message[2] is True:
                self.suspicious = self.suspicious or reason
                raise Forged(reason)
            self.failure = reason
            raise RuntimeError(reason)
        raise ValueError("unknown reply")

    def stop(self) -> None:
        os.close(self.req_w)
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.rep_r)


def _compile(source: str, name: str) -> Any:
    """Compiled `source`, with its lines known to tracebacks."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    return compile(source, name, "exec")


def check(verdict_fd: int, spec_path: str) -> int:
    """Run the spec's test; report {"passed", "calls", "suspicious"?, "failure"?} on `verdict_fd`."""
    os.set_inheritable(verdict_fd, False)
    private = _undumpable()
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    worker = Worker(spec["module"], spec["entry_point"])
    passed = False
    try:
        worker.start()
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        exec(_compile(spec["helpers"], "<reference helpers>"), namespace)
        namespace[spec["entry_point"]] = worker.proxy()
        exec(_compile(spec["test"], "<hidden test>"), namespace)
        passed = not (worker.suspicious or worker.failure)  # even when the test caught the error
    except (Exception, Forged) as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # the checker's own frames
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
    finally:
        worker.stop()
    report: dict[str, Any] = {"passed": passed, "calls": worker.calls, "private": private}
    if worker.suspicious:
        report["suspicious"] = worker.suspicious[:MAX_REASON]
    if worker.failure:
        report["failure"] = worker.failure[:MAX_REASON]
    send(verdict_fd, report)
    return 0 if passed else 1


def probe(verdict_fd: int, spec_path: str) -> int:
    """The test run the old way, for a module that failed `check`: the module imported here, its
    top-level `names` (those bound to something else than the test's own) laid over the helpers,
    the entry point called directly. When the test passes with them and fails without, reports the
    names it cannot do without. It never decides a pass; it only shows that those names bend the test."""
    os.set_inheritable(verdict_fd, False)
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    mod = load(spec["module"])
    helpers, test = _compile(spec["helpers"], "<reference helpers>"), _compile(spec["test"], "<hidden test>")

    def passes(names: list[str]) -> bool:
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        exec(helpers, namespace)
        namespace.update({k: getattr(mod, k) for k in names})
        namespace[spec["entry_point"]] = getattr(mod, spec["entry_point"])
        try:
            exec(test, namespace)
        except Exception:
            return False
        return True

    reference: dict[str, Any] = {"__builtins__": builtins}
    exec(helpers, reference)
    missing = object()
    laid = [k for k in spec["names"] if hasattr(mod, k)
            and reference.get(k, getattr(builtins, k, missing)) is not getattr(mod, k)]
    if not laid or passes([]) or not passes(laid):
        return 1
    needed = [k for k in laid if not passes([m for m in laid if m != k])]
    send(verdict_fd, {"passed": True, "names": needed or laid})
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve(argv[1], argv[2], int(argv[3]), int(argv[4]))
    if argv[:1] == ["probe"]:
        return probe(int(argv[1]), argv[2])
    return check(int(argv[0]), argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
