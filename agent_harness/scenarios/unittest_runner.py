"""The scorer's `python3 -m unittest ARGS`, run by the sandbox's python3 as ``python3 -P -c SOURCE FD ARGS``.

It reports on the harness's private pipe (fd FD) how many tests ran, failed, errored, were skipped,
expected to fail or unexpectedly passed, and what looked forged; the harness decides (verdict.py).
`-P` keeps the workspace off sys.path until unittest is imported, so a planted unittest.py cannot
replace the runner.

The code under test runs in this process, so two cheap forgeries are checked for here:
- a value whose own methods decide a comparison (an object whose ``__eq__`` always holds, an int
  subclass, ...): the comparison assertions (assertEqual and its kin, assertIn's member and a
  plain container) accept only plain data, compared by exact type: None, bool, int, float,
  complex, str, bytes, range, list, tuple, dict, set, frozenset, and the C-implemented value types
  of datetime and decimal; assertTrue/False accept those or any object of a C type. Anything else
  fails the test and is reported. A comparison written in the test's own code (``assertTrue(a ==
  b)``, a bare ``assert``) is not seen;
- replacing a method of unittest's classes or modules, or a built-in, while the tests run.
Code that finds the result object or the pipe on purpose is out of scope.
"""

from __future__ import annotations

import builtins
import datetime
import decimal
import json
import os
import sys
import types
import unittest
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100
MAX_NODES = 1_000_000
IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a C type whose methods cannot be replaced
_LEAVES = (type(None), bool, int, float, complex, str, bytes, range, datetime.date, datetime.datetime,
           datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal)
# Only C types: the pure-Python fallbacks of datetime and decimal could be patched.
LEAVES = frozenset(t for t in _LEAVES if t.__flags__ & IMMUTABLE)
CONTAINERS = frozenset((list, tuple, set, frozenset, dict))

# assertion -> the parameters that must be plain data (position after self, keyword name)
COMPARED: dict[str, tuple[tuple[int, str], ...]] = {
    **{name: ((0, "first"), (1, "second")) for name in (
        "assertEqual", "assertNotEqual", "assertAlmostEqual", "assertNotAlmostEqual", "assertCountEqual",
        "assertSequenceEqual", "assertListEqual", "assertTupleEqual", "assertDictEqual", "assertSetEqual",
        "assertMultiLineEqual")},
    **{name: ((0, "a"), (1, "b")) for name in ("assertGreater", "assertGreaterEqual", "assertLess", "assertLessEqual")},
    "assertTrue": ((0, "expr"),),
    "assertFalse": ((0, "expr"),),
    "assertIn": ((0, "member"),),
    "assertNotIn": ((0, "member"),),
}
TRUTH = ("assertTrue", "assertFalse")
MEMBERSHIP = ("assertIn", "assertNotIn")  # the container may be an object under test, a plain one is checked


def not_plain(value: object, truth: bool = False) -> str | None:
    """Why `value` is not plain data (the type found, or the bound passed); None when it is. For a
    truth test (`truth`) any C type will do: nobody can replace its `__bool__` or `__len__`."""
    seen = [0]

    def visit(v: Any, depth: int) -> str | None:
        seen[0] += 1
        if seen[0] > MAX_NODES or depth > MAX_DEPTH:
            return f"a value too large or too deep to check (over {MAX_NODES} parts or {MAX_DEPTH} levels)"
        t = type(v)
        if t in LEAVES or (truth and depth == 0 and t.__flags__ & IMMUTABLE):
            return None
        if t not in CONTAINERS:
            return f"a {getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')} object"[:120]
        items = [x for kv in v.items() for x in kv] if t is dict else v
        for x in items:
            why = visit(x, depth + 1)
            if why:
                return why
        return None

    return visit(value, 0)


def guard(cls: type, flags: list[str]) -> None:
    """Wrap the comparison assertions of `cls` so that their operands must be plain data."""
    for name, params in COMPARED.items():
        original = getattr(cls, name)

        def guarded(self: Any, *args: Any, _name: str = name, _params: tuple[tuple[int, str], ...] = params,
                    _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            operands = [args[i] if i < len(args) else kwargs.get(k) for i, k in _params]
            if _name in MEMBERSHIP and len(args) > 1 and type(args[1]) in CONTAINERS:
                operands.append(args[1])
            for value in operands:
                why = not_plain(value, truth=_name in TRUTH)
                if why:
                    note = f"{_name} was given {why}, not plain data"
                    if note not in flags:
                        flags.append(note)
                    raise AssertionError(note)
            return _original(self, *args, **kwargs)

        guarded.__name__ = guarded.__qualname__ = name
        setattr(cls, name, guarded)


def watched() -> list[tuple[str, dict[str, Any]]]:
    """The namespaces whose bindings must not change while the tests run, with their bindings now."""
    spaces: list[tuple[str, Any]] = [("builtins", builtins)]
    for mod in ("case", "result", "suite", "loader", "runner", "main"):
        module = sys.modules.get(f"unittest.{mod}")
        if isinstance(module, types.ModuleType):
            spaces.append((f"unittest.{mod}", module))
    for cls in (unittest.TestCase, unittest.TestResult, unittest.TextTestResult, unittest.TestSuite,
                unittest.TestLoader, unittest.TextTestRunner, unittest.TestProgram):
        spaces.append((f"unittest.{cls.__name__}", cls))
    return [(label, dict(vars(space))) for label, space in spaces]


def replaced(before: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The names bound in `before` that are now bound to something else or gone."""
    now = dict(watched())
    gone = object()
    out = []
    for label, names in before:
        current = now.get(label, {})
        out += [f"{label}.{k}" for k, v in names.items() if current.get(k, gone) is not v]
    return out


def counts(result: unittest.TestResult) -> dict[str, int]:
    return {"tests_run": result.testsRun, "failures": len(result.failures), "errors": len(result.errors),
            "skipped": len(result.skipped), "expected_failures": len(result.expectedFailures),
            "unexpected_successes": len(result.unexpectedSuccesses)}


def main() -> None:
    fd = int(sys.argv[1])
    os.set_inheritable(fd, False)
    write, dumps, exit_now = os.write, json.dumps, os._exit
    flags: list[str] = []
    guard(unittest.TestCase, flags)
    before = watched()
    sys.path.insert(0, os.getcwd())
    sys.argv = ["python -m unittest", *sys.argv[2:]]
    result = unittest.main(module=None, exit=False).result
    changed = replaced(before)
    if changed:
        flags.append(f"the code under test replaced {', '.join(changed[:5])}")
    report: dict[str, Any] = {**counts(result), "suspicious": flags[:5]}
    ok = result.testsRun > 0 and not flags and all(v == 0 for k, v in counts(result).items() if k != "tests_run")
    write(fd, dumps(report).encode())
    sys.stdout.flush()
    sys.stderr.flush()
    exit_now(0 if ok else 1)


if __name__ == "__main__":
    main()
