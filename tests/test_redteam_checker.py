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


@pytest.mark.xfail(strict=True, reason="F1: the checker imports from the writable .hidden folder (code execution "
                                       "in the checker, forged pass on any task)")
def test_module_cannot_plant_a_module_the_checker_imports() -> None:
    forgery_fails(score(PATH_HIJACK, SIMPLE_TEST))


@pytest.mark.xfail(strict=True, reason="F1 on HumanEvalFix Python/0, through the task's own test")
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


@pytest.mark.xfail(strict=True, reason="F2: a worker callable planted in a rebuilt test-class object's state "
                                       "shadows the method the test's __eq__ calls")
def test_rebuilt_object_cannot_shadow_a_method_of_the_test_class() -> None:
    forgery_fails(score(SHADOW_IN_STATE, POLY_TEST))


@pytest.mark.xfail(strict=True, reason="F2: setattr on the test's object plants a worker callable over a method")
def test_setattr_cannot_plant_a_method_on_the_test_object() -> None:
    forgery_fails(score(SHADOW_BY_SETATTR, HEAP_TEST))


@pytest.mark.xfail(strict=True, reason="F2: setattr on the test's class replaces a method the expected object "
                                       "uses too")
def test_setattr_cannot_replace_a_method_of_the_test_class() -> None:
    forgery_fails(score(SHADOW_ON_CLASS, LIST_TEST))


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


@pytest.mark.xfail(strict=True, reason="F3: Decoder.at recurses per tuple level; RecursionError past ~250 levels "
                                       "is a 'malformed reply' flag")
def test_a_deep_tuple_returned_is_not_suspicious() -> None:
    honest_passes(score(*HONEST["deep-tuple-returned"]))


@pytest.mark.xfail(strict=True, reason="F3: the worker's decoder recurses too: it exits 3 on a deep tuple argument")
def test_a_deep_tuple_passed_in_reaches_the_function() -> None:
    honest_passes(score(*HONEST["deep-tuple-passed"]))


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_modules_pass_in_one_process(name: str) -> None:
    module, test = HONEST[name]
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(module, "module", "exec"), namespace)
    exec(compile(test, "test", "exec"), namespace)
