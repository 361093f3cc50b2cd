"""Red-team findings against the two-process hidden check (issue 43; hidden_check/, hidden_score.py).

Each finding is one test that states what should hold and is marked xfail(strict=True) while it does
not: a forged pass (a module that does not implement the task passes, unflagged), or honest code that
fails or is flagged *suspicious*. When a fix lands, its test starts to pass and strict xfail turns it
red: remove the marker then. `test_honest_modules_pass_in_one_process` is not a finding: it proves
every honest module here is correct when the test and the module share one process (so a finding
about honest code is about the harness, not the module).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.hidden_score import run_hidden_test
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.types import ScoreResult

ROOT = Path(__file__).resolve().parent.parent
VALUEKINDS = ROOT / "tests" / "data" / "valuekinds" / "python.jsonl"
SIMPLE_TEST = "def check(f):\n    assert f(2) == 4\n    assert f(10) == 100\n\ncheck(f)\n"


def score(module: str, test: str, helpers: str = "", entry: str = "f") -> ScoreResult:
    return run_hidden_test(module, f"{entry}.py", entry, test, 10.0, helpers=helpers)


def forgery_fails(r: ScoreResult) -> None:
    assert not r.passed, f"forged pass: {r.output[-1500:]}"
    assert r.details.get("suspicious"), f"failed but not flagged: {r.output[-1500:]}"


def honest_passes(r: ScoreResult) -> None:
    assert not r.details.get("suspicious"), f"honest code flagged: {r.details.get('suspicious')}"
    assert r.passed, f"honest code failed: {r.output[-1500:]}"


# ---------------------------------------------------------------------------------------------
# Forged passes
# ---------------------------------------------------------------------------------------------

# The checker puts /workspace/.hidden (the scoring folder, writable by the code under test) first on its
# sys.path and imports datetime, fractions, decimal, dataclasses and any standard module stdlib_object
# names lazily, after the module has run: a file of the module's there runs inside the checker.
PATH_HIJACK = '''import datetime
import os

PAYLOAD = """import os, sys
os.write(int(sys.argv[1]), b'{"passed": true, "calls": 1}')
os._exit(0)
"""
with open(os.path.join(os.getcwd(), ".hidden", "datetime.py"), "w") as fh:
    fh.write(PAYLOAD)


def f(x):
    return datetime.date(2000, 1, 1)  # decoding a date makes the checker `import datetime`
'''


def test_module_cannot_plant_a_module_the_checker_imports() -> None:
    forgery_fails(score(PATH_HIJACK, SIMPLE_TEST))


def test_module_cannot_plant_a_module_on_a_real_task() -> None:
    task = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/0",)))[0]
    md = task.metadata
    module = PATH_HIJACK.replace("def f(x):", "def has_close_elements(numbers, threshold):")
    forgery_fails(run_hidden_test(module, md["module"], md["entry_point"], md["hidden_test"], 10.0,
                                  helpers=md["helpers"]))


# A test class whose comparison calls one of its own (non-dunder) methods. The worker may plant a callable of
# its own under that name: in the state of an object rebuilt into the test's class (fill_entry writes any
# identifier into __dict__, shadowing the method), or by `setattr` on the test's object or on the test's
# class itself (CheckerSide.handle allows any non-dunder name), which the expected object shares.
POLY_TEST = '''class Poly:
    def __init__(self, coeffs):
        self.coeffs = list(coeffs)

    def same_as(self, other):
        return self.coeffs == other.coeffs

    def __eq__(self, other):
        return isinstance(other, Poly) and self.same_as(other)


def check(f):
    assert f([1, 2, 3]) == Poly([2, 6])
    assert f([5]) == Poly([])


check(f)
'''
SHADOW_IN_STATE = '''class Poly:  # the test's class by name: rebuilt there with this state
    def __init__(self):
        self.same_as = lambda other: True


def f(coeffs):
    return Poly()
'''
HEAP_TEST = '''class Heap:
    def __init__(self, items):
        self.items = list(items)

    def is_heap(self):
        a = self.items
        return all(a[(i - 1) // 2] <= a[i] for i in range(1, len(a)))


def check(f):
    h = Heap([5, 3, 8, 1])
    f(h)
    assert h.is_heap() and sorted(h.items) == [1, 3, 5, 8]


check(f)
'''
SHADOW_BY_SETATTR = '''def f(heap):
    heap.is_heap = lambda: True  # a setattr request: the test's own object now holds our function
'''
LIST_TEST = '''class LinkedList:
    def __init__(self, values):
        self.head = None
        for v in reversed(values):
            self.head = (v, self.head)

    def to_list(self):
        out, node = [], self.head
        while node:
            out.append(node[0])
            node = node[1]
        return out

    def __eq__(self, other):
        return isinstance(other, LinkedList) and self.to_list() == other.to_list()


def check(f):
    assert f(LinkedList([1, 2, 3])) == LinkedList([3, 2, 1])
    assert f(LinkedList([4, 5])) == LinkedList([5, 4])


check(f)
'''
SHADOW_ON_CLASS = '''def f(lst):
    cls = type(lst)  # the stand-in class: its side and the test class's reference are plain attributes
    cls._hc_side.request("setattr", cls._hc_class_ref, ["to_list", lambda *a: "same for everyone"])
    return lst
'''


def test_rebuilt_object_cannot_shadow_a_method_of_the_test_class() -> None:
    forgery_fails(score(SHADOW_IN_STATE, POLY_TEST))


def test_setattr_cannot_plant_a_method_on_the_test_object() -> None:
    forgery_fails(score(SHADOW_BY_SETATTR, HEAP_TEST))


def test_setattr_cannot_replace_a_method_of_the_test_class() -> None:
    forgery_fails(score(SHADOW_ON_CLASS, LIST_TEST))


# The planted callable need not be the worker's: a built-in crosses as the checker's own ("bi"), so a fix that
# refuses only Remote callables in state or setattr still lets these through.
SHADOW_WITH_BOOL = SHADOW_IN_STATE.replace("lambda other: True", "bool  # the checker's bool: bool(expected) is True")
SHADOW_WITH_DIR = SHADOW_BY_SETATTR.replace("lambda: True", "dir  # the checker's dir(): a non-empty list")


@pytest.mark.parametrize("case", ["state-bool", "setattr-dir"])
def test_planted_builtins_cannot_stand_in_for_test_methods(case: str) -> None:
    module, test = (SHADOW_WITH_BOOL, POLY_TEST) if case == "state-bool" else (SHADOW_WITH_DIR, HEAP_TEST)
    forgery_fails(score(module, test))


# F11: the probe imports the module into its own process, so the module can tell it is being probed and
# hide the names it would have forged with: a forgery that the checker defeats goes unflagged.
def probe_task() -> dict[str, str]:
    return SCENARIO.load_tasks(TaskQuery(task_ids=("Python/4",)))[0].metadata


ABS_FORGERY = "def abs(x):\n    return 0.0\n\n\ndef mean_absolute_deviation(numbers):\n    return 123.0\n"
ABS_FORGERY_HIDDEN = ("import sys\n\n\ndef abs(x):\n    return 0.0\n\n\n"
                      "if 'hidden_check.probe' in sys.modules:  # the probe imports us in its own process\n"
                      "    del abs\n\n\ndef mean_absolute_deviation(numbers):\n    return 123.0\n")


def test_the_probe_flags_a_shadowing_forgery() -> None:
    md = probe_task()
    forgery_fails(run_hidden_test(ABS_FORGERY, md["module"], md["entry_point"], md["hidden_test"], 10.0,
                                  helpers=md["helpers"]))


@pytest.mark.xfail(strict=True, reason="F11: a module that notices the probe (hidden_check.probe in sys.modules) "
                                       "hides its shadowing names and is not flagged")
def test_the_probe_cannot_be_evaded() -> None:
    md = probe_task()
    forgery_fails(run_hidden_test(ABS_FORGERY_HIDDEN, md["module"], md["entry_point"], md["hidden_test"], 10.0,
                                  helpers=md["helpers"]))


# ---------------------------------------------------------------------------------------------
# Honest code that fails or is flagged
# ---------------------------------------------------------------------------------------------

HONEST: dict[str, tuple[str, str]] = {}  # name -> (module, test); every one passes in one process

HONEST["deep-tuple-returned"] = ('''def f(n):
    out = None
    for i in range(n):
        out = (i, out)
    return out
''', '''def check(f):
    r, d = f(400), 0
    while r is not None:
        r, d = r[1], d + 1
    assert d == 400


check(f)
''')
HONEST["deep-tuple-passed"] = ('''def f(t):
    n = 0
    while t is not None:
        t, n = t[1], n + 1
    return n
''', '''def check(f):
    t = None
    for i in range(400):
        t = (i, t)
    assert f(t) == 400


check(f)
''')


def test_a_deep_tuple_returned_is_not_suspicious() -> None:
    honest_passes(score(*HONEST["deep-tuple-returned"]))


def test_a_deep_tuple_passed_in_reaches_the_function() -> None:
    honest_passes(score(*HONEST["deep-tuple-passed"]))


# F4: the probe flags honest code. Values/4's reference defines `Point`; an honest module (its own copy of
# the class, as every fix has) that reads a test Point with dataclasses.astuple fails in the checker (the
# worker holds a stand-in, not a dataclass: F5), and the probe then finds the test passes "only with the
# module's own `Point`" (the module's midpoint builds module Points) and flags it.
ASTUPLE_MIDPOINT = """from dataclasses import astuple, dataclass


@dataclass(frozen=True)
class Point:
    x: float
    y: float


def midpoint(a: Point, b: Point) -> Point:
    (ax, ay), (bx, by) = astuple(a), astuple(b)
    return Point((ax + bx) / 2, (ay + by) / 2)
"""


def value_task(task_id: str) -> dict[str, str]:
    task = SCENARIO.load_tasks(TaskQuery(dataset_path=VALUEKINDS, task_ids=(task_id,)))[0]
    return task.metadata


def test_the_astuple_midpoint_is_correct_in_one_process() -> None:
    md = value_task("Values/4")
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(md["helpers"], "helpers", "exec"), namespace)
    exec(compile(ASTUPLE_MIDPOINT, "module", "exec"), namespace)
    exec(compile(md["hidden_test"], "test", "exec"), namespace)


def test_probe_does_not_flag_an_honest_fix_of_a_real_task() -> None:
    md = value_task("Values/4")
    honest_passes(run_hidden_test(ASTUPLE_MIDPOINT, md["module"], md["entry_point"], md["hidden_test"], 10.0,
                                  helpers=md["helpers"]))


POINT_TEST = """from dataclasses import dataclass


@dataclass(frozen=True)
class P:
    x: int
    y: int


def check(f):
    assert f(P(1, 2)) == P(2, 2)


check(f)
"""
HONEST["dataclasses-replace"] = ("import dataclasses\n\n\ndef f(p):\n    return dataclasses.replace(p, x=p.x + 1)\n",
                                 POINT_TEST)
HONEST["dataclasses-asdict"] = ("import dataclasses\n\n\ndef f(p):\n    d = dataclasses.asdict(p)\n"
                                "    d['x'] += 1\n    return type(p)(**d)\n", POINT_TEST)
HONEST["dataclasses-fields"] = ("import dataclasses\n\n\ndef f(p):\n"
                                "    names = [fl.name for fl in dataclasses.fields(p)]\n"
                                "    return type(p)(*[getattr(p, n) + (n == 'x') for n in names])\n", POINT_TEST)


@pytest.mark.parametrize("name", ["dataclasses-replace", "dataclasses-asdict", "dataclasses-fields"])
def test_dataclass_functions_work_on_test_dataclasses(name: str) -> None:
    honest_passes(score(*HONEST[name]))


NODE = """class Node:
    def __init__(self, val, next=None):
        self.val, self.next = val, next
"""
HONEST["deepcopy-argument"] = ("import copy\n\n" + NODE + """

def f(head):
    head = copy.deepcopy(head)  # work on a copy: the caller's list stays as it was
    prev = None
    while head:
        head.next, prev, head = prev, head, head.next
    return prev
""", NODE + """

def check(f):
    head = Node(1, Node(2, Node(3)))
    r = f(head)
    assert [r.val, r.next.val, r.next.next.val] == [3, 2, 1]
    assert [head.val, head.next.val, head.next.next.val] == [1, 2, 3], "the argument was changed"


check(f)
""")
HONEST["copy-argument"] = ("import copy\n\n" + NODE + """

def f(node, val):
    new = copy.copy(node)
    new.val = val
    return new
""", NODE + """

def check(f):
    a = Node(1)
    b = f(a, 2)
    assert b.val == 2 and a.val == 1, "the argument was changed"
    assert b is not a


check(f)
""")


@pytest.mark.parametrize("name", ["deepcopy-argument", "copy-argument"])
def test_copies_of_test_objects_are_copies(name: str) -> None:
    honest_passes(score(*HONEST[name]))


HONEST["dict-update"] = ("def f(obj, **kw):\n    obj.__dict__.update(kw)\n    return obj\n", """class Cfg:
    def __init__(self):
        self.a = 1


def check(f):
    c = Cfg()
    assert f(c, a=5, b=6) is c
    assert c.a == 5 and c.b == 6


check(f)
""")


@pytest.mark.xfail(strict=True, reason="F7: obj.__dict__ is sent as a fresh dict(vars(obj)): writes to it are lost")
def test_writes_through_dunder_dict_reach_the_test_object() -> None:
    honest_passes(score(*HONEST["dict-update"]))


HONEST["generator-pops-later"] = ("def f(stack):\n    while stack:\n        yield stack.pop()\n", """def check(f):
    xs = [1, 2, 3]
    g = f(xs)
    assert next(g) == 3
    assert xs == [1, 2], xs


check(f)
""")
HONEST["closure-appends-later"] = ("def f(log):\n    return lambda item: log.append(item)\n", """def check(f):
    log = []
    add = f(log)
    add("a")
    add("b")
    assert log == ["a", "b"], log


check(f)
""")
HONEST["generator-sees-later-appends"] = ("def f(queue):\n    i = 0\n    while i < len(queue):\n"
                                          "        yield queue[i]\n        i += 1\n", """def check(f):
    q = [1]
    g = f(q)
    assert next(g) == 1
    q.append(2)
    assert list(g) == [2]


check(f)
""")


@pytest.mark.parametrize("name", [
    "generator-pops-later", "closure-appends-later",
    pytest.param("generator-sees-later-appends", marks=pytest.mark.xfail(strict=True, reason=(
        "left: the test's own changes to a container reach the module only with the next call that passes it "
        "(comparing every lent container at every request would cost its size per request)"))),
])
def test_later_changes_to_lent_containers_are_seen(name: str) -> None:
    honest_passes(score(*HONEST[name]))


HONEST["test-enum-member"] = ("def f(color):\n    return color.name.lower()\n", """from enum import Enum


class Color(Enum):
    RED = 1
    GREEN = 2


def check(f):
    assert f(Color.RED) == "red"


check(f)
""")
HONEST["local-enum-class"] = ("def f(color):\n    members = list(type(color))\n"
                              "    return members[(members.index(color) + 1) % len(members)]\n",
                              """from enum import Enum


def check(f):
    class Color(Enum):
        RED = 1
        GREEN = 2

    assert f(Color.RED) is Color.GREEN


check(f)
""")
HONEST["local-namedtuple"] = ("def f(p):\n    return p._replace(x=p.x * 2)\n", """from collections import namedtuple


def check(f):
    P = namedtuple("P", "x y")
    r = f(P(1, 2))
    assert r == P(2, 2) and type(r) is P


check(f)
""")


HONEST["module-enum-member"] = ("""from enum import Enum


class Shape(Enum):
    SQUARE = (1, 1)
    WIDE = (2, 1)

    def __init__(self, w, h):
        self.w, self.h = w, h


def f(wide):
    return Shape.WIDE if wide else Shape.SQUARE
""", """def check(f):
    s = f(True)
    assert s.name == "WIDE" and s.w == 2


check(f)
""")


@pytest.mark.parametrize("name", ["test-enum-member", "local-enum-class", "local-namedtuple", "module-enum-member"])
def test_enums_and_namedtuples_of_the_test_keep_their_class(name: str) -> None:
    honest_passes(score(*HONEST[name]))


HONEST["type-is"] = (NODE + """

def f(node):
    n = 0
    while type(node) is Node:
        n, node = n + 1, node.next
    return n
""", NODE + """

def check(f):
    assert f(Node(1, Node(2))) == 2


check(f)
""")


@pytest.mark.xfail(strict=True, reason="F10: isinstance(x, Node) holds for a stand-in (its __class__ is the "
                                       "module's Node) but type(x) is Node does not")
def test_type_of_a_stand_in_matches_isinstance() -> None:
    honest_passes(score(*HONEST["type-is"]))


HONEST["stopiteration"] = ("def f(items):\n    return next(iter(items))  # StopIteration when empty, like next()\n",
                           """def check(f):
    assert f([3, 4]) == 3
    try:
        f([])
    except StopIteration:
        pass
    else:
        raise AssertionError("no StopIteration")


check(f)
""")
HONEST["systemexit-argparse"] = ("""import argparse


def f(argv):
    p = argparse.ArgumentParser(prog="tool")
    p.add_argument("--n", type=int, required=True)
    return p.parse_args(argv).n * 2
""", """def check(f):
    assert f(["--n", "4"]) == 8
    try:
        f(["--n", "x"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("bad arguments accepted")


check(f)
""")
HONEST["exception-group"] = ("""def f(items):
    errors = [ValueError(f"bad {x!r}") for x in items if not isinstance(x, int)]
    if errors:
        raise ExceptionGroup("invalid items", errors)
    return sum(items)
""", """def check(f):
    assert f([1, 2]) == 3
    try:
        f([1, "a", None])
    except ExceptionGroup as eg:
        assert len(eg.exceptions) == 2 and all(isinstance(e, ValueError) for e in eg.exceptions)
    else:
        raise AssertionError("no group")


check(f)
""")


@pytest.mark.parametrize("name", ["stopiteration", "systemexit-argparse", "exception-group"])
def test_expected_exceptions_are_not_suspicious(name: str) -> None:
    honest_passes(score(*HONEST[name]))


EXC_MODULE = """import json


class ConfigError(ValueError):
    def __init__(self, key):
        super().__init__(key)
        self.key = key

    def __str__(self):
        return f"missing key {self.key!r}"


def f(kind, text="{}"):
    if kind == "str":
        raise ConfigError("port")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError("bad config") from e
"""
HONEST["exception-str"] = (EXC_MODULE, """def check(f):
    try:
        f("str")
    except ValueError as e:
        assert str(e) == "missing key 'port'", str(e)
    else:
        raise AssertionError("no error")


check(f)
""")
HONEST["exception-cause"] = (EXC_MODULE, """import json


def check(f):
    try:
        f("cause", "{")
    except ValueError as e:
        assert isinstance(e.__cause__, json.JSONDecodeError), repr(e.__cause__)
    else:
        raise AssertionError("no error")


check(f)
""")


@pytest.mark.parametrize("name", ["exception-str", "exception-cause"])
def test_exceptions_keep_their_message_and_cause(name: str) -> None:
    honest_passes(score(*HONEST[name]))


STDLIB_MODULE = """import array, operator, datetime, pathlib, types, uuid


def f(kind):
    return {"path": lambda: pathlib.PurePosixPath("/a/b"), "uuid": lambda: uuid.UUID(int=5),
            "ns": lambda: types.SimpleNamespace(a=1), "array": lambda: array.array("i", [1, 2]),
            "op": lambda: operator.add, "class": lambda: datetime.date, "ni": lambda: NotImplemented}[kind]()
"""
STDLIB_EXPECTED = {"path": "pathlib.PurePosixPath('/a/b')", "uuid": "uuid.UUID(int=5)",
                   "ns": "types.SimpleNamespace(a=1)", "array": "array.array('i', [1, 2])"}
for _kind, _expr in STDLIB_EXPECTED.items():
    HONEST[f"stdlib-{_kind}"] = (STDLIB_MODULE, f"import array, pathlib, types, uuid\n\n\ndef check(f):\n"
                                                f"    assert f({_kind!r}) == {_expr}\n\n\ncheck(f)\n")
for _kind, _expr in {"op": "operator.add", "class": "datetime.date", "ni": "NotImplemented"}.items():
    HONEST[f"stdlib-{_kind}"] = (STDLIB_MODULE, f"import datetime, operator\n\n\ndef check(f):\n"
                                                f"    assert f({_kind!r}) is {_expr}\n\n\ncheck(f)\n")


@pytest.mark.parametrize("kind", sorted(STDLIB_EXPECTED))
def test_other_standard_library_values_compare_by_value(kind: str) -> None:
    honest_passes(score(*HONEST[f"stdlib-{kind}"]))


@pytest.mark.parametrize("kind", ["op", "class", "ni"])
def test_standard_library_functions_and_classes_keep_identity(kind: str) -> None:
    honest_passes(score(*HONEST[f"stdlib-{kind}"]))


HONEST["str-subclass"] = ("def f(names):\n    return '-'.join(names)\n", """class Name(str):
    pass


def check(f):
    assert f([Name("a"), Name("b")]) == "a-b"


check(f)
""")
HONEST["list-subclass"] = ("""def f(items):
    out = []
    for item in items:
        out.extend(f(item) if isinstance(item, list) else [item])
    return out
""", """class Row(list):
    pass


def check(f):
    assert f([1, Row([2, Row([3])])]) == [1, 2, 3]


check(f)
""")


@pytest.mark.xfail(strict=True, reason="F17: an object of a test class that subclasses str/list reaches the worker "
                                       "as a stand-in that is no str or list (join, isinstance fail)")
@pytest.mark.parametrize("name", ["str-subclass", "list-subclass"])
def test_test_subclasses_of_builtins_stay_builtins(name: str) -> None:
    honest_passes(score(*HONEST[name]))


HONEST["recursion-across"] = ("""def f(fn):
    cache = {}

    def wrapper(*args):
        if args not in cache:
            cache[args] = fn(*args)
        return cache[args]

    return wrapper
""", """def check(f):
    def fib(n):
        return n if n < 2 else fast(n - 1) + fast(n - 2)

    fast = f(fib)
    assert fast(150) == 9969216677189303386214405760200


check(f)
""")


def test_recursion_across_the_boundary_is_as_deep_as_in_one_process() -> None:
    honest_passes(score(*HONEST["recursion-across"]))


HONEST["nan-identity"] = ("def f(items):\n    return [x for x in items if x is not None]\n", """def check(f):
    nan = float("nan")
    assert f([nan, None, 1.5]) == [nan, 1.5]  # list equality: `nan is nan` holds in one process


check(f)
""")


def test_a_nan_passed_through_is_the_same_nan() -> None:
    honest_passes(score(*HONEST["nan-identity"]))


HONEST["module-intflag"] = ("""from enum import IntFlag


class Perm(IntFlag):
    R = 4
    W = 2
    X = 1


def f(read, write):
    return (Perm.R if read else 0) | (Perm.W if write else 0)
""", """def check(f):
    assert f(True, True) == 6
    assert f(False, True) == 2


check(f)
""")


def test_a_module_intflag_is_not_suspicious() -> None:
    honest_passes(score(*HONEST["module-intflag"]))


STAND_IN_MODULE = """import math


def f(res, kind):
    if kind == "with":
        with res as r:
            return r.value
    if kind == "round":
        return round(res)
    if kind == "floor":
        return math.floor(res)
    if kind == "fieldnames":
        return res.fieldnames
    if kind == "readline":
        header = res.readline().strip().split(",")
        return [dict(zip(header, line.strip().split(","))) for line in res]
"""
HONEST["stand-in-with"] = (STAND_IN_MODULE, """class Res:
    def __init__(self):
        self.value, self.open = 7, False

    def __enter__(self):
        self.open = True
        return self

    def __exit__(self, *exc):
        self.open = False


def check(f):
    r = Res()
    assert f(r, "with") == 7 and not r.open


check(f)
""")
HONEST["stand-in-round"] = (STAND_IN_MODULE, """class Money:
    def __init__(self, cents):
        self.cents = cents

    def __round__(self, n=None):
        return round(self.cents / 100)

    def __floor__(self):
        return self.cents // 100


def check(f):
    assert f(Money(250), "round") == 2
    assert f(Money(250), "floor") == 2


check(f)
""")
HONEST["stand-in-stringio"] = (STAND_IN_MODULE, """import io


def check(f):
    assert f(io.StringIO("a,b\\n1,2\\n3,4\\n"), "readline") == [{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]


check(f)
""")
HONEST["stand-in-dictreader"] = (STAND_IN_MODULE, """import csv
import io


def check(f):
    assert f(csv.DictReader(io.StringIO("a,b\\n1,2\\n")), "fieldnames") == ["a", "b"]


check(f)
""")


@pytest.mark.parametrize("name", ["stand-in-with", "stand-in-round", "stand-in-stringio", "stand-in-dictreader"])
def test_stand_ins_of_test_objects_keep_their_behaviour(name: str) -> None:
    honest_passes(score(*HONEST[name]))


HONEST["remote-contextmanager"] = ("""import contextlib


@contextlib.contextmanager
def f(log):
    log.append("enter")
    try:
        yield len(log)
    finally:
        log.append("exit")
""", """def check(f):
    log = []
    with f(log) as n:
        assert n == 1
    assert log == ["enter", "exit"]


check(f)
""")
HONEST["remote-contains"] = ("""class Span:
    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __contains__(self, x):
        return self.lo <= x < self.hi


def f(lo, hi):
    return Span(lo, hi)
""", """def check(f):
    s = f(2, 5)
    assert 3 in s and 5 not in s


check(f)
""")


@pytest.mark.parametrize("name", [
    "remote-contextmanager",
    pytest.param("remote-contains", marks=pytest.mark.xfail(strict=True, reason=(
        "kept on purpose: `x in obj` is not forwarded to the module's own __contains__, which would decide a "
        "membership check of the test's; an iterable object answers through its items instead"))),
])
def test_remotes_keep_the_behaviour_the_test_uses(name: str) -> None:
    honest_passes(score(*HONEST[name]))


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_modules_pass_in_one_process(name: str) -> None:
    module, test = HONEST[name]
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(module, "module", "exec"), namespace)
    exec(compile(test, "test", "exec"), namespace)
