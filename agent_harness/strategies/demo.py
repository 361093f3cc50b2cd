"""A worked example episode, shown to the model as earlier chat turns before its real task.

Small models copy what they see: given format examples in the system prompt they recite them,
while a demonstrated episode (read → fix → test → FINAL) is a pattern they follow. The demo's
observations are produced by running its calls through the real tools in a scratch workspace,
so they look exactly like the ones the model will get.

Two sources (`AgentConfig.demo_source`): `builtin`, a made-up bug in `last.py`, and `task`, a real
HumanEvalFix task of the tuning split (even-numbered) other than the one at hand, fixed with its
reference code and shown as the agent's own task message would show it. The calls follow the agent's
tools: edit_file for the fix when it has it, and shell commands alone when run_cmd is all it has.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..protocol import format_observation, initial_test_note, next_step
from ..types import Message

DEMO_FILE = "last.py"
DEMO_TEST = "test_last.py"
BUGGY = "def last(items):\n    return items[len(items)]\n"
FIXED = "def last(items):\n    return items[len(items) - 1]\n"
TESTS = "from last import last\n\nassert last([1, 2, 3]) == 3\nassert last(['a']) == 'a'\nprint('All tests passed.')\n"
STATEMENT = (f"Example task: the function `last` in `{DEMO_FILE}` has a bug. The tests in `{DEMO_TEST}` show "
             f"the expected behaviour. Read `{DEMO_FILE}`, fix the bug, and run the tests.")
THOUGHT = "items[len(items)] is past the end; the last item is at len(items) - 1."
# Tuning-split tasks the `task` demo is drawn from: the first that is not the task at hand.
DEMO_TASKS = ("Python/4", "Python/2")


@dataclass(frozen=True)
class Example:
    """A task to demonstrate: its files, the one to fix and how, the test command, what the fix says."""

    statement: str
    files: dict[str, str]
    path: str
    fixed: str
    test_cmd: list[str]
    thought: str  # the fix step's; "{point}" is replaced by where the tests fail
    summary: str
    note: bool = False  # the statement gets the initial test run's note, as a real task message does


BUILTIN = Example(STATEMENT, {DEMO_FILE: BUGGY, DEMO_TEST: TESTS}, DEMO_FILE, FIXED, ["python3", DEMO_TEST], THOUGHT,
                  "last() returns the last item.")


def _task_example(avoid: str) -> Example:
    """The first of DEMO_TASKS that is not `avoid`, fixed with its reference (the oracle's write)."""
    from ..scenarios import TaskQuery
    from ..scenarios.humanevalfix import SCENARIO

    task_id = next(t for t in DEMO_TASKS if t != avoid)
    [task] = SCENARIO.load_tasks(TaskQuery(task_ids=(task_id,)))
    write = next(c["args"] for c in task.oracle if c["tool"] == "write_file")
    entry = task.metadata.get("entry_point", "the function")
    statement = task.statement.removeprefix(f"Task {task.id}: ")
    return Example(f"Example task: {statement}", dict(task.files), write["path"], write["content"],
                   list(task.test_cmd or []), f"The tests fail at {{point}}. I fix {entry} in {write['path']}.",
                   f"fixed {entry}.", note=True)


def _span(before: str, after: str) -> tuple[str, str]:
    """The lines that differ between `before` and `after` (old, new), with context until `old` is unique."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi_a, hi_b = head, len(a) - tail, len(b) - tail
    while lo > 0 and (lo == hi_a or before.count("".join(a[lo:hi_a])) != 1):
        lo -= 1
    return "".join(a[lo:hi_a]), "".join(b[lo:hi_b])


def _calls(ex: Example, names: tuple[str, ...]) -> list[tuple[str, str, dict[str, Any]]]:
    """(thought, tool, args) of the read, the fix and the test run, with the tools the agent has."""
    cmd = "run_cmd" if "run_cmd" in names else ""
    read = ("read_file", {"path": ex.path}) if "read_file" in names else (cmd, {"cmd": f"cat {ex.path}"})
    if "edit_file" in names:
        old, new = _span(ex.files[ex.path], ex.fixed)
        fix: tuple[str, dict[str, Any]] = ("edit_file", {"path": ex.path, "old": old, "new": new})
    elif "write_file" in names:
        fix = ("write_file", {"path": ex.path, "content": ex.fixed})
    else:
        fix = (cmd, {"cmd": f"cat > {ex.path} <<'EOF'\n{ex.fixed}EOF"})
    test = ("run_tests", {}) if "run_tests" in names else (cmd, {"cmd": " ".join(ex.test_cmd)})
    return [("I read the code first.", *read), (ex.thought, *fix), ("I check the fix.", *test)]


def _call(thought: str, tool: str, args: dict[str, Any]) -> str:
    block = args.get("content") if tool == "write_file" else None
    shown = {k: v for k, v in args.items() if block is None or k != "content"}
    text = f"THOUGHT: {thought}\nTOOL_CALL: {json.dumps({'tool': tool, 'args': shown})}"
    return text + (f"\n```python\n{block}```" if block is not None else "")


@cache
def demo_messages(tool_names: tuple[str, ...], reminder: bool, native: bool = False, submit: bool = False,
                  source: str = "builtin", avoid: str = "") -> tuple[Message, ...]:
    """The demo turns for an agent with these tools (run_tests, else run_cmd, runs the tests); `native`: in
    the native tool protocol (the calls as the template's tool calls, the results as tool messages);
    `submit`: tool_choice required, every reply a bare call (as the prefill makes them) and submit finishes;
    `source` "task": a real task other than `avoid` (the task at hand) instead of the built-in one."""
    from ..sandbox.workspace import Workspace
    from ..tools import ToolOptions, run_tool
    from .history import native_call

    ex = _task_example(avoid) if source == "task" else BUILTIN
    messages: list[Message] = []
    ws = Workspace.create(ex.files, test_cmd=ex.test_cmd)
    try:
        before = run_tool(ws, "run_tests", {}, ToolOptions())
        statement = ex.statement + (initial_test_note(before) if ex.note else "")
        messages.append({"role": "user", "content": statement})
        point = before.failing_check or "the first check"
        for n, (thought, tool, args) in enumerate(_calls(ex, tool_names)):
            thought = thought.replace("{point}", f"`{point}`")
            result = run_tool(ws, tool, args, ToolOptions())
            hint = next_step(tool, result.tests_passed, native, submit) if reminder else None
            if native:
                call_id = f"demo_{n}"
                messages.append({"role": "assistant", "content": "" if submit else thought,
                                 "tool_calls": [native_call(call_id, tool, args)]})
                messages.append({"role": "tool", "tool_call_id": call_id,
                                 "content": format_observation(result.text, hint, header=False)})
                continue
            messages.append({"role": "assistant", "content": _call(thought, tool, args)})
            messages.append({"role": "user", "content": format_observation(result.text, hint)})
    finally:
        ws.cleanup()
    if submit:
        messages.append({"role": "assistant", "content": "",
                         "tool_calls": [native_call("demo_3", "submit", {"summary": ex.summary})]})
        return tuple(messages)
    final = f"The tests pass: {ex.summary}" if native else f"THOUGHT: The tests pass.\nFINAL: {ex.summary}"
    messages.append({"role": "assistant", "content": final})
    return tuple(messages)
