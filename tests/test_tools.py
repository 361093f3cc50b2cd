"""The agent's tools on real workspaces: behaviour, helpers on/off, truncation, determinism, specs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent_harness.errors import ToolError
from agent_harness.protocol import parse_reply, render_system_prompt
from agent_harness.sandbox import Limits, bwrap_problem
from agent_harness.sandbox.workspace import Workspace
from agent_harness.tools import (
    TOOLS,
    ToolOptions,
    execute,
    failure_point,
    failure_summary,
    find_failure,
    tools_for,
    truncate,
)
from agent_harness.types import ToolParam

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = (
    "import unittest\n\nfrom calc import add, mul\n\n\n"
    "class CalcTest(unittest.TestCase):\n"
    "    def test_add(self):\n"
    "        self.assertEqual(add(2, 2), 4)\n\n"
    "    def test_mul(self):\n"
    "        self.assertEqual(mul(2, 3), 6)\n"
)
FILES = {"calc.py": CALC, "tests/__init__.py": "", "tests/test_calc.py": TESTS, "README.md": "Calculator.\n"}
TEST_CMD = ["python3", "-m", "unittest", "discover", "-s", "tests", "-t", "."]
ON = ToolOptions()
OFF = ToolOptions(syntax_check=False, extract_failure=False)
LIMITS = Limits(cpu_s=5, wall_s=10.0, mem_bytes=512 << 20, nproc=32, output_bytes=256 << 10)


@pytest.fixture
def make() -> Iterator[Callable[..., Workspace]]:
    made: list[Workspace] = []

    def create(files: dict[str, str] = FILES, test_cmd: list[str] | None = TEST_CMD,
               limits: Limits = LIMITS) -> Workspace:
        ws = Workspace.create(files, test_cmd=test_cmd, limits=limits)
        made.append(ws)
        return ws

    yield create
    for ws in made:
        ws.cleanup()


@pytest.fixture
def ws(make: Callable[..., Workspace]) -> Workspace:
    return make()


def call(ws: Workspace, tool: str, opts: ToolOptions = ON, **args: object) -> str:
    return execute(ws, tool, args, opts)


# ----------------------------------------------------------------------------------------
# Specs: one definition per tool, the prompt rendered from them


def test_tools_for_with_and_without_tests(make: Callable[..., Workspace]) -> None:
    names = [t.name for t in tools_for(make())]
    assert names == ["read_file", "write_file", "list_dir", "run_cmd", "git_diff", "grep", "run_tests"]
    assert [t.name for t in tools_for(make(test_cmd=None))] == names[:-1]
    with pytest.raises(ToolError, match="unknown tool 'run_tests'"):
        call(make(test_cmd=None), "run_tests")


def test_specs_come_from_the_functions(ws: Workspace) -> None:
    specs = {t.name: t for t in tools_for(ws)}
    assert specs["read_file"].params == (ToolParam("path", "string", "the file to read"),)
    assert specs["run_cmd"].params[0].type == "string|array"
    assert [(p.name, p.required) for p in specs["grep"].params] == [("pattern", True), ("path", False)]
    assert specs["list_dir"].signature() == "list_dir(path: string?)"
    assert specs["git_diff"].params == () and specs["run_tests"].params == ()
    for name, spec in specs.items():
        fn = TOOLS[name].run
        assert spec.doc == fn.__doc__.strip().splitlines()[0]  # type: ignore[union-attr]
        assert len(spec.doc) < 80 and all(len(p.doc) < 60 for p in spec.params)


def test_system_prompt_lists_every_tool(ws: Workspace) -> None:
    specs = tools_for(ws)
    prompt = render_system_prompt(specs)
    for spec in specs:
        assert f"- {spec.signature()} - {spec.doc}" in prompt
    assert "run_tests" not in render_system_prompt([s for s in specs if s.name != "run_tests"])


def test_parsed_calls_run(ws: Workspace) -> None:
    """What the protocol parser accepts, execute runs (string and array commands alike)."""
    tools = {t.name: t for t in tools_for(ws)}
    for reply in ['THOUGHT: x\nTOOL_CALL: {"tool": "run_cmd", "args": {"cmd": "echo hi"}}',
                  'THOUGHT: x\nTOOL_CALL: {"tool": "run_cmd", "args": {"cmd": ["echo", "hi"]}}']:
        parsed = parse_reply(reply, tools)
        assert "stdout:\nhi" in call(ws, parsed.tool or "", **(parsed.args or {}))


def test_bad_calls_are_tool_errors(ws: Workspace) -> None:
    with pytest.raises(ToolError, match="unknown tool 'delete_all'.*read_file"):
        call(ws, "delete_all")
    with pytest.raises(ToolError, match='missing required argument "path"'):
        call(ws, "read_file")
    with pytest.raises(ToolError, match='unexpected argument "mode"'):
        call(ws, "read_file", path="calc.py", mode="r")
    with pytest.raises(ToolError, match="must be a JSON string"):
        call(ws, "read_file", path=["calc.py"])
    with pytest.raises(ToolError, match="cmd is empty"):
        call(ws, "run_cmd", cmd="  ")
    with pytest.raises(ToolError, match="list of strings"):
        call(ws, "run_cmd", cmd=["echo", 1])
    assert call(ws, "list_dir", path=None).startswith("README.md")  # null optional argument = default


# ----------------------------------------------------------------------------------------
# File tools


def test_read_file(ws: Workspace) -> None:
    assert call(ws, "read_file", path="calc.py") == CALC
    assert call(ws, "read_file", path="./tests/../calc.py") == CALC
    assert call(ws, "read_file", path="tests/__init__.py") == "(tests/__init__.py is empty)"
    with pytest.raises(ToolError, match="nope.py: no such file"):
        call(ws, "read_file", path="nope.py")
    with pytest.raises(ToolError, match="tests is a folder; use list_dir"):
        call(ws, "read_file", path="tests")
    (ws.root / "blob.bin").write_bytes(b"\x00\x01binary")
    with pytest.raises(ToolError, match="binary"):
        call(ws, "read_file", path="blob.bin")


def test_read_file_truncates_long_files(ws: Workspace) -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    call(ws, "write_file", path="long.txt", content=text)
    shown = call(ws, "read_file", replace(ON, max_read_chars=1000), path="long.txt")
    assert shown.startswith("line 0\nline 1\n") and shown.endswith("line 4999\n")
    m = re.search(r"\[\.\.\. (\d+) characters \((\d+) lines\) cut \.\.\.\]", shown)
    assert m is not None
    kept = shown.replace(m.group(0) + "\n", "")
    assert int(m.group(1)) == len(text) - len(kept) and len(shown) < 1100
    assert int(m.group(2)) == text.count("\n") - kept.count("\n")


def test_write_file_creates_and_replaces(ws: Workspace) -> None:
    obs = call(ws, "write_file", path="pkg/sub/new.txt", content="a\nb")
    assert obs == "Wrote pkg/sub/new.txt (2 lines)."
    assert (ws.root / "pkg/sub/new.txt").read_text() == "a\nb"
    obs = call(ws, "write_file", path="calc.py", content=CALC.replace("a - b", "a + b"))
    assert obs == "Wrote calc.py (6 lines)."
    assert "return a + b" in call(ws, "read_file", path="calc.py")
    # the sandbox may edit what the harness wrote
    assert "exit code: 0" in call(ws, "run_cmd", cmd="echo more >> pkg/sub/new.txt")
    with pytest.raises(ToolError, match="is a folder"):
        call(ws, "write_file", path="tests", content="x")
    with pytest.raises(ToolError, match="in the way"):
        call(ws, "write_file", path="README.md/x.txt", content="x")


SYNTAX_CASES = [
    ("def f(:\n    return 1\n", "SyntaxError in bad.py line 1", "def f(:"),
    ("def f():\nreturn 1\n", "IndentationError in bad.py line 2", "return 1"),
    ("x = (1,\n", "SyntaxError in bad.py line 1", "x = (1,"),
]


@pytest.mark.parametrize("source,error,line", SYNTAX_CASES)
def test_syntax_check_on_and_off(ws: Workspace, source: str, error: str, line: str) -> None:
    on = call(ws, "write_file", ON, path="bad.py", content=source)
    assert on.startswith("Wrote bad.py") and "syntax error" in on and error in on and f"    {line}" in on
    off = call(ws, "write_file", OFF, path="bad.py", content=source)
    assert off == on.splitlines()[0]
    assert "syntax error" not in call(ws, "write_file", ON, path="good.py", content="x = 1\n")
    assert "syntax error" not in call(ws, "write_file", ON, path="notes.txt", content=source)
    assert (ws.root / "bad.py").read_text() == source  # saved either way


def test_list_dir(ws: Workspace) -> None:
    assert call(ws, "list_dir") == "README.md\ncalc.py\ntests/\ntests/__init__.py\ntests/test_calc.py"
    assert call(ws, "list_dir", path="tests") == "tests/__init__.py\ntests/test_calc.py"
    call(ws, "run_cmd", cmd="mkdir empty && ln -s calc.py alias.py && mkdir __pycache__ && touch x.pyc")
    listing = call(ws, "list_dir").splitlines()
    assert "alias.py -> calc.py" in listing and "empty/" in listing
    assert not [e for e in listing if ".git" in e or "pycache" in e or e.endswith(".pyc")]
    assert call(ws, "list_dir", path="empty") == "(empty is empty)"
    with pytest.raises(ToolError, match="no such folder"):
        call(ws, "list_dir", path="nope")
    with pytest.raises(ToolError, match="is a file"):
        call(ws, "list_dir", path="calc.py")
    call(ws, "run_cmd", cmd="mkdir many && cd many && touch $(seq 1 30)")
    short = call(ws, "list_dir", replace(ON, max_list_entries=10), path="many")
    assert len(short.splitlines()) == 11 and "[... 20 more entries not shown" in short


# ----------------------------------------------------------------------------------------
# Commands


def test_run_cmd_string_and_argv(ws: Workspace) -> None:
    out = call(ws, "run_cmd", cmd="echo out && echo err >&2 && exit 3")
    assert out == "exit code: 3\nstdout:\nout\nstderr:\nerr"  # a failure is an observation, not an error
    assert call(ws, "run_cmd", cmd=["python3", "-c", "print(2 + 2)"]) == "exit code: 0\nstdout:\n4"
    assert call(ws, "run_cmd", cmd="true") == "exit code: 0\n(no output)"
    assert call(ws, "run_cmd", cmd="ls | sort -r | head -1") == "exit code: 0\nstdout:\ntests"
    missing = call(ws, "run_cmd", cmd=["no-such-tool"])
    assert missing == "exit code: 127\nstderr:\nno-such-tool: command not found"
    assert "exit code: 127" in call(ws, "run_cmd", cmd="no-such-tool --x")


def test_run_cmd_output_is_truncated_head_and_tail(ws: Workspace) -> None:
    out = call(ws, "run_cmd", replace(ON, max_output_chars=2000), cmd="seq 1 20000")
    assert out.startswith("exit code: 0\nstdout:\n1\n2\n3\n") and out.endswith("\n19999\n20000")
    m = re.search(r"\[\.\.\. (\d+) characters \((\d+) lines\) cut \.\.\.\]", out)
    assert m is not None and int(m.group(2)) > 19000
    assert len(out) < 2100


def test_run_cmd_timeout_is_reported(make: Callable[..., Workspace]) -> None:
    ws = make(limits=replace(LIMITS, wall_s=2.0))
    out = call(ws, "run_cmd", cmd="echo started; sleep 30")
    assert out == "exit code: 137 (killed: it ran longer than 2 seconds)\nstdout:\nstarted"  # output kept


def test_run_tests_and_failure_extraction(ws: Workspace) -> None:
    on = call(ws, "run_tests", ON)
    lines = on.splitlines()
    assert lines[0] == "Failing test: test_add (tests.test_calc.CalcTest.test_add)"
    assert lines[1] == "Failing check: self.assertEqual(add(2, 2), 4)  (tests/test_calc.py, line 8)"
    assert lines[2] == "Error: AssertionError: 0 != 4"
    assert lines[4].startswith("Tests FAILED (exit code 1).  $ python3 -m unittest discover")
    assert "FAILED (failures=1)" in on
    off = call(ws, "run_tests", OFF)
    assert off.startswith("Tests FAILED (exit code 1).") and "Failing check" not in off
    assert off.splitlines()[1:] == lines[4:][1:]  # the same output, without the summary
    call(ws, "write_file", path="calc.py", content=CALC.replace("a - b", "a + b"))
    passed = call(ws, "run_tests", ON)
    assert passed.startswith("Tests PASSED.") and "Failing" not in passed and "OK" in passed


def test_failure_extraction_in_run_cmd(ws: Workspace) -> None:
    check = "from calc import add\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n\ncheck(add)\n"
    call(ws, "write_file", path="check.py", content=check)
    on = call(ws, "run_cmd", ON, cmd="python3 check.py")
    assert on.startswith("Failing check: assert candidate(1, 2) == 3  (check.py, line 4)\n"
                         "Error: AssertionError\n\nexit code: 1\nstderr:\nTraceback")
    assert "Failing" not in call(ws, "run_cmd", OFF, cmd="python3 check.py")
    call(ws, "write_file", path="boom.py", content="import calc\n\ncalc.add(1)\n")
    boom = call(ws, "run_cmd", ON, cmd=["python3", "boom.py"])
    assert "Error: TypeError: add() missing 1 required positional argument: 'b'" in boom
    assert "Failing" not in call(ws, "run_cmd", ON, cmd="python3 -c 'print(1)'")


def test_a_multi_line_check_is_shown_whole(ws: Workspace, tmp_path: Path) -> None:
    """Python 3.11's traceback shows the first line of a statement; the observation shows all of it,
    read from the file the run used, on one line."""
    check = ("from calc import add\n\ndef check(candidate):\n    assert candidate(1, 2) == [\n"
             "        3, 4,\n        5\n    ]\n\ncheck(add)\n")
    call(ws, "write_file", path="check.py", content=check)
    on = call(ws, "run_cmd", ON, cmd="python3 check.py")
    assert on.startswith("Failing check: assert candidate(1, 2) == [3, 4, 5]  (check.py, line 4)\n")
    assert "    assert candidate(1, 2) == [\n" in on  # the traceback itself is left as it ran
    swapped = call(ws, "run_cmd", ON, cmd="python3 check.py; s=$?; echo 'x = 1' > check.py; exit $s")  # changed since
    assert swapped.startswith("Failing check: assert candidate(1, 2) == [  (check.py, line 4)\n")
    (ws.root / "evil.py").symlink_to(tmp_path / "evil.py")  # a statement outside the workspace is never read
    (tmp_path / "evil.py").write_text("assert f(1) == [\n    9]\n")
    fake = ("printf 'Traceback (most recent call last):\\n  File \"/workspace/evil.py\", line 1, in <module>\\n"
            "    assert f(1) == [\\nAssertionError\\n' >&2; exit 1")
    assert call(ws, "run_cmd", ON, cmd=fake).startswith("Failing check: assert f(1) == [  (evil.py, line 1)\n")
    outside = ('Traceback (most recent call last):\n  File "/etc/passwd", line 1, in <module>\n'
               "    assert f(1) == [\nAssertionError\n")
    assert failure_summary(outside, lambda path: None) == "Failing check: assert f(1) == [  (/etc/passwd, line 1)\n" \
        "Error: AssertionError"
    def summary(text: str) -> str:
        return failure_summary(outside, lambda path: text) or ""

    assert summary("assert f(1) == [\n 1,\n 2]\n").startswith("Failing check: assert f(1) == [1, 2]  (")
    assert summary("((((" * 10000).startswith("Failing check: assert f(1) == [  (")
    huge = "assert f(1) == [\n" + "1,\n" * 500_000 + "]\n"  # read in bounded pieces, never parsed whole
    assert summary(huge).startswith("Failing check: assert f(1) == [  (")


def test_failure_summary_formats() -> None:
    pytest_out = (
        "    def test_add():\n>       assert add(1, 2) == 4\nE       assert 3 == 4\n"
        "E        +  where 3 = add(1, 2)\n\ntest_x.py:7: AssertionError\n"
    )
    assert failure_summary(pytest_out) == ("Failing check: assert add(1, 2) == 4  (test_x.py, line 7)\n"
                                           "Error: assert 3 == 4")
    assert failure_summary("all good\n") is None
    two = ("FAIL: test_a (t.T.test_a)\nTraceback (most recent call last):\n"
           '  File "/workspace/t.py", line 3, in test_a\n    self.assertTrue(False)\n'
           "AssertionError: False is not true\nFAIL: test_b (t.T.test_b)\n")
    assert failure_summary(two) == ("Failing test: test_a (t.T.test_a) (1 of 2 failing tests)\n"
                                    "Failing check: self.assertTrue(False)  (t.py, line 3)\n"
                                    "Error: AssertionError: False is not true")


def test_failure_is_read_once_into_typed_fields() -> None:
    out = ('Traceback (most recent call last):\n  File "/workspace/test_t.py", line 5, in <module>\n'
           "    check(f)\n  File \"/workspace/lib.py\", line 2, in check\n    raise ValueError('no')\n"
           "ValueError: no\n")
    found = find_failure(out)
    assert found is not None and found.check is not None and found.raised is not None
    assert (found.check.file, found.check.line, found.point) == ("test_t.py", 5, "check(f)")
    assert found.raised.code == "raise ValueError('no')" and found.error == "ValueError: no"
    long = "x" * 400  # a caller's replacement of the check line is its own: never cut like the parsed lines
    assert found.summary(long) == f"{long}\nRaised at: raise ValueError('no')  (lib.py, line 2)\nError: ValueError: no"
    bare = find_failure("Traceback (most recent call last):\n  File \"/usr/lib/x.py\", line 1, in f\nKeyError: 3\n")
    assert bare is not None and bare.check is None and bare.point == "KeyError: 3"  # no code: the error is the point
    assert failure_point("1 test\nno traceback here\n", None) == "no traceback here"
    assert failure_point("", None) == "(no output)"


def test_git_diff_tool(ws: Workspace) -> None:
    assert call(ws, "git_diff") == "No changes: every file is as it was at the start."
    call(ws, "write_file", path="calc.py", content=CALC.replace("a - b", "a + b"))
    call(ws, "run_cmd", cmd="rm README.md && echo hi > new.txt")
    diff = call(ws, "git_diff")
    assert "-    return a - b\n+    return a + b" in diff
    assert "diff --git a/README.md b/README.md\ndeleted file mode 100644" in diff
    assert "diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt" in diff
    assert diff == ws.diff() and ws.changed_files() == ["README.md", "calc.py", "new.txt"]
    git = ws.run(["git", "diff", "--stat"])  # git in the sandbox agrees on tracked files
    assert "calc.py" in git.stdout and "README.md" in git.stdout


def test_grep(ws: Workspace) -> None:
    assert call(ws, "grep", pattern=r"def \w+\(") == (
        "calc.py:1: def add(a, b):\ncalc.py:5: def mul(a, b):\n"
        "tests/test_calc.py:7: def test_add(self):\ntests/test_calc.py:10: def test_mul(self):")
    assert call(ws, "grep", pattern="add", path="calc.py") == "calc.py:1: def add(a, b):"
    assert call(ws, "grep", pattern="zzz") == "No matches for 'zzz'."
    assert call(ws, "grep", pattern="zzz", path="tests") == "No matches for 'zzz' in tests."
    assert "initial task files" not in call(ws, "grep", pattern="initial")  # .git is not searched
    with pytest.raises(ToolError, match="invalid regular expression"):
        call(ws, "grep", pattern="(unclosed")
    with pytest.raises(ToolError, match="no such file or folder"):
        call(ws, "grep", pattern="x", path="nope")
    many = call(ws, "grep", replace(ON, max_grep_matches=2), pattern="a")
    assert len(many.splitlines()) == 3 and "more matches not shown" in many


def test_grep_catastrophic_pattern_does_not_hang(ws: Workspace) -> None:
    call(ws, "write_file", path="a.txt", content="a" * 40 + "!\n")
    with pytest.raises(ToolError, match="took longer than 1s"):
        call(ws, "grep", replace(ON, grep_timeout_s=1.0), pattern="(a+)+$")
    assert call(ws, "grep", pattern="a!") == "a.txt:1: " + "a" * 40 + "!"


def test_truncate() -> None:
    assert truncate("short", 10) == "short"
    text = "\n".join(f"{i:04d}" for i in range(1000)) + "\n"
    cut = truncate(text, 200)
    assert cut.startswith("0000\n0001\n") and cut.endswith("0998\n0999\n")
    m = re.search(r"\[\.\.\. (\d+) characters \((\d+) lines\) cut \.\.\.\]\n", cut)
    assert m is not None and len(cut.replace(m.group(0), "")) + int(m.group(1)) == len(text)


# ----------------------------------------------------------------------------------------
# Determinism: same files, same calls, same observations (paths shown as /workspace)

SESSION = [
    ("list_dir", {}), ("read_file", {"path": "calc.py"}), ("grep", {"pattern": "add"}),
    ("run_tests", {}), ("run_cmd", {"cmd": "pwd; ls -ln | awk '{print $1, $3, $4, $NF}'; id -u"}),
    ("run_cmd", {"cmd": "python3 -c 'import tempfile, os; print(tempfile.gettempdir(), os.getcwd())'"}),
    ("run_cmd", {"cmd": "python3 -c 'print({\"a\", \"b\", \"c\", \"d\"})'"}),
    ("write_file", {"path": "calc.py", "content": CALC.replace("a - b", "a + b")}),
    ("git_diff", {}),
    ("run_cmd", {"cmd": "git status --short && git commit -qam fix && git log --format='%H %ad'"}),
    ("run_tests", {}),
]


@pytest.mark.parametrize("mode", ["bwrap", "rlimit"])
def test_observations_are_deterministic(make: Callable[..., Workspace], mode: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "bwrap" and bwrap_problem() is not None:
        pytest.skip(f"bubblewrap does not work here: {bwrap_problem()}")
    monkeypatch.setenv("AGENT_HARNESS_SANDBOX", mode)
    runs = []
    for _ in range(2):
        ws = make()
        runs.append([call(ws, tool, **args) for tool, args in SESSION])
        assert str(ws.root) not in "".join(runs[-1])
    assert runs[0] == runs[1]
    assert "/workspace" in runs[0][4] and "/tmp /workspace" in runs[0][5]
    assert "\nRan 2 tests\n" in runs[0][3]  # unittest's timing is dropped


def test_test_runner_timings_are_dropped(ws: Workspace) -> None:
    cmd = "echo 'Ran 12 tests in 0.314s'; echo '==== 1 failed, 2 passed in 0.12s ===='"
    out = call(ws, "run_cmd", cmd=cmd)
    assert out == "exit code: 0\nstdout:\nRan 12 tests\n==== 1 failed, 2 passed ===="
