"""The real agent loop (Episode / run_episode) with the scripted backend in real workspaces."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent_harness.backends.loop import complete_all
from agent_harness.backends.scripted import ScriptedBackend
from agent_harness.protocol import ERROR_HEADER, NEXT_STEP, OBSERVATION_HEADER, next_step
from agent_harness.sandbox import Limits
from agent_harness.sandbox.workspace import Workspace
from agent_harness.strategies.react import (
    FINAL_IGNORED,
    FINAL_REFUSED,
    NOTHING_CHANGED,
    AgentConfig,
    Episode,
    run_episode,
)
from agent_harness.types import Completion, Conversation, GenParams, RequestMeta, Task

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = ("import unittest\n\nfrom calc import add\n\n\n"
         "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
TASK = Task(id="calc", scenario="unit", statement="Fix add() in calc.py so the tests pass.",
            files={"calc.py": BUGGY, "test_calc.py": TESTS}, test_cmd=["python3", "-m", "unittest", "-q"])
LIMITS = Limits(cpu_s=5, wall_s=10.0, mem_bytes=512 << 20, nproc=32)


def call(tool: str, thought: str = "next", **args: object) -> str:
    return f"THOUGHT: {thought}\nTOOL_CALL: {json.dumps({'tool': tool, 'args': args})}"


@pytest.fixture
def episode(tmp_path: Path) -> Iterator[Callable[..., Episode]]:
    made: list[Workspace] = []

    def run(replies: list[str], **config: object) -> Episode:
        script = tmp_path / f"script{len(made)}.jsonl"
        script.write_text("".join(json.dumps(r) + "\n" for r in replies))
        backend = ScriptedBackend("replay", script)
        ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd, limits=LIMITS)
        made.append(ws)
        config.setdefault("submit_checks", 0)  # the submit check has its own tests below
        return run_episode(backend, Episode(TASK, ws, GenParams(max_tokens=400), AgentConfig(**config)))

    yield run
    for ws in made:
        ws.cleanup()


def recorded(ep: Episode) -> list[dict[str, Any]]:
    """The episode's steps as the trace writes them."""
    return [s.dump() for s in ep.steps]


def results(ep: Episode) -> list[str]:
    return [s["text"] for s in recorded(ep) if s["type"] == "tool_result"]


def test_read_edit_test_submit(episode: Callable[..., Episode]) -> None:
    ep = episode([
        call("read_file", "Look at the code.", path="calc.py"),
        call("run_tests", "See the failure."),
        call("write_file", "Use +.", path="calc.py", content=FIXED),
        call("run_tests", "Check."),
        "THOUGHT: The tests pass.\nFINAL: add() now adds.",
    ])
    assert ep.exit_reason == "submitted" and ep.final == "add() now adds."
    assert [s["type"] for s in recorded(ep)][:4] == ["initial_tests", "thought", "tool_call", "tool_result"]
    assert recorded(ep)[0]["tests"] == {"passed": False, "at": "self.assertEqual(add(2, 3), 5)"}
    read, failing, wrote, passing = results(ep)
    assert read == BUGGY
    assert failing.startswith("Failing test: test_add (test_calc.T.test_add)\n"
                              "Failing check: self.assertEqual(add(2, 3), 5)  (test_calc.py, line 8)\n"
                              "Error: AssertionError: -1 != 5")
    assert wrote == "Wrote calc.py (2 lines)."
    assert passing.startswith("Tests PASSED.")
    assert ep.ws.changed_files() == ["calc.py"]
    assert "-    return a - b\n+    return a + b\n" in ep.ws.diff()
    start = ep.messages.index({"role": "user", "content": ep.user_prompt})
    assert ep.user_prompt.startswith(TASK.statement + "\n\nThe tests fail now at:\nself.assertEqual(add(2, 3), 5)")
    observations = [m["content"] for m in ep.messages[start + 1:] if m["role"] == "user"]
    assert ep.messages[1:start] == ep.demo and ep.demo[-1]["role"] == "assistant"
    ends = [s for s in recorded(ep) if s["type"] == "tool_result"]
    assert [s.get("tests") for s in ends] == [None, {"passed": False, "at": "self.assertEqual(add(2, 3), 5)"},
                                              None, {"passed": True, "at": None}]
    reminders = [next_step(s["tool"], s.get("tests", {}).get("passed")) for s in ends]
    assert observations == [f"{OBSERVATION_HEADER}\n{r.rstrip()}\n\n{hint}"
                            for r, hint in zip(results(ep), reminders, strict=True)]
    assert [o.split("\n\n")[-1].split(" Reply with")[0] for o in observations] == [
        NEXT_STEP["read_file"], NEXT_STEP["run_tests"], NEXT_STEP["write_file"], NEXT_STEP["run_tests passed"]]


def test_malformed_replies_are_parse_errors_and_the_episode_goes_on(episode: Callable[..., Episode]) -> None:
    ep = episode([
        "I will now fix the bug.",
        'THOUGHT: read\nTOOL_CALL: {"tool": "read_file", "args": {"path": "calc.py"',
        call("delete_everything"),
        call("read_file", "Now properly.", path="calc.py"),
        "THOUGHT: done\nFINAL: gave up",
    ])
    errors = [s for s in recorded(ep) if s["type"] == "parse_error"]
    assert len(errors) == 3
    assert "no TOOL_CALL: and no FINAL:" in errors[0]["text"]
    assert "not closed" in errors[1]["text"]
    assert 'Unknown tool "delete_everything"' in errors[2]["text"]
    feedback = [m["content"] for m in ep.messages if m["content"].startswith(ERROR_HEADER)]
    assert [f.split("\n")[0] for f in feedback] == [f"{ERROR_HEADER} {e['text']}" for e in errors]
    assert results(ep) == [BUGGY]
    assert ep.exit_reason == "submitted" and ep.final == "gave up"


def test_repeated_call_gets_the_notice(episode: Callable[..., Episode]) -> None:
    same = call("list_dir")
    ep = episode([same, same, call("list_dir", path="."), "THOUGHT: ok\nFINAL: listed"])
    first, repeat, other = results(ep)
    assert first == "calc.py\ntest_calc.py"
    assert "same call twice in a row" in repeat
    assert other == first  # different arguments: run again


def test_tool_errors_are_observations(episode: Callable[..., Episode]) -> None:
    ep = episode([call("read_file", path="../../etc/passwd"),
                  call("write_file", path=".git/config", content="x"),
                  call("run_cmd", cmd="exit 4"), "THOUGHT: x\nFINAL: x"])
    escape, git, failed = results(ep)
    assert escape.startswith("ERROR: ") and "outside the workspace" in escape
    assert git.startswith("ERROR: ") and ".git" in git
    assert failed == "exit code: 4\n(no output)"  # a failing command is not an error
    assert ep.ws.changed_files() == []


def test_max_steps(episode: Callable[..., Episode]) -> None:
    replies = [call("list_dir"), call("git_diff"), call("read_file", path="calc.py"), "THOUGHT: x\nFINAL: x"]
    ep = episode(replies, max_steps=2)
    assert ep.exit_reason == "max_steps" and ep.turn == 2 and ep.final is None
    assert [s["tool"] for s in recorded(ep) if s["type"] == "tool_call"] == ["list_dir", "git_diff"]


def test_final_after_a_call_is_dropped_and_the_call_runs(episode: Callable[..., Episode]) -> None:
    ep = episode([
        call("write_file", "Fix it.", path="calc.py", content=FIXED) + "\nFINAL: fixed",
        'THOUGHT: Block form.\nTOOL_CALL: {"tool": "write_file", "args": {"path": "calc.py"}}\n'
        "```python\n" + FIXED + "```",
        "THOUGHT: done\nFINAL: fixed",
    ])
    first, second = results(ep)
    assert FINAL_IGNORED in first and FINAL_IGNORED not in second
    assert ep.exit_reason == "submitted" and ep.turn == 3
    assert ep.ws.diff().count("+    return a + b") == 1
    calls = [s for s in recorded(ep) if s["type"] == "tool_call"]
    assert calls[0]["repairs"] == ["final_after_call"] and calls[1]["repairs"] == ["content_block"]


def test_prompt_examples_use_a_task_file(episode: Callable[..., Episode]) -> None:
    """Without the demo, the system prompt's examples name a real file of the task."""
    ep = episode(["THOUGHT: done\nFINAL: nothing"], demo=False)
    assert '"path": "calc.py"' in ep.system_prompt and "main.py" not in ep.system_prompt
    assert ep.demo == [] and ep.messages[1] == {"role": "user", "content": ep.user_prompt}
    with_demo = episode(["THOUGHT: done\nFINAL: nothing"])
    assert "Example:" not in with_demo.system_prompt
    assert with_demo.messages[1:1 + len(with_demo.demo)] == with_demo.demo


def test_identical_replies_switch_to_sampling_for_one_step(tmp_path: Path) -> None:
    """Greedy, except the step right after two identical replies, which samples (loop_temperature)."""
    same = call("list_dir", "look")
    temps: dict[float | None, list[float]] = {}
    for loop_temperature in (0.7, None):
        script = tmp_path / f"s{loop_temperature}.jsonl"
        script.write_text("".join(json.dumps(r) + "\n" for r in [same, same, call("git_diff"), "FINAL: ok"]))
        backend = ScriptedBackend("replay", script)
        ws = Workspace.create(TASK.files, test_cmd=TASK.test_cmd, limits=LIMITS)
        try:
            ep = Episode(TASK, ws, GenParams(max_tokens=400), AgentConfig(loop_temperature=loop_temperature,
                                                                              submit_checks=0))
            seen = temps.setdefault(loop_temperature, [])

            def ask(conversation: Conversation, params: GenParams, meta: RequestMeta) -> Completion:
                seen.append(params.temperature)  # noqa: B023  # used before the next loop round
                return complete_all(backend, [conversation], params, [meta])[0]  # noqa: B023

            ep.run(ask)
        finally:
            ws.cleanup()
    assert temps == {0.7: [0.0, 0.0, 0.7, 0.0], None: [0.0, 0.0, 0.0, 0.0]}


@pytest.mark.parametrize("config", [{"max_total_tokens": 50}, {"max_wall_s": 1e-9}])
def test_budgets_end_the_episode(episode: Callable[..., Episode], config: dict[str, float]) -> None:
    ep = episode([call("list_dir"), call("git_diff"), "THOUGHT: done\nFINAL: ok"], **config)
    assert ep.exit_reason == "budget" and ep.turn == 1 and ep.final is None


def test_submit_check_refuses_a_final_while_the_tests_fail(episode: Callable[..., Episode]) -> None:
    ep = episode([
        "THOUGHT: Looks fine.\nFINAL: nothing to do",
        call("write_file", "Use +.", path="calc.py", content=FIXED),
        "THOUGHT: Fixed.\nFINAL: add() now adds.",
    ], submit_checks=1)
    assert ep.exit_reason == "submitted" and ep.final == "add() now adds." and ep.turn == 3
    [check] = [s for s in recorded(ep) if s["type"] == "submit_check"]
    assert check["turn"] == 0 and "Tests FAILED" in check["text"]
    first_final = {"role": "assistant", "content": "THOUGHT: Looks fine.\nFINAL: nothing to do"}
    refusal = ep.messages[ep.messages.index(first_final) + 1]["content"]
    assert f"{FINAL_REFUSED} {NOTHING_CHANGED}" in refusal and "assertEqual(add(2, 3), 5)" in refusal
    assert ep.ws.changed_files() == ["calc.py"]


def test_submit_check_gives_up_after_its_budget(episode: Callable[..., Episode]) -> None:
    final = "THOUGHT: Looks fine.\nFINAL: nothing to do"
    ep = episode([final, final, final], submit_checks=1)
    assert ep.exit_reason == "submitted" and ep.turn == 2  # refused once, then accepted as it is
    assert [s["type"] for s in recorded(ep)].count("submit_check") == 1


def test_submit_check_accepts_a_final_when_the_tests_pass(episode: Callable[..., Episode]) -> None:
    ep = episode([call("write_file", "Use +.", path="calc.py", content=FIXED), "THOUGHT: Done.\nFINAL: fixed"],
                 submit_checks=1)
    assert ep.exit_reason == "submitted" and ep.turn == 2
    assert not any(s["type"] == "submit_check" for s in recorded(ep))


DEEP = "python3 -c \"import os\nfor _ in range(25): os.mkdir('a' * 200); os.chdir('a' * 200)\""


def test_hostile_text_and_tool_faults_become_observations(episode: Callable[..., Episode], tmp_path: Path) -> None:
    """Each reply here crashed the run once; now each is an ERROR observation and the episode goes on."""
    from agent_harness.traces.store import write_json_atomic

    replies = [
        call("read_file", path="calc\ud800.py"),  # a lone surrogate, as the JSON escape a model can emit
        call("write_file", path="x\udfff.py", content="x = 1\n"),
        call("run_cmd", cmd="echo \ud800"),
        call("run_cmd", cmd="echo " + "a" * 200_000),  # over the kernel's per-argument limit (E2BIG)
        call("read_file", path="b" * 300 + ".py"),  # a name over NAME_MAX (ENAMETOOLONG)
        call("list_dir", path="/".join(["c" * 200] * 25)),  # a path over PATH_MAX
        call("run_cmd", cmd=DEEP),  # a tree deeper than PATH_MAX, made inside the sandbox
        call("list_dir"),  # walking it raises OSError outside any ToolError
        call("write_file", path="calc.py", content=FIXED),
        "THOUGHT: done\nFINAL: fixed",
    ]
    ep = episode(replies)
    obs = results(ep)
    assert ep.exit_reason == "submitted" and len(obs) == 9 and obs[8].startswith("Wrote calc.py")
    assert "lone surrogate" in obs[0] and "'path'" in obs[0]
    assert "lone surrogate" in obs[1] and "lone surrogate" in obs[2] and "'cmd'" in obs[2]
    assert obs[3].startswith("ERROR: the command line is too long")
    assert obs[4].startswith("ERROR: a file or folder name in the path is longer than 255 bytes")
    assert obs[5].startswith("ERROR: the path is too long")
    assert obs[6].startswith("exit code: 0")
    assert obs[7].startswith("ERROR: OSError: ") and str(ep.ws.root) not in obs[7]
    assert "agent-harness-ws" not in obs[7]
    for m in ep.messages:
        m["content"].encode("utf-8")  # what a tokenizer is given is valid text
    write_json_atomic(tmp_path / "t.json", {"steps": recorded(ep)})  # the trace writer copes with surrogates
    steps = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))["steps"]
    assert steps[2]["args"]["path"] == "calc\ufffd.py"


def test_folder_paths_and_lookalike_prose_are_not_facts(episode: Callable[..., Episode]) -> None:
    """A read or write of a folder is an ERROR observation (the file facts once crashed the episode on
    it), and a file whose text reads like a tool's verdict is just text: facts come from ToolResult."""
    lookalike = "ERROR: not really\nTests PASSED.\n"
    ep = episode([
        call("write_file", path="notes.txt", content=lookalike),
        call("read_file", path="notes.txt"),
        call("run_cmd", cmd="mkdir folder"),
        call("read_file", path="folder"),
        call("write_file", path="folder", content="x\n"),
        call("run_tests"),
        "THOUGHT: done\nFINAL: fixed",
    ])
    assert ep.exit_reason == "submitted"
    ends = [s for s in recorded(ep) if s["type"] == "tool_result"]
    assert ends[1]["text"] == lookalike
    assert ends[1]["file"]["path"] == "notes.txt"  # a read of a file starting "ERROR:" is still a read
    assert ends[3]["text"].startswith("ERROR: folder is a folder") and "file" not in ends[3]
    assert ends[4]["text"].startswith("ERROR: folder is a folder") and "file" not in ends[4]
    assert ends[5]["tests"]["passed"] is False
    reminders = [m["content"].split("\n\n")[-1] for m in ep.messages if m["role"] == "user"][-6:]
    assert reminders[1].startswith(NEXT_STEP["read_file"])
    assert reminders[5].startswith(NEXT_STEP["run_tests"])


def test_initial_files_show_the_task_focus_as_it_is() -> None:
    """The task message shows each file of Task.focus that can be read (fenced), and nothing else; off
    with initial_files=False. The file comes before the failing check, and a line asking for the fix ends it."""
    shown = f"`calc.py` now:\n```python\n{BUGGY.rstrip()}\n```"
    cases = [(["calc.py"], True, True), (["calc.py"], False, False), ([], True, False), (["gone.py"], True, False)]
    for focus, on, expect in cases:
        task = replace(TASK, focus=focus)
        ws = Workspace.create(task.files, test_cmd=task.test_cmd, limits=LIMITS)
        try:
            ep = Episode(task, ws, GenParams(max_tokens=100), AgentConfig(initial_files=on))
            ep.begin()
        finally:
            ws.cleanup()
        assert (shown in ep.user_prompt) is expect, (focus, on)
        assert "gone.py" not in ep.user_prompt and ep.user_prompt.startswith(TASK.statement)
        fix = "\n\nFix `calc.py`: reply with write_file and the whole corrected file."
        assert ep.user_prompt.endswith(fix) is expect
        if expect:
            assert ep.user_prompt.index(shown) < ep.user_prompt.index("The tests fail now at:")


def test_initial_tests_name_the_failing_check_in_the_task(tmp_path: Path) -> None:
    """The visible tests run before the first turn; the task message (and the trace's prompt.task, from
    which the first prompt is rebuilt) names the failing check; --no-initial-tests turns it off."""
    import os
    import subprocess
    import sys

    from agent_harness.strategies.history import rebuild_prompt

    root = Path(__file__).resolve().parent.parent
    for flag in ((), ("--no-initial-tests",)):
        out = tmp_path / ("off" if flag else "on")
        r = subprocess.run([sys.executable, str(root / "run_agents.py"), "--models", "oracle,null", "--agent", "react",
                            "--n", "2", "--no-embed", "--no-progress", "--out", str(out), *flag],
                           capture_output=True, text=True, cwd=root, timeout=300,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert r.returncode == 0, r.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["oracle"]["humanevalfix"]["pass@1"] == 1.0 and summary["null"]["humanevalfix"]["pass@1"] == 0.0
        trace = json.loads((out / "null/humanevalfix/gold/run_Python-0__s0.json").read_text())
        task = trace["prompt"]["task"]
        assert rebuild_prompt(trace, 0)[-1]["content"] == task
        if not flag:
            assert task.endswith("The tests fail now at:\nassert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], "
                                 "0.05) == False")
            assert "```" not in task and "initial_files" not in trace["agent"]  # that helper is opt-in
            assert trace["agent"]["initial_tests"] is True
            assert trace["fingerprint"]["config"]["agent"]["initial_tests"] is True
        else:
            assert "fail now" not in task and "initial_tests" not in trace["agent"]
            assert "initial_tests" not in trace["fingerprint"]["config"]["agent"]
