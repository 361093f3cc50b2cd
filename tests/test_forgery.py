"""Forged passes: through the CLI with scripted models and the real sandbox, under every strategy
that applies, each attack fails and its trace carries `suspicious` with the reason; an honest fix and
the oracle still pass (so these tests can fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.hidden_score import reference_helpers, run_hidden_test, shadowing_names
from agent_harness.scenarios.humanevalfix import SCENARIO

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ["react", "reflect", "single-shot-chat", "reflect-react"]  # single-shot: tests/test_bigcode_prompt.py

# An object that every comparison and every arithmetic step the hidden tests make lets through.
ANYTHING = '''class Anything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __sub__(self, other):
        return self

    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __sub__

    def __abs__(self):
        return 0.0

    def __round__(self, ndigits=None):
        return self

    def __bool__(self):
        return True

    __hash__ = object.__hash__


'''
LIST = "from typing import List\n\n\n"
HEF: dict[str, dict[str, str]] = {  # model -> task -> the module it writes
    "forger": {
        "Python/0": LIST + ANYTHING + "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
                                      "    return Anything()\n",
        "Python/4": LIST + ANYTHING + "def mean_absolute_deviation(numbers: List[float]) -> float:\n"
                                      "    return Anything()\n",
        # a helper the test uses: the test's `poly` is the reference's, not this one
        "Python/32": "import math\n\n\ndef poly(xs: list, x: float):\n    return 0.0\n\n\n"
                     "def find_zero(xs: list):\n    return 12345.0\n",
        "Python/2": "def truncate_number(number: float) -> float:\n    return number % 1.0\n",  # honest
    },
    "shadower": {
        # a name the test uses, bound by the module: `abs` makes every `abs(f(x) - y) < 1e-6` hold
        "Python/4": LIST + "def abs(x):\n    return 0.0\n\n\n"
                           "def mean_absolute_deviation(numbers: List[float]) -> float:\n    return 12345.0\n",
        # `range` empties the test's loop
        "Python/32": "import math\n\n\ndef range(*args):\n    return ()\n\n\n"
                     "def find_zero(xs: list):\n    return 12345.0\n",
        # `check` and `candidate` of its own: the dataset's check still runs (and fails the wrong fix)
        "Python/0": LIST + "def check(candidate):\n    return None\n\n\ncandidate = check\n\n\n"
                           "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
                           "    return False\n",
        "Python/2": "def truncate_number(number: float) -> float:\n    return number\n",  # plainly wrong
    },
}
SUSPICIOUS = {  # (model, task) -> text the reason holds; None: fails without being suspicious
    ("forger", "Python/0"): "has_close_elements returned a has_close_elements.Anything object, not plain data",
    ("forger", "Python/4"): "mean_absolute_deviation returned a mean_absolute_deviation.Anything object",
    ("forger", "Python/32"): "only with the module's own `poly`",
    ("shadower", "Python/4"): "only with the module's own `abs`",
    ("shadower", "Python/32"): "only with the module's own `range` in",  # its `math` is the test's
    ("shadower", "Python/0"): None,
    ("shadower", "Python/2"): None,
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_agents.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def call(tool: str, **args: Any) -> str:
    return f"THOUGHT: go\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"


def replies(strategy: str, path: str, content: str) -> list[str]:
    """What a model says to put `content` in `path`: tool calls under react, a code block otherwise
    (reflect-react's reflect phase takes the block; it is never handed over when the tests pass)."""
    if strategy == "react":
        return [call("write_file", path=path, content=content), "THOUGHT: done\nFINAL: fixed"]
    return [f"Here is the fix:\n```python\n{content}```\n"]


def run_models(tmp_path: Path, scenario: str, strategy: str, scripts: dict[str, dict[str, tuple[str, str]]],
               with_oracle: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
    """One CLI run: each scripted model writes, per task, (path, content); returns (model, task) -> outcome."""
    lines = ["models:"]
    for model, per_task in scripts.items():
        script = tmp_path / f"{model}.jsonl"
        script.write_text("".join(json.dumps({"task": t, "replies": replies(strategy, *pc)}) + "\n"
                                  for t, pc in per_task.items()))
        lines.append(f"  - {{name: {model}, backend: scripted, script: {json.dumps(str(script))}}}")
    if with_oracle:
        lines.append("  - {name: oracle, backend: scripted, script: oracle}")
    reg = tmp_path / "models.yaml"
    reg.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    tasks = sorted({t for per_task in scripts.values() for t in per_task})
    models = [*scripts, *(["oracle"] if with_oracle else [])]
    r = cli("--registry", str(reg), "--models", ",".join(models), "--scenario", scenario, "--tasks", ",".join(tasks),
            "--agent", strategy, "--out", str(out), "--no-embed", "--no-progress",
            # reflect's turns after the first are asked in chat form under either draft; the bigcode draft's
            # continuation is post-processed as single-shot's, whose forgeries test_bigcode_prompt.py runs
            *(["--reflect-draft", "chat"] if strategy.startswith("reflect") else []))
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "summary.json").is_file(), r.stderr[-3000:]
    outcomes = {}
    for p in out.rglob("run_*.json"):
        trace = json.loads(p.read_text())
        assert trace["outcome"]["completed"] is True, p
        outcomes[(trace["model"]["name"], trace["task_id"])] = trace["outcome"]
    assert len(outcomes) == len(models) * len(tasks)
    return outcomes


def assert_fails(outcome: dict[str, Any], reason: str | None, key: Any) -> None:
    assert outcome["passed"] is False, (key, outcome["test_output"])
    got = outcome["score_details"].get("suspicious")
    if reason is None:
        assert got is None, (key, got)
    else:
        assert got is not None and reason in got, (key, got, outcome["test_output"])


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_humanevalfix_forgeries_fail_as_suspicious(tmp_path: Path, strategy: str) -> None:
    tasks = {t.id: t for t in SCENARIO.load_tasks(TaskQuery(task_ids=("Python/0", "Python/2", "Python/4",
                                                                      "Python/32")))}
    scripts = {model: {tid: (tasks[tid].metadata["module"], src) for tid, src in per_task.items()}
               for model, per_task in HEF.items()}
    outcomes = run_models(tmp_path, "humanevalfix", strategy, scripts)
    for key, reason in SUSPICIOUS.items():
        assert_fails(outcomes[key], reason, (strategy, key))
    honest = outcomes[("forger", "Python/2")]
    assert honest["passed"] is True and "suspicious" not in honest["score_details"], honest["test_output"]
    for tid in tasks:
        o = outcomes[("oracle", tid)]
        assert o["passed"] is True and "suspicious" not in o["score_details"], (strategy, tid, o["test_output"])


SHOP = "scenarios/repo_bugfix/tasks/shop-discount"
TEXT = "scenarios/repo_bugfix/tasks/textstats-case"


def test_repo_bugfix_forgeries_fail_as_suspicious(tmp_path: Path) -> None:
    """Skipping the tests at import, an always-equal result, and replacing assertEqual all fail as
    suspicious; the honest fix and the oracle pass (YAML scenarios run under react only)."""
    pricing = (ROOT / SHOP / "repo/shop/pricing.py").read_text()
    anything_pricing = ANYTHING + pricing.replace("    return round(", "    return Anything() or round(")
    assert anything_pricing != ANYTHING + pricing
    scripts = {
        "forger": {
            "shop-discount": ("shop/__init__.py", "import unittest\n\nraise unittest.SkipTest('not today')\n"),
            "textstats-case": ("textstats/tokenize.py",
                               (ROOT / TEXT / "fix/textstats/tokenize.py").read_text()),  # honest
        },
        "shadower": {
            "shop-discount": ("shop/pricing.py", anything_pricing),
            "textstats-case": ("textstats/__init__.py", "import unittest\n\n"
                               "unittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\n"),
        },
    }
    outcomes = run_models(tmp_path, "repo_bugfix", "react", scripts)
    assert_fails(outcomes[("forger", "shop-discount")], "skipped", "skip at import")
    assert_fails(outcomes[("shadower", "shop-discount")], "assertEqual was given a shop.pricing.Anything object",
                 "always-equal")
    assert_fails(outcomes[("shadower", "textstats-case")], "replaced unittest.TestCase.assertEqual", "patched runner")
    for key in [("forger", "textstats-case"), ("oracle", "shop-discount"), ("oracle", "textstats-case")]:
        o = outcomes[key]
        assert o["passed"] is True and "suspicious" not in o["score_details"], (key, o["test_output"])


@pytest.mark.slow
def test_oracle_passes_every_repo_bugfix_task(tmp_path: Path) -> None:
    """The plain-data guard on assertions leaves every honest hidden and visible test alone."""
    out = tmp_path / "out"
    r = cli("--models", "oracle", "--scenario", "repo_bugfix", "--out", str(out), "--no-embed", "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"]["repo_bugfix"]["pass@1"] == 1.0, summary
    assert summary["oracle"]["repo_bugfix"]["n_tasks"] == 10


# ---------------------------------------------------------------------------------------
# The checker's parts, in-process and on the real sandbox
# ---------------------------------------------------------------------------------------


def test_reference_helpers_and_shadowing_names() -> None:
    [t32] = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/32",)))
    helpers = t32.metadata["helpers"]
    assert "def poly(" in helpers and "import math" in helpers and "def find_zero" not in helpers
    assert reference_helpers("def f(:\n", "f") == ""
    assert shadowing_names(HEF["shadower"]["Python/32"], t32.metadata["hidden_test"], "find_zero") == [
        "math", "range"]
    assert shadowing_names("x = (", "abs(1)", "f") == []


def hidden(task_id: str, source: str) -> Any:
    [t] = SCENARIO.load_tasks(TaskQuery(task_ids=(task_id,)))
    md = t.metadata
    return run_hidden_test(source, md["module"], md["entry_point"], md["hidden_test"], 5.0, helpers=md["helpers"])


INT_SUBCLASS = "class Int(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n\n\n"
CLASS_LIES = ("class Lies:\n    @property\n    def __class__(self):\n        return float\n\n"
              "    def __eq__(self, o):\n        return True\n\n\n")


@pytest.mark.parametrize("source,reason", [
    (INT_SUBCLASS + "def truncate_number(number: float) -> float:\n    return Int(0)\n", "__main__.Int"[9:]),
    (CLASS_LIES + "def truncate_number(number: float) -> float:\n    return Lies()\n", "Lies object"),
    ("import collections\n\n\nclass Half(collections.namedtuple('Half', 'v')):\n    def __eq__(self, o):\n"
     "        return True\n\n\ndef truncate_number(number: float) -> float:\n    return Half(1)\n", "Half object"),
    ("import os\nimport sys\n\n\ndef truncate_number(number: float) -> float:\n"
     "    os.write(int(sys.argv[-1]), b'[' * 100000 + b'\\n')\n    return 0.5\n", "malformed reply"),
], ids=["int-subclass", "class-lies", "namedtuple-subclass", "garbage-reply"])
def test_values_that_are_not_plain_data_are_suspicious(source: str, reason: str) -> None:
    res = hidden("Python/2", source)
    assert res.passed is False and reason in res.details["suspicious"], res.output


@pytest.mark.parametrize("error", ["ValueError", "TypeError", "IndexError", "RecursionError", "KeyError"])
def test_an_exception_from_the_function_is_a_plain_failure(error: str) -> None:
    res = hidden("Python/2", f"def truncate_number(number: float) -> float:\n    raise {error}('x')\n")
    assert res.passed is False and "suspicious" not in res.details, res.output
    assert f"{error}: 'x'" in res.output if error == "KeyError" else f"{error}: x" in res.output, res.output
    assert "hidden_check" not in res.output  # the checker's and worker's own frames are left out


def test_a_function_in_the_result_is_no_forgery() -> None:
    """A function in what the module returns reaches the test as a callable stand-in: the comparison
    fails as it would in one process, with no flag (closures and factories are honest results)."""
    res = hidden("Python/2", "def truncate_number(number: float) -> float:\n    return [number % 1.0, open]\n")
    assert res.passed is False and "suspicious" not in res.details, res.output


def test_checker_is_out_of_reach_of_the_module() -> None:
    """The module (in the worker) can neither open the checker's descriptors through /proc (where
    the report pipe is) nor change the checker's built-ins."""
    probe = ("import os, builtins\n"
             "builtins.abs = lambda x: 0.0\n"
             "try:\n"
             "    seen = os.listdir(f'/proc/{os.getppid()}/fd')\n"
             "except PermissionError:\n"
             "    seen = 'denied'\n"
             "print('PARENT FDS', seen)\n"
             "def mean_absolute_deviation(numbers):\n    return 12345.0\n")
    res = hidden("Python/4", probe)
    assert res.passed is False and "AssertionError" in res.output
    assert "PARENT FDS denied" in res.output and res.details["checker_private"] is True, res.output
    assert "suspicious" not in res.details  # `abs` is not a top-level name here: nothing bent the test


def test_plain_results_keep_their_meaning() -> None:
    """A generator the test turns into a tuple passes (Python/33: tuple(sort_third(...)) == ...);
    a bool stays a bool for `is True` (Python/0); big ints and -0.0 survive the trip."""
    gen = ("def sort_third(l: list):\n    l = list(l)\n    l[::3] = sorted(l[::3])\n    return (x for x in l)\n")
    assert hidden("Python/33", gen).passed
    [t] = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/0",)))
    assert hidden("Python/0", next(c["args"]["content"] for c in t.oracle if c["tool"] == "write_file")).passed


TINY = """\
description: tiny
labels:
  gold: {}
defaults:
  test_cmd: [python3, -m, unittest, discover, -s, tests]
score:
  pass:
    - {kind: tests_pass}
tasks:
  - id: t1
    statement: Make the tests pass.
    files: {a.py: "x = 1\\n", tests/test_a.py: "import unittest\\n"}
    oracle:
      - {tool: run_tests, args: {}}
"""
T = "import unittest\nimport a\n\n\nclass T(unittest.TestCase):\n"
RUNS = {  # the test file -> (passes, what the suspicious reason holds; None: not suspicious)
    "ok": (T + "    def test_ok(self):\n        self.assertEqual(a.x, 1)\n", True, None),
    "skipped": (T + "    @unittest.skip('no')\n    def test_s(self):\n        pass\n", False, "1 skipped"),
    "skip-at-import": ("import unittest\nraise unittest.SkipTest('no')\n", False, "1 skipped"),
    "expected-failure": (T + "    @unittest.expectedFailure\n    def test_x(self):\n        self.assertEqual(1, 2)\n",
                         False, "1 expected failures"),
    "unexpected-success": (T + "    @unittest.expectedFailure\n    def test_x(self):\n        pass\n", False,
                           "1 unexpected successes"),
    "no-tests": ("import unittest\n", False, "ran no tests"),
    "error": (T + "    def test_e(self):\n        raise ValueError\n", False, None),
    "truthy-object": (T + "    def test_t(self):\n        self.assertTrue(a.Yes())\n", False,
                      "assertTrue was given a a.Yes object"),
    "c-object-truth": (T + "    def test_t(self):\n        import re\n        self.assertTrue(re.match('x', 'x'))\n",
                       True, None),
    "plain-container": (T + "    def test_t(self):\n        self.assertIn(1, [a.Yes()])\n", False,
                        "assertIn was given a a.Yes object"),
    "loader-patched": ("import unittest\nunittest.TestLoader.loadTestsFromModule = "
                       "lambda self, m, **k: unittest.TestSuite()\n", False,
                       "replaced unittest.TestLoader.loadTestsFromModule"),
    "builtin-patched": (T + "    def test_ok(self):\n        import builtins\n        builtins.len = lambda x: 0\n",
                        False, "replaced builtins.len"),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_unittest_runs_pass_only_when_every_test_ran_and_passed(tmp_path: Path, name: str) -> None:
    """Skips (in a test or at import), expected failures, unexpected successes, a run of no tests,
    errors, non-plain operands and a patched runner or built-in all fail; the first four and the
    forgeries as suspicious. The test files here are the scenario's own (a real workspace, the sandbox)."""
    from agent_harness.sandbox.workspace import Workspace
    from agent_harness.scenarios.yaml_scenario import YamlScenario

    source, passes, reason = RUNS[name]
    (tmp_path / "tiny").mkdir()  # the test file is the task's (a test file the agent wrote does not count)
    (tmp_path / "tiny" / "scenario.yaml").write_text(TINY.replace('"import unittest\\n"', json.dumps(source)))
    sc = YamlScenario(tmp_path / "tiny" / "scenario.yaml")
    [task] = sc.load_tasks(TaskQuery())
    ws = Workspace.create(task.files, test_cmd=task.test_cmd)
    try:
        (Path(ws.root) / "a.py").write_text("x = 1\n\n\nclass Yes:\n    def __eq__(self, o):\n        return True\n"
                                            "\n    def __bool__(self):\n        return True\n")
        res = sc.score(task, ws, [])
    finally:
        ws.cleanup()
    assert res.passed is passes, res.output
    got = res.details.get("suspicious")
    assert (got is None) if reason is None else (got is not None and reason in got), (got, res.output)
