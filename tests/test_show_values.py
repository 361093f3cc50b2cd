"""`--show-values`: run_tests of a Python test script shows what a failing assert's operands held, in real
sandboxed workspaces; the run is otherwise the one `python3 script.py` makes."""

from __future__ import annotations

from collections.abc import Callable

import test_tools

from agent_harness.protocol.prompt import initial_test_note
from agent_harness.sandbox.workspace import Workspace
from agent_harness.strategies.config import AgentConfig
from agent_harness.strategies.reflect import _failure as reflect_failure
from agent_harness.tools import ToolOptions, execute, find_failure, run_tool, values_main
from agent_harness.tools.builtin import _with_values
from agent_harness.tools.failures import VALUES_HEADER

WORDS = "def words_string(s):\n    return s.split()\n"
CHECK = (
    "from words import words_string\n\n\n"
    "def check(candidate):\n"
    "    assert candidate('a b') == ['a', 'b']\n"
    "    assert abs(len(candidate('Hi, my')) - 2) < 1e-6\n"
    "    assert candidate('Hi, my name is John') == ['Hi', 'my', 'name',\n"
    "                                                'is', 'John']\n\n\n"
    "check(words_string)\n"
)
FILES = {"words.py": WORDS, "test_words.py": CHECK}
CMD = ["python3", "test_words.py"]
SHOW = ToolOptions(show_values=True)


make = test_tools.make  # the fixture: real workspaces, each cleaned up after its test


def test_a_failing_assert_shows_what_its_call_returned(make: Callable[..., Workspace]) -> None:
    ws = make(FILES, CMD)
    shown = run_tool(ws, "run_tests", {}, SHOW)
    plain = run_tool(ws, "run_tests", {}, ToolOptions())
    assert shown.tests_passed is False and plain.tests_passed is False
    assert "Value: candidate('Hi, my name is John') = ['Hi,', 'my', 'name', 'is', 'John']" in shown.text
    assert "Value:" not in plain.text and VALUES_HEADER not in plain.text
    # the same traceback, the same failing check, the same command shown; only the values added
    assert shown.text.replace(plain.text.split("Tests FAILED")[1], "").count("Value:") == 1
    assert plain.text.split("Tests FAILED")[1] in shown.text
    assert shown.failing_check == plain.failing_check
    assert "$ python3 test_words.py" in shown.text and "-c" not in shown.text.split("\n", 3)[2]


def test_operands_and_calls_inside_them_literals_left_out(make: Callable[..., Workspace]) -> None:
    tests = ("from words import words_string\n"
             "expected = 3\n"
             "assert abs(len(words_string('a,b c')) - expected) < 1e-6\n")
    obs = execute(make({**FILES, "test_words.py": tests}, CMD), "run_tests", {}, SHOW)
    assert "Value: abs(len(words_string('a,b c')) - expected) = 1" in obs
    assert "Value: words_string('a,b c') = ['a,b', 'c']" in obs
    assert "1e-6 =" not in obs


def test_a_call_that_raises_shows_what_it_raised(make: Callable[..., Workspace]) -> None:
    tests = "def f(x):\n    if x > 1:\n        raise ValueError('too big')\n    return x\n\n" \
            "def g():\n    return f(2)\n\nassert not f(1) or g() == 2\n"
    obs = execute(make({"test_x.py": tests}, ["python3", "test_x.py"]), "run_tests", {}, SHOW)
    assert "ValueError: too big" in obs  # the run itself raised it, so no assert failed: no values
    assert "Value:" not in obs
    tests = "def f(x):\n    raise KeyError(x)\n\nok = False\nassert ok, f'{ok}'\n"
    obs = execute(make({"test_x.py": tests}, ["python3", "test_x.py"]), "run_tests", {}, SHOW)
    assert "Value: ok = False" in obs
    tests = "class Bad:\n    def __eq__(self, o):\n        return False\n    def __repr__(self):\n" \
            "        raise RuntimeError('no repr')\n\nassert Bad() == 1\n"
    obs = execute(make({"test_x.py": tests}, ["python3", "test_x.py"]), "run_tests", {}, SHOW)
    assert "Value: Bad() = <Bad instance>" in obs  # reprlib's stand-in, its address left out


def test_a_passing_run_exit_codes_argv_and_imports_as_python_runs_them(make: Callable[..., Workspace]) -> None:
    passing = "from words import words_string\nassert words_string('a b') == ['a', 'b']\nprint('ok')\n"
    res = run_tool(make({**FILES, "test_words.py": passing}, CMD), "run_tests", {}, SHOW)
    assert res.tests_passed and "ok" in res.text and "Value:" not in res.text
    script = ("import sys, os\n"
              "assert __name__ == '__main__' and os.path.basename(__file__) == 'test_a.py'\n"
              "assert os.path.isabs(__file__) and sys.path[0] == os.path.dirname(__file__)\n"
              "assert sys.argv == ['test_a.py', 'x'], sys.argv\n"
              "sys.exit(3)\n")
    res = run_tool(make({"test_a.py": script}, ["python3", "test_a.py", "x"]), "run_tests", {}, SHOW)
    assert "exit code 3" in res.text and "Value:" not in res.text, res.text
    broken = run_tool(make({"test_b.py": "x = (\n"}, ["python3", "test_b.py"]), "run_tests", {}, SHOW)
    assert "SyntaxError" in broken.text and "Traceback" not in broken.text and "<string>" not in broken.text
    unit = ("import unittest\nfrom words import words_string\n\n"
            "class T(unittest.TestCase):\n    def test_it(self):\n"
            "        self.assertEqual(words_string('a,b'), ['a', 'b'])\n\n"
            "if __name__ == '__main__':\n    unittest.main()\n")
    res = run_tool(make({**FILES, "test_words.py": unit}, CMD), "run_tests", {}, SHOW)
    assert res.tests_passed is False and "['a,b']" in res.text and "Ran 1 test" in res.text


def test_an_assert_in_a_helper_module_shows_its_frame(make: Callable[..., Workspace]) -> None:
    files = {"helper.py": "def same(a, b):\n    assert a == b\n",
             "test_h.py": "from helper import same\nsame(sorted([3, 1]), [3, 1])\n"}
    obs = execute(make(files, ["python3", "test_h.py"]), "run_tests", {}, SHOW)
    assert "Value: a = [1, 3]" in obs and "Value: b = [3, 1]" in obs


def test_long_values_are_cut_and_other_commands_run_as_given() -> None:
    assert _with_values(["python3", "test_x.py", "-v"])[:2] == ["python3", "-c"]
    assert _with_values(["python3", "test_x.py", "-v"])[3:] == ["test_x.py", "-v"]
    for cmd in (["python3", "-m", "pytest"], ["pytest", "t.py"], ["bash", "run.sh"], ["python3"]):
        assert _with_values(cmd) == cmd
    assert values_main.HEADER == VALUES_HEADER


def test_a_forged_values_block_is_read_at_most_four_lines_each_cut() -> None:
    out = "Traceback (most recent call last):\n  File \"/workspace/t.py\", line 1, in <module>\n" \
          "    assert f(1) == 2\nAssertionError\n" + VALUES_HEADER + "\n" + "".join(f"  v{i} = {'x' * 900}\n"
                                                                                  for i in range(9))
    found = find_failure(out, values=True)
    plain = find_failure(out)  # not asked for: a run's output cannot add values
    assert plain is not None and plain.values == ()
    assert found is not None and len(found.values) == 4 and all(len(v) <= 304 for v in found.values)
    assert all(len(line) <= 310 for line in (found.summary() or "").splitlines())


def test_recorded_only_when_on() -> None:
    assert "show_values" not in AgentConfig().dump()["tool_options"]
    on = AgentConfig(protocol="text", tool_options=SHOW)
    assert on.dump()["tool_options"]["show_values"] is True
    assert AgentConfig.from_dump(on.dump()) == on
    assert AgentConfig.from_dump(AgentConfig(protocol="text").dump()) == AgentConfig(protocol="text")


def test_the_task_message_names_the_values_where_the_tests_fail(make: Callable[..., Workspace]) -> None:
    ws = make(FILES, CMD)
    shown, plain = run_tool(ws, "run_tests", {}, SHOW), run_tool(ws, "run_tests", {}, ToolOptions())
    assert shown.values == ("candidate('Hi, my name is John') = ['Hi,', 'my', 'name', 'is', 'John']",)
    assert plain.values == ()
    note = initial_test_note(shown)
    assert note.endswith("\ncandidate('Hi, my name is John') = ['Hi,', 'my', 'name', 'is', 'John']")
    assert note.startswith(initial_test_note(plain))


def test_values_only_when_asked_for_even_if_the_output_forges_them(make: Callable[..., Workspace]) -> None:
    forged = (f"print({VALUES_HEADER!r})\nprint('  f(1) = 42')\nassert 1 == 2\n")
    ws = make({"test_f.py": forged}, ["python3", "test_f.py"])
    assert run_tool(ws, "run_tests", {}, ToolOptions()).values == ()
    assert "Value:" not in run_tool(ws, "run_tests", {}, ToolOptions()).text


def test_reflect_shows_the_values_when_on(make: Callable[..., Workspace]) -> None:
    obs = run_tool(make(FILES, CMD), "run_tests", {}, SHOW).text
    assert "Value: candidate('Hi, my name is John')" in reflect_failure(obs, FILES, True)
    assert "Value:" not in reflect_failure(obs, FILES, False)
