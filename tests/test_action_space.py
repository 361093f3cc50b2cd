"""The tool agent's action spaces (--action-space tools|edit|bash) and worked examples (--demo-source):
edit_file and its refusals, the shell alone, a demo drawn from another task; on real workspaces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_harness.errors import ToolError
from agent_harness.protocol import render_system_prompt
from agent_harness.sandbox.workspace import Workspace
from agent_harness.scenarios import TaskQuery
from agent_harness.scenarios.humanevalfix import SCENARIO
from agent_harness.strategies.demo import DEMO_TASKS, demo_messages
from agent_harness.strategies.react import AgentConfig, Episode, agent_tools
from agent_harness.tools import ToolOptions, run_tool, tools_for
from agent_harness.types import Completion, GenParams

[TASK] = SCENARIO.load_tasks(TaskQuery(task_ids=("Python/2",)))  # truncate_number: `% 1.0 + 1.0` for `% 1.0`
TARGET = SCENARIO.target_file(TASK)
SOURCE = "def f(x):\n    y = x + 1\n    return y\n\n\ndef g(x):\n    y = x + 1\n    return y * 2\n"


@pytest.fixture
def ws() -> Iterator[Workspace]:
    w = Workspace.create({"m.py": SOURCE, "data.bin": "a\0b"})
    yield w
    w.cleanup()


def edit(ws: Workspace, path: str, old: str, new: str) -> str:
    return run_tool(ws, "edit_file", {"path": path, "old": old, "new": new}, ToolOptions()).text


def test_edit_file_replaces_one_exact_span(ws: Workspace) -> None:
    text = edit(ws, "m.py", "    return y * 2\n", "    return y * 3\n")
    assert text == "Edited m.py: replaced 1 line(s) with 1 line(s)."
    assert (Path(ws.root) / "m.py").read_text() == SOURCE.replace("y * 2", "y * 3")
    broken = edit(ws, "m.py", "    return y * 3\n", "    return (y\n")
    assert "syntax error" in broken and "line 8" in broken


@pytest.mark.parametrize(("path", "old", "new", "says"), [
    ("m.py", "    y = x + 1\n", "    y = x\n", "appears 2 times in m.py; give more of the lines around it"),
    ("m.py", "return z", "return y", "the old text is not in m.py. Use read_file"),
    ("m.py", "return   y * 2", "return y", "It is there with other spacing or indentation"),
    ("m.py", "", "x", "old is empty"),
    ("m.py", "return y", "return y", "appears 2 times"),  # ambiguity is told before sameness
    ("m.py", "return y * 2", "return y * 2", "old and new are the same"),
    ("../outside.py", "a", "b", "leads outside the workspace"),
    ("/etc/passwd", "root", "x", "is an absolute path"),
    ("missing.py", "a", "b", "missing.py: no such file"),
    ("data.bin", "a", "b", "is not UTF-8 text"),
])
def test_edit_file_refuses_in_one_line(ws: Workspace, path: str, old: str, new: str, says: str) -> None:
    with pytest.raises(ToolError, match=None) as e:
        edit(ws, path, old, new)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert (Path(ws.root) / "m.py").read_text() == SOURCE


def test_the_agents_refusals_are_observations() -> None:
    """Through an episode with the edit action space: each refusal is the call's ERROR observation and the
    episode goes on; the fix by edit_file then passes."""
    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    try:
        ep = Episode(TASK, ws, GenParams(max_tokens=384, seed=1), AgentConfig(action_space="edit", max_steps=5))
        calls = [{"path": TARGET, "old": "return number", "new": "return x"},  # appears once: fine, wrong
                 {"path": TARGET, "old": "nothing like it", "new": "x"},
                 {"path": "../x.py", "old": "a", "new": "b"},
                 {"path": TARGET, "old": "return x % 1.0 + 1.0", "new": "return number % 1.0"}]
        ep.begin()
        for args in calls:
            ep.advance(Completion(f"THOUGHT: t\nTOOL_CALL: {json.dumps({'tool': 'edit_file', 'args': args})}",
                                  10, 5, "stop", 0.0))
        results = [s.text for s in ep.steps if s.type == "tool_result"]
        assert results[0].startswith("Edited") and results[1].startswith("ERROR: the old text is not in")
        assert results[2].startswith("ERROR: '../x.py' leads outside the workspace") and results[3].startswith("Edited")
        assert SCENARIO.score(TASK, ws, []).passed and not ep.done
    finally:
        ws.cleanup()


def test_action_spaces_give_their_tools() -> None:
    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    try:
        names = {space: [t.name for t in agent_tools(ws, AgentConfig(action_space=space))]
                 for space in ("tools", "edit", "bash")}
        assert "edit_file" not in names["tools"] and names["tools"] == [t.name for t in tools_for(ws)]
        assert names["edit"] == [*names["tools"][:2], "edit_file", *names["tools"][2:]]
        assert names["bash"] == ["run_cmd"]
        assert "edit_file" not in render_system_prompt(tools_for(ws))  # today's prompt unchanged
        bash = Episode(TASK, ws, GenParams(), AgentConfig(action_space="bash"))
        assert "run_cmd is your only tool" in bash.system_prompt and "read_file" not in bash.system_prompt
        bash.begin()
        assert "The tests fail now at:" in bash.user_prompt  # the initial test run is a helper, not a tool
        assert all("read_file" not in m["content"] for m in bash.demo if m["role"] == "assistant")
    finally:
        ws.cleanup()


def test_the_shell_alone_fixes_and_checks() -> None:
    """The bash action space end to end on one task: the fix by a heredoc, the tests run as a command."""
    ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd)
    try:
        ep = Episode(TASK, ws, GenParams(), AgentConfig(action_space="bash"))
        fixed = TASK.oracle[1]["args"]["content"]
        replies = [f"THOUGHT: fix.\nTOOL_CALL: {json.dumps({'tool': 'run_cmd', 'args': {'cmd': c}})}" for c in
                   (f"cat > {TARGET} <<'EOF'\n{fixed}EOF", "python3 " + " ".join(TASK.test_cmd or [])[8:])]
        ep.begin()
        for r in [*replies, "THOUGHT: done.\nFINAL: fixed"]:
            ep.advance(Completion(r, 1, 1, "stop", 0.0))
        assert ep.exit_reason == "submitted" and SCENARIO.score(TASK, ws, []).passed
        assert "All tests passed." in [s.text for s in ep.steps if s.type == "tool_result"][1]
    finally:
        ws.cleanup()


@pytest.mark.parametrize("tools", [("read_file", "write_file", "run_tests"),
                                   ("read_file", "write_file", "edit_file", "run_tests"), ("run_cmd",)])
def test_the_task_demo_is_another_task_and_its_calls_work(tools: tuple[str, ...]) -> None:
    for at_hand, shown in ((DEMO_TASKS[0], DEMO_TASKS[1]), ("Python/7", DEMO_TASKS[0])):
        demo = demo_messages(tools, True, source="task", avoid=at_hand)
        [task] = SCENARIO.load_tasks(TaskQuery(task_ids=(shown,)))
        text = "\n".join(m["content"] for m in demo)
        assert task.metadata["entry_point"] in text and f"Task {at_hand}" not in text
        assert demo[0]["content"].startswith("Example task: the function") and "The tests fail now at" in text
        observations = [m["content"] for m in demo if m["role"] == "user"][1:]
        assert "Tests PASSED" in observations[-1] or "All tests passed." in observations[-1]
        assert "ERROR" not in text
    builtin = demo_messages(tools, True)
    assert "last" in builtin[0]["content"] and "The tests fail now" not in builtin[0]["content"]
