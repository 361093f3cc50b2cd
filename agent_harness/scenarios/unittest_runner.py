"""The scorer's `python3 -m unittest ARGS`, run by the sandbox's python3 as
``python3 -P -s -c SOURCE REPORT_FD NONCE_FD ARGS``, where SOURCE is unittest_values.py and
unittest_guard.py followed by this file (verdict.runner_source). `-P -s` keep the workspace and the
user's site folder off sys.path until the runner puts the workspace there, after unittest is
imported and the guard is in.

The code under test runs in this process, so nothing it can reach may decide the verdict. Design
(why: an audit hook is the one thing in a CPython process that its code cannot remove, and a
positive observation made there cannot be forged by making something else fail to happen):

- **An audit hook is the observer** (unittest_guard.py). Before anything of the workspace is
  imported, the runner reads from NONCE_FD (then closed) a secret nonce and the sha1 of the task's
  own Python files (its original files and the hidden tests), and installs a `sys.addaudithook`
  hook. The hook keeps all it knows in its own closure, reachable only through `gc`, frames or
  `ctypes`, whose use it flags, and reads no name that a module's namespace could rebind. Every
  line it writes on REPORT_FD starts with the nonce, so a line written by anything else (a forged
  report) fails the run as suspicious (verdict.py); a flag is written the moment it is raised and
  the final report counts them, so a flag cannot be taken back or kept from the harness.
- **A test passes only if its body returned.** The runner loads the suite with unittest's own
  TestProgram, then puts in each test *instance*'s dict a wrapper of its test method and of its
  tearDown that raises an audit event once the wrapped call has returned, and a `run` that raises
  one before and after the test. The hook accepts these events only from those wrappers' frames
  (their code objects, with the arguments it registered) and counts a test as passed only when,
  between its start and its end, its body and its tearDown returned and unittest's result recorded
  nothing against it. An exception unittest treats as a clean stop (`_ShouldStop`), `SkipTest` or
  any other exception from the code under test, a patched runner, result or outcome, or a test
  left out of the run, can at most fail a test; a test unittest counts as a success whose body did
  not return is flagged. `subTest` is replaced, per instance, by a plain context manager, so a
  failing subtest ends its test's body; a test method that returns a generator or coroutine (its
  body never ran) does not pass.
- **Only the task's tests count, as themselves.** The hook compiles the task's own files that are
  still unchanged and counts a test only if its function (under any decorators) is that code. A
  test counted is vouched for only if its function is named as the test it runs as, its decorators
  are the standard library's known ones (mock.patch, skip, context decorators, by identity) or
  functions the task's code makes, no class of its overrides unittest's machinery with code that is
  not the task's (a look-alike TestCase), and its built-ins are the interpreter's; a task test whose
  function was swapped, or left out of its class, is flagged. Tests in files the agent wrote run,
  and their failures fail the run, but their passes prove nothing; a run needs a test of the
  task's own.
- **Assertions cannot be bent.** The comparison assertions (assertEqual and its kin, assertIn's
  member and a plain container, assertTrue/False, and their deprecated aliases) are replaced, on
  TestCase and bound per test instance, by shims that have no closure and read no global name. The
  shim asks the hook first: the hook checks that each operand is plain data by exact type (None,
  bool, int, float, complex, str, bytes, range, list, tuple, dict, set, frozenset and the C value
  types of datetime and decimal; for assertTrue/False also an object whose truth C code decides from
  its own data: a C type without `__bool__`/`__len__`, a deque, array, bytearray, memoryview or dict
  view, but not a weakref proxy) and computes the comparison itself. An operand that is not plain
  data fails the test and is flagged; if unittest's assertion then returns although the hook's
  comparison does not hold (unittest was changed), the test fails and is flagged. A comparison
  written in the test's own code (``assertTrue(a == b)``, a bare ``assert``) is not seen.
- **Tamper checks at every step.** Every `unittest` and `unittest.*` module and class (key sets,
  values, functions' keyword defaults and closure cells), the built-ins, and the namespaces of the
  modules holding the tests (a name their code never binds is flagged after loading; a rebound one
  at each body's and test's end) are compared with snapshots after loading, at each test's end and
  each body's end (the built-ins and test modules against the body's and test's start, so a test's
  own mock.patch is fine) and at the end; the workspace's `.py` files are hashed before anything
  runs and compared after loading and at the end. Changing a plain scalar setting
  (``TestCase.maxDiff = None``) is allowed. The hook flags at once: setting a unittest function's
  or the runner's `__code__` or defaults (or any function's `__code__` from outside the standard
  library), a unittest class's `__bases__` or a test object's `__class__`; `gc.get_objects/
  get_referrers/get_referents`, `sys._current_frames`, another audit hook, any `ctypes` event;
  a frame obtained (`sys._getframe`, `tb_frame`, `gi_frame`, ...), `sys.settrace` or
  `sys.setprofile` called by code outside the standard library, or through inspect's, traceback's,
  logging's or bdb's frame helpers called from such code; opening or listing /proc/<self>/mem, fd,
  environ, maps, ... or /dev/fd.

Out of scope (in-process code can always find a way; the harness's static scan of the agent's
diff, tamper_scan.py, flags the usual spellings of these): frames obtained through a route CPython
does not audit (a signal handler's frame argument, stdlib code that calls `sys._getframe` as a
callback it was given, a mock's side effect); a whole test class removed, or a test module's data
rewritten, while the test files load (a patch of unittest's loader or of `builtins.__build_class__`
made and undone then); an in-place change of a test module's data while a test runs; a patch made
and undone within one test of what the hook does not compare itself (assertRaises,
assertIsInstance, a class's `__getattribute__`, ...); errors in cleanups and class or module
fixtures, which only unittest's result records; code that crafts a hash collision to run inside
the hook; stdlib-named code made with `marshal`.
"""

from __future__ import annotations

import _thread
import inspect
import os
import sys
import types
import unittest
import unittest.runner
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # defined by unittest_values.py and unittest_guard.py, which come first in the source
    from .unittest_guard import EVENT, code_objects, install, py_files
    from .unittest_values import COMPARED


def make_shims(originals: dict[str, Any]) -> dict[str, Any]:
    """name -> a function with the signature of unittest's `originals[name]` that asks the hook, calls
    the original, then tells the hook it returned. No closure and no global name: its helpers are
    default arguments, which nothing can swap."""
    shims: dict[str, Any] = {}
    for name, original in originals.items():
        params = list(inspect.signature(original).parameters.values())[1:]
        defaults = {f"_d{i}": p.default for i, p in enumerate(params) if p.default is not p.empty}
        spelled = [p.name + (f"=_d{i}" if f"_d{i}" in defaults else "") for i, p in enumerate(params)]
        args = ", ".join(p.name for p in params)
        source = (f"def {name}(self, {', '.join(spelled)}, _a=_audit, _o=_original, _e=_event, _n=_name):\n"
                  f"    _a(_e, 'assert', _n, ({args},), self)\n"
                  f"    r = _o(self, {args})\n"
                  f"    _a(_e, 'asserted', _n)\n"
                  f"    return r\n")
        space: dict[str, Any] = {"_audit": sys.audit, "_original": original, "_event": EVENT, "_name": name,
                                 **defaults, "__builtins__": {}}
        exec(compile(source, f"<agent-harness {name}>", "exec"), space)
        shims[name] = space[name]
    return shims


def count_problems(result: Any, _len: Any = len, _getattr: Any = getattr,
                   _names: tuple[str, ...] = ("failures", "errors", "skipped", "expectedFailures",
                                              "unexpectedSuccesses")) -> int:
    """How many failures, errors, skips, expected failures and unexpected successes `result` holds."""
    n = 0
    if result is not None:
        for k in _names:
            n += _len(_getattr(result, k, ()))
    return n


def wrappers(audit: Any = sys.audit, count: Any = count_problems) -> dict[str, Any]:
    """The per-test wrappers. Each test gets copies with its own defaults (`_k` its number, `_m` /
    `_t` / `_case` what it wraps), the only names they use."""

    def body(_k: int = -1, _m: Any = None, _a: Any = audit, _e: str = EVENT,
             _lazy: tuple[Any, ...] = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType),
             _type: Any = type) -> Any:
        _a(_e, "body", _k)
        r = _m()
        for t in _lazy:
            if _type(r) is t:
                _a(_e, "unrun", _k)
                return r
        _a(_e, "body_end", _k)
        return r

    async def abody(_k: int = -1, _m: Any = None, _a: Any = audit, _e: str = EVENT) -> Any:
        _a(_e, "body", _k)
        r = await _m()
        _a(_e, "body_end", _k)
        return r

    def run(result: Any = None, _k: int = -1, _case: Any = None, _r: Any = None, _a: Any = audit,
            _e: str = EVENT, _n: Any = count) -> Any:
        _a(_e, "begin", _k)
        before = _n(result)
        try:
            return _r(_case, result)
        finally:
            _a(_e, "end", _k, _n(result) - before)

    def td(_k: int = -1, _t: Any = None, _a: Any = audit, _e: str = EVENT) -> Any:
        r = _t()
        _a(_e, "td_end", _k)
        return r

    return {"body": body, "abody": abody, "run": run, "td": td}


def copy_with(fn: Any, name: str, defaults: tuple[Any, ...], _function: Any = types.FunctionType) -> Any:
    return _function(fn.__code__, fn.__globals__, name, defaults)


def main(_sys: Any = sys, _os: Any = os, _unittest: Any = unittest, _types: Any = types, _inspect: Any = inspect,
         _warnings: Any = warnings, _rlock: Any = _thread.RLock, _isinstance: Any = isinstance, _type: Any = type,
         _getattr: Any = getattr, _setattr: Any = setattr, _hasattr: Any = hasattr, _vars: Any = vars,
         _len: Any = len, _str: Any = str, _list: Any = list, _enumerate: Any = enumerate,
         _copy_with: Any = copy_with, _ev: str = EVENT, _compared: Any = COMPARED,
         _Exception: Any = Exception, _bool: Any = bool) -> None:
    """Install the guard, load the tests, wrap each one, run them and ask the guard to report."""
    report_fd, nonce_fd = int(_sys.argv[1]), int(_sys.argv[2])
    _os.set_inheritable(report_fd, False)
    TestCase, TestSuite = _unittest.TestCase, _unittest.TestSuite
    TestProgram, TextTestResult = _unittest.TestProgram, _unittest.TextTestResult
    Writeln = _unittest.runner._WritelnDecorator
    method_type, iscoro, audit = _types.MethodType, _inspect.iscoroutinefunction, _sys.audit
    shims = make_shims({name: _vars(TestCase)[name] for name in _compared})
    for name, shim in shims.items():
        _setattr(TestCase, name, shim)
    for alias, v in _list(_vars(TestCase).items()):  # assertEquals, failUnless, ...: they call the originals
        cells = _getattr(v, "__closure__", None) or ()
        target = [c.cell_contents for c in cells if _getattr(c.cell_contents, "__name__", None) in shims]
        if target and alias not in shims:
            _setattr(TestCase, alias, shims[target[0].__name__])
    made = wrappers()
    body_w, abody_w, run_w, td_w = made["body"], made["abody"], made["run"], made["td"]
    default_subtest = TestCase.subTest
    stderr, stdout = _sys.stderr, _sys.stdout
    cwd = _os.getcwd()
    trusted = tuple(p.rstrip("/") + "/" for p in _sys.path if p and _os.path.isabs(p) and p != cwd
                    and not cwd.startswith(p.rstrip("/") + "/"))
    shim_codes = {s.__code__ for s in shims.values()}
    own = code_objects(main, install, make_shims, wrappers, count_problems, copy_with, py_files, code_objects)
    install(report_fd, nonce_fd, own | shim_codes, shim_codes, {k: v.__code__ for k, v in made.items()}, trusted, cwd)

    # Load with unittest's own command line, without running.
    got: list[Any] = []
    _sys.path.insert(0, cwd)
    argv = ["python -m unittest", *_sys.argv[3:]]
    _sys.argv = argv[:1]
    prog = TestProgram(module=None, argv=argv, exit=False,
                       testRunner=_types.SimpleNamespace(run=lambda test: got.append(test)))
    cases: list[Any] = []
    todo = [got[0]] if got else []
    while todo:
        item = todo.pop()
        if _isinstance(item, TestSuite):
            todo += _list(item)[::-1]
        else:
            cases.append(item)
    for k, case in _enumerate(cases):
        if not _isinstance(case, TestCase):  # nothing observes it: it cannot pass
            audit(_ev, "register", k, case, None, None, _str(case)[:150], "")
            continue
        space = _vars(case)
        name = case._testMethodName
        method = _getattr(case, name)
        wrapped = abody_w if iscoro(method) else body_w
        body = _copy_with(wrapped, name, (k, method, *wrapped.__defaults__[2:]))
        for attr in ("__unittest_skip__", "__unittest_skip_why__", "__unittest_expecting_failure__"):
            if _hasattr(method, attr):
                _setattr(body, attr, _getattr(method, attr))
        space[name] = body
        teardown = _getattr(case, "tearDown")
        if iscoro(teardown):
            teardown = None  # an async tearDown is awaited by unittest; only the result speaks for it
        else:
            space["tearDown"] = _copy_with(td_w, "tearDown", (k, teardown, *td_w.__defaults__[2:]))
        space["run"] = _copy_with(run_w, "run", (None, k, case, _type(case).run, *run_w.__defaults__[4:]))
        for shim_name, shim in shims.items():
            if _getattr(_type(case), shim_name, None) is shim:
                space[shim_name] = method_type(shim, case)
        if _getattr(_type(case), "subTest", None) is default_subtest:
            space["subTest"] = lambda *a, _lock=_rlock, **kw: _lock()
        audit(_ev, "register", k, case, method, teardown, _str(case.id())[:150], name)
    # whether the command line chose some tests only (-k, or named tests; parsed before any test file loaded)
    audit(_ev, "run", _bool(prog.testNamePatterns) or _getattr(prog, "testNames", None) is not None)

    stream = Writeln(stderr)
    result = TextTestResult(stream, True, prog.verbosity)
    result.failfast, result.buffer, result.tb_locals = prog.failfast, prog.buffer, prog.tb_locals
    with _warnings.catch_warnings():
        if prog.warnings:
            _warnings.simplefilter(prog.warnings)
        result.startTestRun()
        try:
            if got:
                got[0](result)
        finally:
            result.stopTestRun()
    result.printErrors()
    counts = {"tests_run": result.testsRun, "failures": _len(result.failures), "errors": _len(result.errors),
              "skipped": _len(result.skipped), "expected_failures": _len(result.expectedFailures),
              "unexpected_successes": _len(result.unexpectedSuccesses)}
    stream.writeln(result.separator2)
    stream.writeln(f"Ran {result.testsRun} test{'s' if result.testsRun != 1 else ''}")
    stream.writeln()
    bad = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in counts.items() if v and k != "tests_run")
    stream.writeln(f"FAILED ({bad})" if bad else "OK")
    for f in (stdout, stderr, _sys.stdout, _sys.stderr):
        try:  # noqa: SIM105 (contextlib would be a name read after the tests loaded)
            f.flush()
        except _Exception:  # a closed or replaced stream: nothing to flush
            pass
    audit(_ev, "finish", counts)
    _os._exit(1)  # the guard exits when it reports: reaching this line means it did not


if __name__ == "__main__":
    main()
