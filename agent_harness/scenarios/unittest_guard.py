"""The audit hook of the scorer's unittest runner: the observer that decides, out of reach of the
code under test. It travels in the runner's `-c` source after unittest_values.py (verdict.runner_source);
unittest_runner.py's docstring gives the design.

`install` is one closure by design (hence its length): the hook and every helper it calls keep
their state (the nonce, the expected tests, the snapshots) in cells that only the interpreter's
list of audit hooks reaches, and they read no global or built-in name at run time (all are bound
when `install` runs, before anything of the workspace is imported), so nothing set in a module's
namespace changes what they do. Inside the hook nothing of the code under test's making is called:
objects are looked at through C-level accessors bound here (exact types, `type.__dict__`'s
descriptors), so no method of theirs runs while the hook is busy (when its own events are not seen).
"""

from __future__ import annotations

import _thread
import bdb
import builtins
import contextlib
import dis
import hashlib
import inspect
import logging
import os
import sys
import traceback
import types
import unittest
import unittest.mock
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # unittest_values.py comes first in the runner's source
    from .unittest_values import COMPARED, CONTAINERS, value_holds, value_label, value_not_plain

EVENT = "agent_harness.unittest"
MAX_PY_FILES = 10000  # the workspace quota allows 10,000 files and folders
MAX_PY_BYTES = 1 << 20
MAX_FLAGS = 20
SCALARS = frozenset((type(None), bool, int, float, str))  # settings such as maxDiff: changing them is allowed
FRAME_ATTRS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
PROC_SECRETS = frozenset(("mem", "fd", "fdinfo", "environ", "cmdline", "maps", "smaps", "pagemap", "task",
                          "map_files", "auxv", "stack", "syscall"))
ALWAYS = frozenset(("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                    "sys.addaudithook"))
FROM_OUTSIDE = frozenset(("sys._getframe", "sys.settrace", "sys.setprofile"))  # flagged when called from outside
CARE = ALWAYS | FROM_OUTSIDE | {EVENT, "object.__setattr__", "object.__delattr__", "object.__getattr__", "open",
                                "os.listdir", "os.scandir"}
CONTROL = {i: f"\\u{i:04x}" for i in range(32)} | {127: "\\u007f"}
MAX_GIVEN = 1 << 20  # what the harness sends before the run: the nonce and the task files' digests
# unittest names a test class's base may override freely (fixtures, settings, class bookkeeping) ...
FREE_NAMES = frozenset(("setUp", "tearDown", "setUpClass", "tearDownClass", "asyncSetUp", "asyncTearDown",
                        "__doc__", "__module__", "__qualname__", "__dict__", "__weakref__", "__annotations__",
                        "__orig_bases__", "__parameters__", "_classSetupFailed", "_class_cleanups"))
# ... and names of object's that it may not, besides unittest's own
HOOK_NAMES = frozenset(("__getattribute__", "__getattr__", "__setattr__", "__init__", "__new__", "__call__",
                        "__init_subclass__", "__class_getitem__"))


def py_files(root: str, _scandir: Any = os.scandir, _open: Any = os.open, _read: Any = os.read,
             _close: Any = os.close, _sha1: Any = hashlib.sha1, _flags: int = os.O_RDONLY | os.O_NOFOLLOW,
             _endswith: Any = str.endswith, _startswith: Any = str.startswith, _len: Any = len,
             _sorted: Any = sorted, _limits: tuple[int, int] = (MAX_PY_FILES, MAX_PY_BYTES),
             _OSError: Any = OSError) -> dict[str, bytes]:
    """sha1 of each `.py` file under `root` (links not followed, hidden folders skipped), bounded.
    Everything it calls is a C function bound here, so the code under test cannot change its answer."""
    out: dict[str, bytes] = {}
    todo = [root]
    while todo and _len(out) < _limits[0]:
        top = todo.pop()
        try:
            with _scandir(top) as it:
                entries = _sorted((e.name, e.path, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False))
                                  for e in it)
        except _OSError:
            continue
        for name, path, is_dir, is_file in entries:
            if is_dir and not _startswith(name, "."):
                todo.append(path)
            elif is_file and _endswith(name, ".py") and _len(out) < _limits[0]:
                try:
                    fd = _open(path, _flags)
                    try:
                        out[path] = _sha1(_read(fd, _limits[1])).digest()
                    finally:
                        _close(fd)
                except _OSError:
                    out[path] = b""
    return out


def code_objects(*roots: Any) -> set[Any]:
    """The code objects of `roots` (functions or code) and every code object nested in them."""
    out: set[Any] = set()
    todo = [getattr(r, "__code__", r) for r in roots]
    while todo:
        c = todo.pop()
        if isinstance(c, types.CodeType) and c not in out:
            out.add(c)
            todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return out


def install(report_fd: int, nonce_fd: int, own: set[Any], shim_codes: set[Any], wrapper_codes: dict[str, Any],
            trusted: tuple[str, ...], cwd: str) -> None:
    """Read the nonce, take the snapshots and install the hook. Called by the runner's `main`, whose
    frame is the only one the hook takes the run's orders (register, run, finish) from."""
    given = b""
    while len(given) < MAX_GIVEN:
        chunk = os.read(nonce_fd, 65536)
        if not chunk:
            break
        given += chunk
    os.close(nonce_fd)
    nonce, _, digests = given.partition(b"\n")
    if len(nonce.strip()) < 16:
        raise SystemExit("agent-harness unittest runner: no nonce")
    prefix = nonce.strip() + b" "
    # sha1 of each file of the task's own (its original .py files, the hidden tests): code compiled
    # from one of them, unchanged, is the only code the guard vouches for as a test
    task_digests = frozenset(bytes.fromhex(h) for h in digests.decode("ascii", "replace").split() if len(h) == 40)
    del given, nonce, chunk
    getframe, get_ident, add_hook = sys._getframe, _thread.get_ident, sys.addaudithook
    write, exit_now = os.write, os._exit
    startswith, str_join, str_split, str_isdigit = str.startswith, str.join, str.split, str.isdigit
    encode, decode, replace, translate = str.encode, bytes.decode, str.replace, str.translate
    mro_of = type.__dict__["__mro__"].__get__
    cls_dict, qualname_of = type.__dict__["__dict__"].__get__, type.__dict__["__qualname__"].__get__
    module_of = type.__dict__["__module__"].__get__  # C types keep it in their name, not their dict
    mod_dict = vars(types.ModuleType)["__dict__"].__get__
    func_code, func_dict = vars(types.FunctionType)["__code__"].__get__, vars(types.FunctionType)["__dict__"].__get__
    func_builtins, builtins_space = vars(types.FunctionType)["__builtins__"].__get__, vars(builtins)
    method_func, method_type, code_type = vars(types.MethodType)["__func__"].__get__, types.MethodType, types.CodeType
    read_fd, open_fd, close_fd, compile_, o_rdonly = os.read, os.open, os.close, compile, os.O_RDONLY | os.O_NOFOLLOW
    sha1, max_py_bytes = hashlib.sha1, MAX_PY_BYTES
    object_type, staticmethod_type, classmethod_type = object, staticmethod, classmethod
    wrapped_of = {staticmethod: vars(staticmethod)["__func__"].__get__,
                  classmethod: vars(classmethod)["__func__"].__get__}
    free_names, hooks_names = FREE_NAMES, HOOK_NAMES
    endswith = str.endswith
    store_ops = frozenset(dis.opmap[n] for n in ("STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"))
    global_ops = frozenset(dis.opmap[n] for n in ("STORE_GLOBAL", "DELETE_GLOBAL"))
    op_extended, op_star = dis.opmap["EXTENDED_ARG"], dis.opmap.get("IMPORT_STAR", -1)
    dynamic_names = frozenset(("globals", "vars", "setattr", "delattr", "exec", "eval", "__dict__", "modules",
                               "__import__", "import_module"))
    str_rfind = str.rfind
    _type, _len, _repr, _str, _int, _bool, _abs, _round = type, len, repr, str, int, bool, abs, round
    _list, _tuple, _dict, _set, _sorted, _sum = list, tuple, dict, set, sorted, sum
    _zip, _range, _any, _all = zip, range, any, all
    function_type, tuple_type, str_type, bytes_type, dict_type, module_type, type_type = (
        types.FunctionType, tuple, str, bytes, dict, types.ModuleType, type)
    Exc, AssertionError_ = BaseException, AssertionError
    ValueError_, OSError_ = ValueError, OSError
    scalars, compared, control, containers = SCALARS, COMPARED, CONTROL, CONTAINERS
    not_plain, holds, label_of = value_not_plain, value_holds, value_label
    _id = id
    frame_attrs, proc_secrets, always, from_outside_events, care = FRAME_ATTRS, PROC_SECRETS, ALWAYS, FROM_OUTSIDE, CARE
    max_flags, ev = MAX_FLAGS, EVENT
    hash_files, builtins_module, modules = py_files, builtins, sys.modules
    body_code, abody_code = wrapper_codes["body"], wrapper_codes["abody"]
    run_code, td_code = wrapper_codes["run"], wrapper_codes["td"]
    leaker_codes = code_objects(inspect.currentframe, inspect.stack, inspect.trace, inspect.getouterframes,
                           inspect.getinnerframes, traceback.walk_stack, traceback.walk_tb, logging.currentframe,
                           *(v for v in vars(bdb.Bdb).values() if isinstance(v, types.FunctionType)))
    unittest_module = unittest
    ut_classes = (unittest.TestCase, unittest.TestResult, unittest.TestSuite, unittest.TestLoader)
    main_frame = getframe(1)
    # code objects are compared by id (they are all kept alive): hashing one hashes its constants
    own_ids, shim_ids = frozenset(id(c) for c in own), frozenset(id(c) for c in shim_codes)
    wrapper_codes_kept = code_objects(*(getattr(k, n) for k in (unittest.mock._patch, unittest.mock._patch_dict)
                                        for n in ("decorate_callable", "decorate_async_callable")),
                                      unittest.case.skip, contextlib.ContextDecorator.__call__,
                                      contextlib.AsyncContextDecorator.__call__)
    wrapper_ids = frozenset(id(c) for c in wrapper_codes_kept)
    leakers = frozenset(id(c) for c in leaker_codes)
    empty = object()  # an empty closure cell

    def has(seq: Any, x: Any) -> bool:
        return _any(k is x for k in seq)

    def text(v: Any) -> str:
        return v if _type(v) is str_type else "?"

    # ---- snapshots ------------------------------------------------------------------------
    def cell(c: Any) -> Any:
        try:
            return c.cell_contents
        except ValueError_:
            return empty

    def fn_state(v: Any) -> Any:
        """What can change inside a function without an audit event: its keyword defaults (a dict)
        and its closure cells. None when it has neither (replacing `__defaults__` is audited)."""
        if _type(v) is not function_type:
            return None
        kw, cells = v.__kwdefaults__, v.__closure__
        if not kw and not cells:
            return None
        return (_tuple(kw.items()) if _type(kw) is dict_type else kw, _tuple(cell(c) for c in (cells or ())))

    def watch(label: str, space: Any) -> tuple[dict[Any, Any], list[tuple[str, Any, Any]]]:
        """A copy of `space`, and (name, function, state) of its functions with mutable insides."""
        copy = _dict(space)
        inside = []
        for k, v in copy.items():
            st = fn_state(v)
            if st is not None:
                inside.append((f"{label}.{text(k)}", v, st))
        return copy, inside

    def unittest_spaces() -> list[tuple[str, Any, Any]]:
        """(label, object, its namespace) of every unittest module and every class defined in them: the
        last answer while the same modules are there (a class added to one is a change check() sees)."""
        found = _sorted((k, v) for k, v in _dict(modules).items()
                        if _type(k) is str_type and (k == "unittest" or startswith(k, "unittest.")))
        key = _tuple((k, _id(v)) for k, v in found)
        if spaces_cache and spaces_cache[0] == key:
            return spaces_cache[1]
        out: list[tuple[str, Any, Any]] = []
        package = mod_dict(unittest_module)
        for name, m in found:
            if _type(m) is not module_type:
                out.append((name, m, {}))
                continue
            space = mod_dict(m)
            out.append((name, m, space))
            for k, v in _dict(space).items():  # each class once, in the module that defines it
                if _type(k) is str_type and _type(v) is type_type and text(cls_dict(v).get("__module__")) == name \
                        and text(qualname_of(v)) == k:
                    public = k in package and package[k] is v  # unittest.TestCase rather than unittest.case.TestCase
                    out.append((f"unittest.{k}" if public else f"{name}.{k}", v, cls_dict(v)))
        spaces_cache[:] = [key, out]
        return out

    spaces_cache: list[Any] = []
    unittest_base = {label: (obj, *watch(label, space)) for label, obj, space in unittest_spaces()}
    builtins_base = _dict(mod_dict(builtins_module))
    files_base = hash_files(cwd)

    flags: list[str] = []
    tampered: set[str] = set()  # what check() found, each told once
    state: dict[str, Any] = {"current": None, "lost": False, "recorded": 0, "builtins_test": builtins_base,
                             "builtins_body": builtins_base,
                             "alive": (own, shim_codes, leaker_codes, wrapper_codes_kept)}  # no id above is reused
    busy: set[int] = set()
    tests: dict[int, dict[str, Any]] = {}
    genuine: dict[str, set[Any]] = {"keys": set(), "quals": set()}  # of the test files' own code
    task_files: list[str] = []  # the task's own .py files, unchanged
    module_codes: dict[str, Any] = {}  # path -> the code of that file
    spaces: list[tuple[str, Any, set[str]]] = []  # (path, namespace, the names its functions rebind)
    pending: dict[Any, bool | None] = {}

    # ---- the channel ----------------------------------------------------------------------
    def enc(v: Any) -> str:
        t = _type(v)
        if v is None or t is _bool:
            return "null" if v is None else "true" if v else "false"
        if t is _int:
            return _str(v)
        if t is _list:
            return "[" + str_join(", ", [enc(x) for x in v]) + "]"
        if t is dict_type:
            return "{" + str_join(", ", [enc(k) + ": " + enc(x) for k, x in v.items()]) + "}"
        s = decode(encode(text(v), "ascii", "replace"), "ascii")
        return '"' + translate(replace(replace(s, "\\", "\\\\"), '"', '\\"'), control) + '"'

    def send(obj: dict[str, Any]) -> None:
        try:
            write(report_fd, prefix + encode(enc(obj), "ascii") + b"\n")
        except OSError_:
            state["lost"] = True

    def flag(note: str) -> None:
        note = note[:300]
        if note in flags:
            return
        flags.append(note)
        if _len(flags) <= max_flags:
            send({"flag": note})

    # ---- who is asking --------------------------------------------------------------------
    def untrusted(fr: Any) -> bool:
        if fr is None:
            return False
        code = fr.f_code
        if _id(code) in own_ids:
            return False
        name = code.co_filename
        if _type(name) is not str_type:
            return True
        if startswith(name, "<frozen "):
            return False
        return _all(not startswith(name, p) for p in trusted)

    def from_outside(fr: Any) -> bool:
        """Whether `fr` is code outside the standard library, or a frame helper called from there."""
        while fr is not None and _id(fr.f_code) in leakers:
            fr = fr.f_back
        return untrusted(fr)

    def where(fr: Any) -> str:
        return text(fr.f_code.co_filename)[-80:]

    def is_class(v: Any) -> bool:
        return has(mro_of(_type(v)), type_type)

    def is_ut_class(c: Any) -> bool:
        if not is_class(c):
            return False
        for k in mro_of(c):
            if has(ut_classes, k):
                return True
        return startswith(text(cls_dict(c).get("__module__")), "unittest")

    # ---- tamper checks --------------------------------------------------------------------
    def same(a: Any, b: Any) -> bool:
        if _type(a) is not tuple_type or _type(b) is not tuple_type or _len(a) != _len(b):
            return a is b
        return _all(same(x, y) for x, y in _zip(a, b))

    def diff(label: str, base: dict[Any, Any], now: dict[Any, Any]) -> list[str]:
        named = {k: v for k, v in now.items() if _type(k) is str_type}
        out = [f"added a key that is not a name to {label}"] if _len(named) != _len(now) else []
        base = {k: v for k, v in base.items() if _type(k) is str_type}
        now = named
        for k, v in base.items():
            if k not in now:
                out.append(f"removed {label}.{text(k)}")
            elif now[k] is not v and not (_type(v) in scalars and _type(now[k]) in scalars):
                out.append(f"replaced {label}.{text(k)}")
        if _len(now) != _len(base) or out:
            for k, v2 in now.items():
                if k not in base and _type(v2) not in scalars and not (label == "builtins" and k == "_") \
                        and not unittest_own(label, k, v2):
                    out.append(f"added {label}.{text(k)}")
        return out

    def unittest_own(label: str, key: Any, v: Any) -> bool:
        """A name unittest adds itself: a submodule imported since, or a class its package loads lazily
        (unittest.IsolatedAsyncioTestCase), under its own name."""
        if _type(key) is not str_type:
            return False
        if _type(v) is module_type:
            return text(mod_dict(v).get("__name__")) == f"{label}.{key}"
        if not is_class(v):
            return False
        return startswith(text(cls_dict(v).get("__module__")), "unittest") and text(qualname_of(v)) == key

    def check(builtins_against: dict[str, Any] | None, when: str, deep: bool = True) -> None:
        """Flag what changed in unittest (and the built-ins, against `builtins_against`); `deep`: also
        inside unittest's functions."""
        found = []
        seen = _set()
        for label, obj, space in unittest_spaces():
            seen.add(label)
            if label not in unittest_base:  # imported since (unittest.mock, unittest.async_case): from now on
                unittest_base[label] = (obj, *watch(label, space))
                continue
            obj0, base, inside = unittest_base[label]
            if obj is not obj0:
                found.append(f"replaced {label}")
                continue
            found += diff(label, base, _dict(space))
            if deep:
                found += [f"changed the defaults or closure of {name}" for name, fn, st in inside
                          if not same(st, fn_state(fn))]
        found += [f"removed {label}" for label in unittest_base if label not in seen]
        if builtins_against is not None:
            found += diff("builtins", builtins_against, _dict(mod_dict(builtins_module)))
        for item in [x for x in found if x not in tampered][:5]:
            tampered.add(item)
            flag(f"the code under test {item} ({when})")

    def check_files(when: str) -> None:
        now = hash_files(cwd)
        for p in [p for p, h in files_base.items() if now.get(p) != h][:3]:
            flag(f"the code under test changed or removed {p[_len(cwd) + 1:] if startswith(p, cwd) else p} ({when})")

    # ---- assertions --------------------------------------------------------------------------
    def on_assert(fr: Any, args: tuple[Any, ...]) -> BaseException | None:
        name, values, case = args[1], args[2], args[3]
        if _type(name) is not str_type or name not in compared or _type(values) is not tuple_type:
            return None
        positions, kind = compared[name]
        operands = [values[i] for i in positions if i < _len(values)]
        if kind in ("in", "not_in") and _len(values) > 1 and _type(values[1]) in containers:
            operands.append(values[1])
        for v in operands:
            why = not_plain(v, kind in ("true", "false"))
            if why:
                note = f"{name} was given {why}, not plain data"
                flag(note)
                return AssertionError_(note)
        pending[fr] = holds(kind, values, case)
        return None

    def on_asserted(fr: Any, args: tuple[Any, ...]) -> BaseException | None:
        if pending.pop(fr, None) is False:
            note = f"unittest's {text(args[1])} returned although its comparison does not hold (unittest was changed)"
            flag(note)
            return AssertionError_(note)
        return None

    # ---- the tests ----------------------------------------------------------------------
    def registered(fr: Any, code: Any, obj_name: str, obj_key: str) -> dict[str, Any] | None:
        if fr.f_code is not code:
            flag(f"a guard event came from code that is not the runner's, in {where(fr)}")
            return None
        loc = fr.f_locals
        k = loc.get("_k")
        t = tests.get(k) if _type(k) is _int else None
        if t is None or loc.get(obj_name) is not t[obj_key]:
            flag("a guard wrapper was called with arguments of its own")
            return None
        return t

    def on_run(what: str, args: tuple[Any, ...]) -> None:
        if what == "register" and _len(args) == 7 and _type(args[1]) is _int:
            _, k, case, method, teardown, name, method_name = args
            tests[k] = {"case": case, "method": method, "teardown": teardown, "name": text(name), "runs": 0,
                        "method_name": text(method_name), "passed": None, "why": "it never ran", "body": False,
                        "td": False, "unrun": False, "counted": False, "vouched": False}
        elif what == "run":
            check(builtins_base, "while the tests loaded")
            check_files("while the tests loaded")
            if _len(args) == 2:
                vouch_all(args[1])
        elif what == "finish":
            finish(args[1] if _len(args) > 1 else None)

    # ---- the tests' own code ---------------------------------------------------------------
    def code_key(c: Any) -> tuple[Any, ...]:
        return (c.co_filename, c.co_firstlineno, c.co_qualname, c.co_code)

    def learn(path: str, digest: bytes) -> None:
        """Compile a test file, if it is as it was before anything ran, as the import system does, and
        remember its code, all of it."""
        try:
            fd = open_fd(path, o_rdonly)
            try:
                source = read_fd(fd, max_py_bytes)
            finally:
                close_fd(fd)
            if sha1(source).digest() != digest:
                return
            todo = [compile_(source, path, "exec", dont_inherit=True)]
        except Exc:
            return
        task_files.append(path)
        module_codes[path] = todo[0]
        while todo:
            c = todo.pop()
            genuine["keys"].add(code_key(c))
            genuine["quals"].add((c.co_filename, c.co_qualname))
            todo += [k for k in c.co_consts if _type(k) is code_type]

    def task_code(c: Any) -> bool:
        return code_key(c) in genuine["keys"]

    def decorator_code(c: Any) -> bool:
        """A wrapper a decorator made: one of the standard library's (mock.patch, skip, a context
        decorator), kept by identity, or a function the task's own code makes inside another."""
        return _id(c) in wrapper_ids or (task_code(c) and "<locals>" in text(c.co_qualname))

    def foreign_override(case: Any) -> str | None:
        """`Class overrides unittest's name` when a class of the test's that is neither unittest's nor the
        task's own code replaces a part of unittest's machinery (an assertion, run, __getattribute__...)."""
        classes = mro_of(_type(case))
        machinery: set[str] = _set()
        for c in classes:
            if startswith(text(module_of(c)), "unittest"):
                machinery.update(k for k in cls_dict(c) if _type(k) is str_type)
        for c in classes:
            if c is object_type or startswith(text(module_of(c)), "unittest"):
                continue
            for k, v in _dict(cls_dict(c)).items():
                if _type(k) is not str_type or k in free_names or (k not in machinery and k not in hooks_names):
                    continue
                f = v
                if _type(f) in (staticmethod_type, classmethod_type):
                    f = wrapped_of[_type(f)](f)
                if _type(f) in scalars or (_type(f) is function_type and task_code(func_code(f))):
                    continue
                return f"{label_of(c)} overrides unittest's {k}"
        return None

    def vouch(t: dict[str, Any]) -> None:
        """Sort test `t` out. It *counts* when its function (under any decorators) is code compiled from
        an unchanged file of the task's own; a test that does not count (the agent's own) still runs and
        its failures fail the run, but its pass proves nothing. A test that counts is *vouched for* (may
        pass) when its function is named as the test it runs as (`Class.name` for a class of the test's,
        or made in a function), its decorators are the standard library's or the task's, and no class of
        the test's from elsewhere replaces unittest's machinery."""
        fn, chain = t["method"], []
        for _ in _range(10):
            if _type(fn) is method_type:
                fn = method_func(fn)
            if _type(fn) is not function_type:
                break
            chain.append(func_code(fn))
            if func_builtins(fn) is not builtins_space:
                flag(f"the test function of {t['name']} sees built-ins of someone else's making")
            fn = func_dict(fn).get("__wrapped__")
        if not chain:
            t["why"] = "not one of the task's own tests (not a function)"
            return
        inner, name = chain[-1], t["method_name"]
        classes = [text(qualname_of(c)) for c in mro_of(_type(t["case"]))]
        own_name = _any(inner.co_qualname == f"{c}.{name}" for c in classes) or "<locals>" in text(inner.co_qualname)
        replaced = _any((f, f"{c}.{name}") in genuine["quals"] for c in classes for f in task_files)
        t["inner"] = inner
        if code_key(inner) not in genuine["keys"] or not own_name:
            if replaced:  # the task's test of that name exists: something else runs in its place
                t["counted"], t["why"] = True, "another function runs in its place"
                flag(f"the code under test replaced the test method {t['name']} (it runs "
                     f"{text(inner.co_qualname)[:60]} of {text(inner.co_filename)[-60:]})")
            else:
                t["why"] = f"not one of the task's own tests (its code is in {text(inner.co_filename)[-60:]})"
            return
        t["counted"] = True
        override = foreign_override(t["case"])
        if override:
            t["why"] = override
            flag(f"{override} (in {t['name']})")
        elif not _all(decorator_code(c) for c in chain[:-1]):
            odd = [c for c in chain[:-1] if not decorator_code(c)][0]
            t["why"] = (f"it runs under {text(odd.co_qualname)[:60]} of {text(odd.co_filename)[-60:]}, "
                        "not a decorator of the standard library's or of the task's")
            if not startswith(text(odd.co_filename), cwd + "/"):  # no honest code dresses that up as a decorator
                flag(f"the test method {t['name']} runs under {text(odd.co_qualname)[:60]} of "
                     f"{text(odd.co_filename)[-60:]}, dressed up as its decorator")
        else:
            t["vouched"] = True

    def vouch_all(filtered: Any) -> None:
        for path, digest in files_base.items():
            if digest in task_digests:
                learn(path, digest)
        ran: set[tuple[str, str, str]] = _set()  # (file, class, name) of each test method that ran
        concrete: set[tuple[str, str]] = _set()  # (file, class) of each class whose own tests ran
        for t in tests.values():
            if t["method"] is not None:
                vouch(t)
            if t["counted"] and _type(t.get("inner")) is code_type:  # ran as itself, vouched for or not
                f, q = t["inner"].co_filename, text(t["inner"].co_qualname)
                cls = q[:str_rfind(q, ".")] if "." in q else ""
                ran.add((f, cls, t["method_name"]))
                if cls == text(qualname_of(_type(t["case"]))):
                    concrete.add((f, cls))
        watch_spaces({t["inner"].co_filename for t in tests.values() if t["counted"] and "inner" in t})
        if filtered is not False:
            return  # some tests left out on purpose (-k, named tests): nothing to compare with
        for f, q in _sorted(genuine["quals"]):
            cls, name = (q[:str_rfind(q, ".")], q[str_rfind(q, ".") + 1:]) if "." in q else ("", q)
            if (f, cls) in concrete and startswith(name, "test") and (f, cls, name) not in ran \
                    and (f, "load_tests") not in genuine["quals"]:
                flag(f"the test {cls}.{name} of {f[_len(cwd) + 1:]} was left out of the run")

    # ---- the namespaces of the task's own modules (its tests' globals) ----------------------
    def stored_names(code: Any) -> tuple[set[str], set[str], bool]:
        """The names a module's code binds (at its top level, and `global` ones in its functions), those
        its functions bind, and whether it may bind others (a star import, globals(), setattr, exec...)."""
        out: set[str] = _set()
        in_functions: set[str] = _set()
        dynamic = False
        todo = [(code, True)]
        while todo:
            c, top = todo.pop()
            names, raw, ext = c.co_names, c.co_code, 0
            dynamic = dynamic or _any(n in dynamic_names for n in names)
            for i in _range(0, _len(raw) - 1, 2):
                op, arg = raw[i], raw[i + 1] | ext
                ext = (arg << 8) if op == op_extended else 0
                if op == op_star:
                    dynamic = True
                elif (op in store_ops and (top or op in global_ops)) and arg < _len(names):
                    out.add(names[arg])
                    if not top:
                        in_functions.add(names[arg])
            todo += [(k, False) for k in c.co_consts if _type(k) is code_type]
        return out, in_functions, dynamic

    def watch_spaces(hosts: set[str]) -> None:
        """Keep the namespaces of the modules that hold the tests' code (the tests' globals), and flag a
        name in one that its own code never binds (a shadowed built-in), unless it binds names
        dynamically. Names its functions rebind (`global`) are left out of the later checks."""
        for name, m in _sorted((k, v) for k, v in _dict(modules).items() if _type(k) is str_type):
            if _type(m) is not module_type:
                continue
            space = mod_dict(m)
            path = space.get("__file__")
            if _type(path) is not str_type or path not in hosts or path not in module_codes:
                continue
            bound, rebinds, dynamic = stored_names(module_codes[path])
            spaces.append((path, space, rebinds))
            if dynamic:
                continue
            for k, v in _dict(space).items():
                if _type(k) is str_type and k not in bound and not (startswith(k, "__") and endswith(k, "__")) \
                        and not unittest_own(name, k, v):
                    flag(f"the code under test added {k} to {path[_len(cwd) + 1:]}")

    def spaces_now() -> list[dict[str, Any]]:
        return [{k: v for k, v in _dict(space).items() if _type(k) is str_type} for _p, space, _b in spaces]

    def check_spaces(base: list[dict[str, Any]], when: str) -> None:
        """Flag a name of a test module rebound (or removed, or added) since `base` (spaces_now then)."""
        for (path, space, rebinds), before in _zip(spaces, base):
            now = _dict(space)
            changed = [k for k, v in before.items() if now.get(k, empty) is not v and k not in rebinds] + \
                      [k for k in now if _type(k) is str_type and k not in before and k not in rebinds]
            # dunders are the import system's and warnings' (__warningregistry__), but for __builtins__
            for k in [k for k in changed if k == "__builtins__" or not (startswith(k, "__") and endswith(k, "__"))]:
                item = f"changed {k} of {path[_len(cwd) + 1:]}"
                if item not in tampered:
                    tampered.add(item)
                    flag(f"the code under test {item} ({when})")

    def on_test(what: str, t: dict[str, Any], args: tuple[Any, ...]) -> None:
        if what == "begin":
            if state["current"] is not None:
                flag(f"{t['name']} started inside another test")
            state["current"] = t
            t.update(runs=t["runs"] + 1, body=False, td=t["teardown"] is None, unrun=False)
            state["builtins_test"] = _dict(mod_dict(builtins_module))
            state["spaces_test"] = spaces_now()
            return
        if state["current"] is not t:
            flag(f"{t['name']} ended without having started")
            return
        state["current"] = None
        delta = args[2] if _len(args) > 2 and _type(args[2]) is _int else 0
        check(state["builtins_test"], f"in {t['name']}")
        check_spaces(state["spaces_test"], f"in {t['name']}")
        if delta < 0:
            flag(f"the test result forgot failures it had recorded (in {t['name']})")
        state["recorded"] += delta if delta > 0 else 0
        ok = t["body"] and t["td"] and delta == 0 and t["vouched"]
        if not t["vouched"]:
            pass  # its reason was set when the tests loaded
        elif t["unrun"]:
            t["why"] = "its method returned a generator or coroutine: its body never ran"
        elif delta == 0 and not (t["body"] and t["td"]):
            part = "body" if not t["body"] else "tearDown"
            flag(f"unittest counted {t['name']} as passed without its {part} running to its end")
        elif not ok:
            t["why"] = "it failed"
        t["passed"] = ok if t["passed"] is None else (t["passed"] and ok)

    def on_event(fr: Any, args: tuple[Any, ...]) -> BaseException | None:
        what = args[0] if args else None
        if _type(what) is not str_type:
            flag(f"an unknown guard event, in {where(fr)}")
            return None
        if what in ("assert", "asserted"):
            if _id(fr.f_code) not in shim_ids or _len(args) < (4 if what == "assert" else 2):
                return None
            return on_assert(fr, args) if what == "assert" else on_asserted(fr, args)
        if what in ("register", "run", "finish"):
            if fr is main_frame:
                on_run(what, args)
            else:
                flag(f"a guard event {what!r} came from outside the runner, in {where(fr)}")
        elif what in ("begin", "end"):
            t = registered(fr, run_code, "_case", "case")
            if t is not None:
                on_test(what, t, args)
        elif what in ("body", "body_end", "unrun"):
            t = registered(fr, abody_code if fr.f_code is abody_code else body_code, "_m", "method")
            if t is None or state["current"] is not t:
                return None  # a test body called from elsewhere proves nothing for the test that runs
            if what == "body":
                state["builtins_body"] = _dict(mod_dict(builtins_module))
                state["spaces_body"] = spaces_now()
            elif what == "unrun":
                t["unrun"] = True
            else:
                check(state["builtins_body"], f"in the body of {t['name']}", deep=False)
                check_spaces(state["spaces_body"], f"in the body of {t['name']}")
                t["body"] = True
        elif what == "td_end":
            t = registered(fr, td_code, "_t", "teardown")
            if t is not None and state["current"] is t:
                t["td"] = True
        else:
            flag(f"an unknown guard event, in {where(fr)}")
        return None

    def finish(result_counts: Any) -> None:
        check(builtins_base, "by the end")
        check_files("by the end")
        counts = {k: v for k, v in (_dict(result_counts) if _type(result_counts) is dict_type else {}).items()
                  if _type(k) is str_type and _type(v) is _int}
        problems = _sum(v for k, v in counts.items() if k != "tests_run")
        never = [t for t in tests.values() if t["runs"] == 0]
        if never and problems == 0:
            flag(f"{_len(never)} of {_len(tests)} tests never ran although nothing failed (first: {never[0]['name']})")
        if problems < state["recorded"]:
            flag("the test result forgot failures it had recorded")
        counted = [t for t in tests.values() if t["counted"]]
        passed = [t for t in counted if t["passed"] is True]
        not_passed = [f"{t['name']}: {t['why']}" for t in counted if t["passed"] is not True][:5]
        ok = _len(counted) > 0 and _len(passed) == _len(counted) and not flags and problems == 0 and not state["lost"]
        send({"report": {"tests": _len(counted), "passed": _len(passed), "not_passed": not_passed,
                         "uncounted": _len(tests) - _len(counted), "flags": _len(flags), **counts}})
        exit_now(0 if ok else 1)

    # ---- the hook -------------------------------------------------------------------------
    def on_access(event: str, args: tuple[Any, ...], fr_outside: bool) -> None:
        obj, name = args[0], args[1]
        if name == "__code__":  # types.coroutine sets it too, on asyncio's own functions
            if fr_outside or (_type(obj) is function_type and (startswith(text(obj.__module__), "unittest")
                                                               or _id(obj.__code__) in own_ids)):
                flag(f"the code under test replaced the __code__ of {label_of(obj)}")
        elif name in ("__defaults__", "__kwdefaults__") and _type(obj) is function_type and (
                startswith(text(obj.__module__), "unittest") or _id(obj.__code__) in shim_ids):
            flag(f"the code under test replaced the {name} of {label_of(obj)}")
        elif name == "__bases__" and is_ut_class(obj):
            flag(f"the code under test replaced the __bases__ of {label_of(obj)}")
        elif name == "__class__" and (is_ut_class(_type(obj)) or (_len(args) > 2 and is_ut_class(args[2]))):
            flag("the code under test changed the class of a unittest object")

    def on_path(event: str, path: Any) -> None:
        if _type(path) is bytes_type:
            path = decode(path, "utf-8", "replace")
        if _type(path) is not str_type or not (startswith(path, "/proc/") or startswith(path, "/dev/fd")):
            return
        parts = str_split(path, "/")
        who = parts[2] if _len(parts) > 2 else ""
        if startswith(path, "/dev/fd") or ((who in ("self", "thread-self") or str_isdigit(who)) and (
                _len(parts) == 3 or parts[3] in proc_secrets or parts[3] == "")):
            flag(f"the code under test opened {path[:60]} ({event})")

    def handle(event: str, args: tuple[Any, ...], fr: Any) -> BaseException | None:
        if event == ev:
            return on_event(fr, args)
        if event == "object.__getattr__":
            if from_outside(fr):
                flag(f"the code under test read a frame ({args[1]}) in {where(fr)}")
        elif event in from_outside_events:
            if from_outside(fr):
                flag(f"the code under test called {event} in {where(fr)}")
        elif event in always or startswith(event, "ctypes."):
            flag(f"the code under test called {event}")
        elif event in ("object.__setattr__", "object.__delattr__"):
            if _len(args) > 1 and _type(args[1]) is str_type:
                on_access(event, args, from_outside(fr))
        elif args:
            on_path(event, args[0])
        return None

    def hook(event: str, args: tuple[Any, ...]) -> None:
        # exact types first: a str subclass's __hash__ or __eq__ would run code inside the hook
        if _type(event) is not str_type or _type(args) is not tuple_type:
            return
        if event not in care and not startswith(event, "ctypes."):
            return
        if event == "object.__getattr__" and (_len(args) < 2 or _type(args[1]) is not str_type
                                              or args[1] not in frame_attrs):
            return
        tid = get_ident()
        if tid in busy:
            return
        busy.add(tid)
        err = None
        try:
            err = handle(event, args, getframe(1))
        except Exc as e:  # a fault of the guard's: the run fails, as a forged state would
            flag(f"the guard failed on {event}: {text(qualname_of(_type(e)))}")
        finally:
            busy.discard(tid)
        if err is not None:
            raise err

    add_hook(hook)
